// The npm openai client's tool and structured-output helpers against a duet gateway serving the echo
// engine. Prints one JSON object of results for gateway/e2e/tools_e2e_test.go.
import { createRequire } from 'node:module';
const require = createRequire(process.cwd() + '/');
const { default: OpenAI } = require('openai');

const client = new OpenAI({ baseURL: process.argv[2], apiKey: 'unused', maxRetries: 0, timeout: 30000 });
const weather = {
  type: 'function',
  function: {
    name: 'get_weather',
    strict: true,
    parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'], additionalProperties: false },
  },
};
const out = {};

// runTools: the client calls the function the model asked for and sends its result back.
const runnable = {
  type: 'function',
  function: { ...weather.function, function: (args) => `sunny in ${args.city}`, parse: JSON.parse },
};
const ask = [{ role: 'user', content: 'call: get_weather {"city":"Lima"}' }];
out.runTools = await client.chat.completions.runTools({ model: 'echo', messages: ask, tools: [runnable], temperature: 0 }).finalContent();
out.runToolsStream = await client.chat.completions
  .runTools({ model: 'echo', messages: ask, tools: [runnable], stream: true, temperature: 0 })
  .finalContent();

// parse: strict tool arguments and a json_schema answer come back parsed.
const parsed = await client.chat.completions.parse({ model: 'echo', messages: ask, tools: [weather] });
out.parsedArguments = parsed.choices[0].message.tool_calls[0].function.parsed_arguments;
const answer = await client.chat.completions.parse({
  model: 'echo',
  messages: [{ role: 'user', content: 'ok' }],
  response_format: {
    type: 'json_schema',
    json_schema: { name: 'a', strict: true, schema: { type: 'object', properties: { answer: { type: 'string' } }, required: ['answer'], additionalProperties: false } },
  },
});
out.parsedContent = answer.choices[0].message.parsed;

// stream: the helper assembles streamed tool calls; reasoning_content arrives in deltas.
const stream = client.chat.completions.stream({ model: 'echo', messages: ask, tools: [weather] });
const final = await stream.finalChatCompletion();
out.streamedToolCalls = final.choices[0].message.tool_calls.map((c) => ({ name: c.function.name, arguments: c.function.arguments }));
let reasoning = '';
const thinking = await client.chat.completions.create({
  model: 'echo', messages: [{ role: 'user', content: 'think' }], stream: true, temperature: 0, reasoning_effort: 'low',
});
for await (const chunk of thinking) reasoning += chunk.choices[0]?.delta?.reasoning_content ?? '';
out.streamedReasoning = reasoning;

process.stdout.write(JSON.stringify(out));
