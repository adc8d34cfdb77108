// End-to-end proof of tool calls, reasoning content and the sampling fields of issue 15
// in `nanovllm serve`, through the official OpenAI SDK, on the random tiny Qwen3.
//
// Usage: node tests/e2e/tools.mjs PORT MODEL_NAME [API_KEY]
//
// A random model writes no tool calls or <think> blocks of its own, so the parsing paths
// are driven two ways: tool_choice "required" / a named function (decoding constrained to
// well-formed calls whose arguments match the tool's schema), and guided_regex forcing an
// exact answer text (a call among prose, a malformed call, an unknown function, a think
// block) that the parsers must split. Every check runs streaming and non-streaming, and the
// stream must assemble to the same message. Then logit_bias, min_tokens,
// truncate_prompt_tokens and continuous_usage_stats. One line per check, "ok N" last; exit
// status 1 at the first failure.
import OpenAI from 'openai';
import Ajv2020 from 'ajv/dist/2020.js';
import assert from 'node:assert/strict';

const [port, model, apiKey] = process.argv.slice(2);
const client = new OpenAI({ baseURL: `http://127.0.0.1:${port}/v1`, apiKey: apiKey ?? 'none', maxRetries: 0,
                            timeout: 300_000 });
const ajv = new Ajv2020({ strict: false });
let checks = 0;
async function check(name, fn) {
  try {
    await fn();
  } catch (e) {
    console.log(`FAIL ${name}: ${e.stack ?? e}`);
    process.exit(1);
  }
  checks++;
  console.log(`pass ${name}`);
}

const tools = [
  { type: 'function', function: { name: 'get_weather', description: 'Weather in a city',
    parameters: { type: 'object', properties: { city: { type: 'string', maxLength: 12 },
                                                unit: { type: 'string', enum: ['c', 'f'] } },
                  required: ['city', 'unit'], additionalProperties: false } } },
  { type: 'function', function: { name: 'add', description: 'Adds two integers',
    parameters: { type: 'object', properties: { a: { type: 'integer', minimum: -999, maximum: 999 },
                                                b: { type: 'integer', minimum: -999, maximum: 999 } },
                  required: ['a', 'b'], additionalProperties: false } } },
];
const schemaOf = Object.fromEntries(tools.map((t) => [t.function.name, ajv.compile(t.function.parameters)]));
const user = [{ role: 'user', content: 'What is the weather in Paris?' }];
const noThinking = { chat_template_kwargs: { enable_thinking: false } };

// A stream's chunks assembled into the message the non-streamed answer has.
async function assemble(stream) {
  const m = { content: '', reasoning_content: '', tool_calls: [] };
  let finish = null, sawRole = false;
  for await (const chunk of stream) {
    for (const c of chunk.choices) {
      const d = c.delta ?? {};
      if (d.role) sawRole = true;
      if (d.content) m.content += d.content;
      if (d.reasoning_content) m.reasoning_content += d.reasoning_content;
      for (const t of d.tool_calls ?? []) {
        if (!m.tool_calls[t.index]) {
          assert.ok(t.id?.startsWith('call_') && t.type === 'function' && t.function?.name, `first delta of a call: ${JSON.stringify(t)}`);
          m.tool_calls[t.index] = { id: t.id, type: 'function', function: { name: t.function.name, arguments: '' } };
        }
        m.tool_calls[t.index].function.arguments += t.function?.arguments ?? '';
      }
      if (c.finish_reason) finish = c.finish_reason;
    }
  }
  assert.ok(sawRole, 'the stream opened with the role');
  return { message: m, finish };
}

// Non-streamed and streamed answers of one request, compared; returns the non-streamed choice.
async function both(request) {
  const whole = await client.chat.completions.create({ model, ...request });
  const choice = whole.choices[0];
  const streamed = await assemble(await client.chat.completions.create({ model, ...request, stream: true }));
  const m = choice.message;
  assert.equal(streamed.finish, choice.finish_reason, 'finish_reason');
  assert.equal(streamed.message.content, m.content ?? '', 'content');
  assert.equal(streamed.message.reasoning_content, m.reasoning_content ?? '', 'reasoning_content');
  assert.deepEqual(streamed.message.tool_calls.map((t) => t.function), (m.tool_calls ?? []).map((t) => t.function), 'tool_calls');
  return choice;
}

