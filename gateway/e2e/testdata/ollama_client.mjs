// The npm ollama client against a duet gateway serving the echo engine: every call an Ollama app makes
// (chat and generate, streamed and not; list, show, ps, version; a tool round trip; JSON and schema formats;
// thinking; an error). Prints one JSON object of results for gateway/e2e/ollama_e2e_test.go.
import { createRequire } from 'node:module';
const require = createRequire(process.cwd() + '/');
const { Ollama } = require('ollama');

const ollama = new Ollama({ host: process.argv[2] });
const model = 'echo:latest';
const greedy = { temperature: 0 };
const out = {};

// Streams are read as an app reads them: the text of every chunk, and the last chunk's metadata.
async function drain(stream, pick) {
  let text = '';
  let chunks = 0;
  let last;
  for await (const part of stream) {
    text += pick(part);
    chunks++;
    last = part;
  }
  return { text, chunks, done: last.done, done_reason: last.done_reason, eval_count: last.eval_count };
}

out.version = (await ollama.version()).version;
out.list = (await ollama.list()).models.map((m) => ({ name: m.name, model: m.model, family: m.details.family, digest: m.digest.length }));
const shown = await ollama.show({ model });
out.show = { capabilities: shown.capabilities, context: shown.model_info['echo.context_length'], parameters: shown.parameters };
out.ps = (await ollama.ps()).models.map((m) => ({ name: m.name, context_length: m.context_length, expires: new Date(m.expires_at) > new Date() }));

const hello = [{ role: 'user', content: 'Why is the sea salty?' }];
const chat = await ollama.chat({ model, messages: hello, options: greedy });
out.chat = { content: chat.message.content, role: chat.message.role, done: chat.done, done_reason: chat.done_reason,
  counted: chat.prompt_eval_count > 0 && chat.eval_count > 0, timed: chat.total_duration > 0 };
out.chatStream = await drain(await ollama.chat({ model, messages: hello, options: greedy, stream: true }), (p) => p.message.content);
out.chatLength = await ollama.chat({ model, messages: hello, options: { ...greedy, num_predict: 2 } }).then((r) => ({ content: r.message.content, done_reason: r.done_reason }));

const gen = await ollama.generate({ model, prompt: 'The sky is blue', options: greedy });
out.generate = { response: gen.response, done_reason: gen.done_reason };
out.generateStream = await drain(await ollama.generate({ model, prompt: 'The sky is blue', options: greedy, stream: true }), (p) => p.response);
out.generateRaw = (await ollama.generate({ model, prompt: 'raw words', raw: true, options: greedy })).response;

// A tool round trip: the model calls the tool (its arguments an object), the app runs it and sends the
// result back by the tool's name, the model answers with it.
const tools = [{
  type: 'function',
  function: { name: 'get_weather', description: 'The weather in a city',
    parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] } },
}];
const run = { get_weather: ({ city }) => `sunny in ${city}` };
const ask = [{ role: 'user', content: 'call: get_weather {"city":"Lima"}' }];
const called = await ollama.chat({ model, messages: ask, tools, options: greedy });
out.toolCalls = called.message.tool_calls.map((c) => c.function);
const results = called.message.tool_calls.map((c) => ({ role: 'tool', tool_name: c.function.name, content: run[c.function.name](c.function.arguments) }));
out.toolAnswer = (await ollama.chat({ model, messages: [...ask, called.message, ...results], tools, options: greedy })).message.content;
// Streamed, a call arrives whole in one chunk.
const streamedCalls = [];
for await (const part of await ollama.chat({ model, messages: ask, tools, options: greedy, stream: true })) {
  streamedCalls.push(...(part.message.tool_calls ?? []).map((c) => c.function));
}
out.streamedToolCalls = streamedCalls;

out.formatJSON = JSON.parse((await ollama.chat({ model, messages: [{ role: 'user', content: 'hi' }], format: 'json', options: greedy })).message.content);
const schema = { type: 'object', properties: { city: { type: 'string' }, days: { type: 'integer' } }, required: ['city', 'days'] };
out.formatSchema = JSON.parse((await ollama.generate({ model, prompt: 'forecast', format: schema, options: greedy })).response);

const thought = await ollama.chat({ model, messages: [{ role: 'user', content: 'think' }], think: true, options: greedy });
out.thinking = { thinking: thought.message.thinking, content: thought.message.content };
out.thinkingStream = await drain(await ollama.chat({ model, messages: [{ role: 'user', content: 'think' }], think: 'low', options: greedy, stream: true }),
  (p) => p.message.thinking ?? '');

// A model loads with no messages, as apps preload it.
out.load = (await ollama.chat({ model, messages: [] })).done_reason;

try {
  await ollama.chat({ model: 'llama3:8b', messages: hello });
  out.missing = 'no error';
} catch (e) {
  out.missing = { name: e.name, status: e.status_code, error: e.error };
}
try {
  await ollama.chat({ model, messages: hello, options: { temperature: 'hot' } });
  out.badOption = 'no error';
} catch (e) {
  out.badOption = { status: e.status_code, error: e.error };
}

process.stdout.write(JSON.stringify(out));
