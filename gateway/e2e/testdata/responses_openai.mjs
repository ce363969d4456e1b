// The npm openai client's Responses API against a duet gateway serving the echo engine: create, the stream
// helper and its finalResponse, parse with a JSON schema, and a tool round trip. Prints one JSON object of
// results for gateway/e2e/responses_e2e_test.go.
import { createRequire } from 'node:module';
const require = createRequire(process.cwd() + '/');
const { default: OpenAI } = require('openai');

const client = new OpenAI({ baseURL: process.argv[2], apiKey: 'unused', maxRetries: 0, timeout: 30000 });
const out = {};
// The text of a response's messages: output_text itself is set on create's answers, not on the stream
// helper's final response (unless it parses).
const textOf = (r) => r.output.filter((o) => o.type === 'message').flatMap((o) => o.content)
  .filter((c) => c.type === 'output_text').map((c) => c.text).join('');

// create: output_text is the client's own convenience, read from the output items.
const created = await client.responses.create({ model: 'echo', input: 'the quick brown fox', temperature: 0 });
out.createText = created.output_text;
out.createStatus = created.status;

// stream: the helper accumulates the events into the final response; the deltas add up to its text.
let deltas = '';
const stream = client.responses.stream({ model: 'echo', input: 'the quick brown fox', temperature: 0 });
stream.on('response.output_text.delta', (e) => { deltas += e.delta; });
out.streamText = textOf(await stream.finalResponse());
out.streamDeltas = deltas;

// stream with reasoning: the helper fills the reasoning item's reasoning_text from its deltas.
const thinking = client.responses.stream({ model: 'echo', input: 'think', temperature: 0, reasoning: { effort: 'low' } });
const events = [];
for await (const e of thinking) events.push(e.type);
out.streamEvents = events;
const thought = await thinking.finalResponse();
out.streamReasoning = thought.output.find((o) => o.type === 'reasoning').content.map((c) => c.text).join('');

// parse: a json_schema answer comes back parsed.
const parsed = await client.responses.parse({
  model: 'echo',
  input: 'ok',
  text: {
    format: { type: 'json_schema', name: 'a', strict: true, schema: { type: 'object', properties: { answer: { type: 'string' } }, required: ['answer'], additionalProperties: false } },
  },
});
out.parsed = parsed.output_parsed;

// A tool round trip: the call, the client's answer to it, the model's reply.
const tools = [{
  type: 'function', name: 'get_weather', strict: true,
  parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'], additionalProperties: false },
}];
const input = [{ role: 'user', content: 'call: get_weather {"city":"Lima"}' }];
const first = await client.responses.parse({ model: 'echo', input, tools, temperature: 0 });
const call = first.output.find((o) => o.type === 'function_call');
out.toolCall = { name: call.name, arguments: call.arguments };
// openai 6.30.1 nests the parsed call in parsed_arguments, which then holds the arguments.
const pa = call.parsed_arguments;
out.toolParsed = pa && pa.type === 'function_call' ? pa.parsed_arguments : pa;
const answer = (c) => ({ type: 'function_call_output', call_id: c.call_id, output: `sunny in ${JSON.parse(c.arguments).city}` });
const second = await client.responses.create({ model: 'echo', input: [...input, ...first.output, answer(call)], tools, temperature: 0 });
out.toolAnswer = second.output_text;

// The same, streamed: the helper assembles the call from its argument deltas.
const streamed = await client.responses.stream({ model: 'echo', input, tools, temperature: 0 }).finalResponse();
const scall = streamed.output.find((o) => o.type === 'function_call');
out.streamedToolCall = { name: scall.name, arguments: scall.arguments };
const reply = await client.responses.stream({ model: 'echo', input: [...input, ...streamed.output, answer(scall)], tools, temperature: 0 }).finalResponse();
out.streamedToolReply = textOf(reply);

// Errors: an API error with the field named.
try {
  await client.responses.create({ model: 'echo', input: 'hi', store: true });
  out.storeError = null;
} catch (e) {
  out.storeError = { status: e.status, param: e.param };
}

process.stdout.write(JSON.stringify(out));