function checkCall(call, only) {
  assert.ok(call.id.startsWith('call_'), `id ${call.id}`);
  assert.equal(call.type, 'function');
  const name = call.function.name;
  assert.ok(schemaOf[name], `a known function: ${name}`);
  if (only) assert.equal(name, only);
  const args = JSON.parse(call.function.arguments);
  assert.ok(schemaOf[name](args), `arguments ${call.function.arguments} match ${name}'s schema`);
}

// ---- forced calls --------------------------------------------------------------------------

let firstTurn;
await check('tool_choice required, one call: valid calls from a random model', async () => {
  for (const seed of [1, 2, 3, 4, 5, 6]) {
    const choice = await both({ messages: user, tools, tool_choice: 'required', parallel_tool_calls: false,
                                temperature: 1, seed, max_tokens: 200, ...noThinking });
    assert.equal(choice.finish_reason, 'tool_calls');
    assert.equal(choice.message.content, null);
    assert.equal(choice.message.tool_calls.length, 1);
    checkCall(choice.message.tool_calls[0]);
    firstTurn ??= choice.message;
  }
});

await check('tool_choice named function', async () => {
  for (const seed of [7, 8, 9]) {
    const choice = await both({ messages: user, tools, tool_choice: { type: 'function', function: { name: 'add' } },
                                temperature: 1, seed, max_tokens: 200, ...noThinking });
    assert.equal(choice.finish_reason, 'tool_calls');
    assert.equal(choice.message.tool_calls.length, 1);
    checkCall(choice.message.tool_calls[0], 'add');
  }
});

await check('tool_choice required, parallel: every call valid', async () => {
  const r = await client.chat.completions.create({ model, messages: user, tools, tool_choice: 'required', n: 4,
                                                   temperature: 1, seed: 11, max_tokens: 120, ...noThinking });
  for (const choice of r.choices) {
    assert.equal(choice.finish_reason, 'tool_calls');
    assert.ok(choice.message.tool_calls.length >= 1);
    for (const call of choice.message.tool_calls) checkCall(call);
  }
});

await check('tool_choice required with thinking: calls after </think>', async () => {
  const prompt = await fetch(`http://127.0.0.1:${port}/tokenize`, {
    method: 'POST', headers: { 'Content-Type': 'application/json', Authorization: `Bearer ${apiKey}` },
    body: JSON.stringify({ model, messages: user }) }).then((r) => r.json());
  const close = 151668; // </think>
  const r = await client.chat.completions.create({ model, messages: user, tools, tool_choice: 'required',
                                                   parallel_tool_calls: false, temperature: 0, max_tokens: 200,
                                                   logit_bias: { [close]: 100 } });
  const choice = r.choices[0];
  assert.ok(prompt.count > 0);
  assert.equal(choice.finish_reason, 'tool_calls', JSON.stringify(choice));
  checkCall(choice.message.tool_calls[0]);
});

await check('two-turn tool conversation', async () => {
  const call = firstTurn.tool_calls[0];
  const messages = [...user, { role: 'assistant', content: null, tool_calls: firstTurn.tool_calls },
                    { role: 'tool', tool_call_id: call.id, content: '{"temperature": 21, "unit": "c"}' }];
  const r = await client.chat.completions.create({ model, messages, tools, max_tokens: 12, temperature: 0, ...noThinking });
  const again = await client.chat.completions.create({ model, messages: user, tools, max_tokens: 12, temperature: 0, ...noThinking });
  assert.ok(r.usage.prompt_tokens > again.usage.prompt_tokens + 10, 'the call and its result are in the prompt');
  assert.equal(typeof r.choices[0].message.content, 'string');
  assert.ok(['stop', 'length', 'tool_calls'].includes(r.choices[0].finish_reason));
});

