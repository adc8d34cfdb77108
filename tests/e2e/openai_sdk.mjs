// End-to-end checks of `nanovllm serve` through the official OpenAI SDK.
// Usage: node tests/e2e/openai_sdk.mjs PORT MODEL_NAME API_KEY
// Prints one line per check and "ok N" last; exits 1 at the first failure.
import OpenAI from 'openai';
import assert from 'node:assert/strict';

const [port, model, apiKey] = process.argv.slice(2);
const client = new OpenAI({ baseURL: `http://127.0.0.1:${port}/v1`, apiKey, maxRetries: 0 });
let checks = 0;
async function check(name, fn) {
  await fn();
  checks++;
  console.log(`pass ${name}`);
}

await check('models', async () => {
  const list = await client.models.list();
  assert.equal(list.data[0].id, model);
});

let greedy;
await check('completion', async () => {
  const c = await client.completions.create({ model, prompt: 'Hello, world', max_tokens: 6, temperature: 0 });
  assert.equal(c.object, 'text_completion');
  assert.equal(c.choices[0].finish_reason, 'length');
  assert.equal(c.usage.completion_tokens, 6);
  greedy = c.choices[0].text;
});

await check('completion stream with usage', async () => {
  const stream = await client.completions.create({
    model, prompt: 'Hello, world', max_tokens: 6, temperature: 0, stream: true,
    stream_options: { include_usage: true },
  });
  let text = '', usage = null, finish = null;
  for await (const chunk of stream) {
    if (chunk.usage) usage = chunk.usage;
    for (const c of chunk.choices) { text += c.text; finish = c.finish_reason ?? finish; }
  }
  assert.equal(text, greedy);
  assert.equal(finish, 'length');
  assert.equal(usage.completion_tokens, 6);
});

let chatText;
await check('chat', async () => {
  const r = await client.chat.completions.create({
    model, messages: [{ role: 'system', content: 'Be brief.' }, { role: 'user', content: 'Hi' }],
    max_tokens: 5, temperature: 0,
  });
  assert.equal(r.object, 'chat.completion');
  assert.equal(r.choices[0].message.role, 'assistant');
  chatText = r.choices[0].message.content;
  assert.equal(typeof chatText, 'string');
});

await check('chat stream', async () => {
  const stream = await client.chat.completions.create({
    model, messages: [{ role: 'system', content: 'Be brief.' }, { role: 'user', content: 'Hi' }],
    max_tokens: 5, temperature: 0, stream: true,
  });
  let text = '', role = null, finish = null;
  for await (const chunk of stream) {
    const d = chunk.choices[0];
    if (d.delta.role) role = d.delta.role;
    if (d.delta.content) text += d.delta.content;
    if (d.finish_reason) finish = d.finish_reason;
  }
  assert.equal(role, 'assistant');
  assert.equal(text, chatText);
  assert.equal(finish, 'length');
});

await check('n > 1 and seed', async () => {
  const req = { model, prompt: 'Dice', max_tokens: 8, temperature: 1.0, n: 3, seed: 7 };
  const a = await client.completions.create(req);
  const b = await client.completions.create(req);
  assert.equal(a.choices.length, 3);
  assert.deepEqual(a.choices.map((c) => c.text), b.choices.map((c) => c.text));
  assert.notEqual(a.choices[0].text, a.choices[1].text);
});

await check('stop string', async () => {
  const stop = [...greedy].slice(2, 3).join('');
  const c = await client.completions.create({ model, prompt: 'Hello, world', max_tokens: 6, temperature: 0, stop });
  assert.equal(c.choices[0].finish_reason, 'stop');
  assert.equal(c.choices[0].text, greedy.slice(0, greedy.indexOf(stop)));
});

await check('logprobs', async () => {
  const r = await client.chat.completions.create({
    model, messages: [{ role: 'user', content: 'Hi' }], max_tokens: 3, temperature: 0,
    logprobs: true, top_logprobs: 2,
  });
  const content = r.choices[0].logprobs.content;
  assert.equal(content.length, 3);
  assert.equal(content[0].top_logprobs.length, 2);
  assert.ok(content[0].logprob <= 0);
});

await check('errors are APIErrors', async () => {
  await assert.rejects(
    client.completions.create({ model, prompt: 'x', max_tokens: 'five' }),
    (e) => e instanceof OpenAI.BadRequestError && e.status === 400 && e.error?.type === 'invalid_request_error');
  await assert.rejects(
    client.completions.create({ model: 'gpt-4', prompt: 'x' }),
    (e) => e instanceof OpenAI.NotFoundError && e.status === 404);
  await assert.rejects(
    client.completions.create({ model, prompt: 'x', max_tokens: 100000 }),
    (e) => e.status === 400 && /maximum context length/.test(e.message));
  const wrong = new OpenAI({ baseURL: `http://127.0.0.1:${port}/v1`, apiKey: 'wrong', maxRetries: 0 });
  await assert.rejects(wrong.models.list(), (e) => e instanceof OpenAI.AuthenticationError && e.status === 401);
});

console.log(`ok ${checks}`);
