// The npm Anthropic client against a duet gateway serving the echo engine: messages.create, messages.stream
// with finalMessage(), a tool round trip both ways, thinking, countTokens and an error. Prints one JSON object
// of results for gateway/e2e/anthropic_e2e_test.go. The echo engine fills max_tokens, so each request asks for as
// many tokens as its answer has.
import { createRequire } from 'node:module';
const require = createRequire(process.cwd() + '/');
const { default: Anthropic } = require('@anthropic-ai/sdk');

const client = new Anthropic({ baseURL: process.argv[2], apiKey: 'unused', maxRetries: 0, timeout: 30000 });
const out = {};
const summary = (m) => ({
  text: m.content.filter((b) => b.type === 'text').map((b) => b.text).join(''),
  stop_reason: m.stop_reason,
  output_tokens: m.usage.output_tokens,
});

// create and stream: the same message.
const hello = { model: 'echo', max_tokens: 2, temperature: 0, system: 'Be brief.', messages: [{ role: 'user', content: 'Hello there' }] };
const created = await client.messages.create(hello);
out.created = summary(created);
const stream = client.messages.stream(hello);
let streamedText = '';
stream.on('text', (t) => (streamedText += t));
out.streamed = summary(await stream.finalMessage());
out.streamedText = streamedText;

// A tool round trip: tool_use, then the tool's result, then the answer; created and streamed.
const tools = [{
  name: 'get_weather',
  description: 'The weather in a city',
  input_schema: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] },
}];
const ask = { model: 'echo', max_tokens: 64, temperature: 0, tools, messages: [{ role: 'user', content: 'call: get_weather {"city":"Lima"}' }] };
const roundTrip = async (send) => {
  const first = await send(ask);
  const call = first.content.find((b) => b.type === 'tool_use');
  const summaryOfCall = { name: call.name, input: call.input, stop_reason: first.stop_reason };
  const answer = await send({
    ...ask,
    max_tokens: 3,
    messages: [
      ...ask.messages,
      { role: 'assistant', content: first.content },
      { role: 'user', content: [{ type: 'tool_result', tool_use_id: call.id, content: `sunny in ${call.input.city}` }] },
    ],
  });
  return [summaryOfCall, answer.content.map((b) => b.text).join('')];
};
[out.toolUse, out.toolAnswer] = await roundTrip((p) => client.messages.create(p));
[out.streamedToolUse, out.streamedAnswer] = await roundTrip((p) => client.messages.stream(p).finalMessage());

// Thinking: a signed thinking block before the text.
const think = { model: 'echo', max_tokens: 3, temperature: 0, thinking: { type: 'adaptive' }, messages: [{ role: 'user', content: 'think' }] };
const thought = (m) => ({
  thinking: m.content[0].thinking,
  signed: m.content[0].type === 'thinking' && m.content[0].signature.length > 0,
  text: m.content[1]?.text,
});
out.thinking = thought(await client.messages.create(think));
out.streamedThinking = thought(await client.messages.stream(think).finalMessage());

// countTokens counts the prompt the generation saw.
const counted = await client.messages.countTokens({ model: 'echo', system: hello.system, messages: hello.messages });
out.countMatches = counted.input_tokens === created.usage.input_tokens + created.usage.cache_read_input_tokens && counted.input_tokens > 0;

// An error reads as the client's APIError, with Anthropic's type.
try {
  await client.messages.create({ ...hello, model: 'claude-9' });
  out.error = 'no error';
} catch (e) {
  out.error = { status: e.status, type: e.type };
}

process.stdout.write(JSON.stringify(out));