// ---- parsing of answers the model writes (forced here by guided_regex) ---------------------

const escape = (s) => s.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
function forced(text, extra = {}) {
  return { messages: user, tools, temperature: 0, max_tokens: 200, guided_regex: escape(text), ...noThinking, ...extra };
}

await check('auto: a call among prose', async () => {
  const choice = await both(forced('Sure.\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris", "unit": "c"}}\n</tool_call>\nDone.'));
  assert.equal(choice.finish_reason, 'tool_calls');
  assert.equal(choice.message.content, 'Sure.\n\nDone.');
  assert.equal(choice.message.tool_calls.length, 1);
  assert.deepEqual(choice.message.tool_calls[0].function, { name: 'get_weather', arguments: '{"city":"Paris","unit":"c"}' });
});

await check('auto: two calls, nested braces, escaped quotes, unicode', async () => {
  const text = '<tool_call>\n{"name": "add", "arguments": {"a": 1, "b": 2}}\n</tool_call>\n' +
               '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Zürich \\"}{\\" 東京 🌧", "unit": "f"}}\n</tool_call>';
  const choice = await both(forced(text));
  assert.equal(choice.message.content, null);
  assert.deepEqual(choice.message.tool_calls.map((t) => t.function.name), ['add', 'get_weather']);
  assert.deepEqual(JSON.parse(choice.message.tool_calls[1].function.arguments), { city: 'Zürich "}{" 東京 🌧', unit: 'f' });
});

await check('auto: malformed JSON and unknown functions stay content', async () => {
  for (const text of ['<tool_call>\n{"name": "get_weather", "arguments": {"city": }\n</tool_call>',
                      '<tool_call>\n{"name": "launch_rockets", "arguments": {}}\n</tool_call>',
                      'Before <tool_call>\n{"name": "add", "arguments": {"a": 1']) {
    const choice = await both(forced(text, { max_tokens: 200 }));
    assert.equal(choice.message.content, text.trim());
    assert.equal(choice.message.tool_calls, undefined);
    assert.equal(choice.finish_reason, 'stop');
  }
});

await check('tool_choice none: no parsing', async () => {
  const text = '<tool_call>\n{"name": "add", "arguments": {"a": 1, "b": 2}}\n</tool_call>';
  const choice = await both(forced(text, { tool_choice: 'none' }));
  assert.equal(choice.message.content, text);
  assert.equal(choice.finish_reason, 'stop');
});

await check('reasoning_content split off', async () => {
  const choice = await both(forced('<think>\nThe user wants weather.\n</think>\n\nIt is sunny.', { tools: undefined }));
  assert.equal(choice.message.reasoning_content, 'The user wants weather.');
  assert.equal(choice.message.content, 'It is sunny.');
});

await check('reasoning then a call', async () => {
  const text = '<think>\nI should call add.\n</think>\n\n<tool_call>\n{"name": "add", "arguments": {"a": 5, "b": 6}}\n</tool_call>';
  const choice = await both(forced(text));
  assert.equal(choice.message.reasoning_content, 'I should call add.');
  assert.equal(choice.message.content, null);
  assert.deepEqual(choice.message.tool_calls[0].function, { name: 'add', arguments: '{"a":5,"b":6}' });
});

await check('unclosed <think> at max_tokens is all reasoning', async () => {
  const r = { messages: user, temperature: 0, max_tokens: 12, guided_regex: '<think>\\n(ab){200}', ...noThinking };
  const choice = await both(r);
  assert.equal(choice.finish_reason, 'length');
  assert.ok(/^(ab)+a?$/.test(choice.message.reasoning_content), choice.message.reasoning_content);
  assert.equal(choice.message.content, '');
});

// ---- sampling fields -----------------------------------------------------------------------

async function tokenize(text) {
  const r = await fetch(`http://127.0.0.1:${port}/tokenize`, {
    method: 'POST', headers: { 'Content-Type': 'application/json', Authorization: `Bearer ${apiKey}` },
    body: JSON.stringify({ model, prompt: text, add_special_tokens: false }) });
  return (await r.json()).tokens;
}

await check('logit_bias +100 forces a token', async () => {
  const [id] = await tokenize(' banana');
  const r = await client.completions.create({ model, prompt: 'Hello', max_tokens: 4, temperature: 0,
                                              logit_bias: { [id]: 100 } });
  assert.equal(r.choices[0].text, ' banana'.repeat(4));
  const sampled = await client.completions.create({ model, prompt: 'Hello', max_tokens: 4, temperature: 1, seed: 3,
                                                    logit_bias: { [id]: 100 } });
  assert.equal(sampled.choices[0].text, ' banana'.repeat(4));
});

await check('logit_bias -100 bans the greedy token', async () => {
  let tried = 0;
  for (const prompt of ['Hello', 'The sky is', 'Once upon', 'x y z', 'Paris']) {
    const greedy = (await client.completions.create({ model, prompt, max_tokens: 1, temperature: 0 })).choices[0].text;
    const ids = await tokenize(greedy);
    if (ids.length !== 1) continue; // a token whose text does not encode back to itself
    const banned = await client.completions.create({ model, prompt, max_tokens: 1, temperature: 0, logit_bias: { [ids[0]]: -100 } });
    assert.notEqual(banned.choices[0].text, greedy);
    tried++;
  }
  assert.ok(tried >= 2, `only ${tried} prompts had a round-tripping greedy token`);
});

await check('min_tokens holds EOS off exactly that long', async () => {
  const eos = { 151645: 100 }; // the tiny model's eos_token_id
  const free = await client.completions.create({ model, prompt: 'Hello', max_tokens: 20, temperature: 0, logit_bias: eos });
  assert.equal(free.choices[0].finish_reason, 'stop');
  assert.equal(free.usage.completion_tokens, 1);
  for (const min of [1, 5, 9]) {
    const r = await client.completions.create({ model, prompt: 'Hello', max_tokens: 20, temperature: 0, logit_bias: eos,
                                                min_tokens: min, logprobs: 0 });
    assert.equal(r.choices[0].finish_reason, 'stop');
    assert.equal(r.usage.completion_tokens, min + 1, 'min_tokens, then the EOS');
    const tokens = r.choices[0].logprobs.tokens;
    assert.equal(tokens.length, min + 1);
    assert.equal(tokens[min], '<|im_end|>');
    assert.ok(!tokens.slice(0, min).includes('<|im_end|>'));
  }
});

await check('truncate_prompt_tokens keeps the last N', async () => {
  const prompt = Array.from({ length: 60 }, (_, i) => 100 + i);
  const r = await client.completions.create({ model, prompt, max_tokens: 3, temperature: 0, truncate_prompt_tokens: 10 });
  const tail = await client.completions.create({ model, prompt: prompt.slice(-10), max_tokens: 3, temperature: 0 });
  assert.equal(r.usage.prompt_tokens, 10);
  assert.equal(r.choices[0].text, tail.choices[0].text);
});

await check('continuous_usage_stats: usage in every chunk', async () => {
  const stream = await client.chat.completions.create({ model, messages: user, max_tokens: 6, temperature: 0, stream: true,
                                                        stream_options: { include_usage: true, continuous_usage_stats: true } });
  let chunks = 0, last = -1, final = null;
  for await (const chunk of stream) {
    assert.ok(chunk.usage, `chunk ${chunks} has usage`);
    assert.ok(chunk.usage.completion_tokens >= last);
    last = chunk.usage.completion_tokens;
    if (chunk.choices.length === 0) final = chunk.usage;
    chunks++;
  }
  assert.ok(chunks >= 6);
  assert.equal(final.completion_tokens, 6);
  assert.equal(final.total_tokens, final.prompt_tokens + 6);
});

console.log(`ok ${checks}`);
