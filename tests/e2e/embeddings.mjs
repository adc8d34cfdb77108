// End-to-end checks of /v1/embeddings through the official OpenAI SDK's
// client.embeddings.create, against a server on the tiny embedding fixture.
// Usage: node tests/e2e/embeddings.mjs PORT MODEL_NAME API_KEY GOLDEN_JSON
// Prints one line per check and "ok N" last; exits 1 at the first failure.
import OpenAI from 'openai';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { check, finish } from './shared.mjs';

const [port, model, apiKey, goldenPath] = process.argv.slice(2);
const golden = JSON.parse(readFileSync(goldenPath, 'utf8')).cases;
const client = new OpenAI({ baseURL: `http://127.0.0.1:${port}/v1`, apiKey, maxRetries: 0 });

function cosineDistance(a, b) {
  let dot = 0, na = 0, nb = 0;
  for (let i = 0; i < a.length; i++) { dot += a[i] * b[i]; na += a[i] * a[i]; nb += b[i] * b[i]; }
  return 1 - dot / Math.sqrt(na * nb);
}

const texts = golden.batch.map((row) => row.text);

let floats;
await check('float vectors match the reference', async () => {
  const r = await client.embeddings.create({ model, input: texts, encoding_format: 'float' });
  assert.equal(r.object, 'list');
  assert.equal(r.model, model);
  assert.equal(r.data.length, texts.length);
  let tokens = 0;
  r.data.forEach((d, i) => {
    assert.equal(d.object, 'embedding');
    assert.equal(d.index, i);
    assert.equal(d.embedding.length, golden.batch[i].last.length);
    const dist = cosineDistance(d.embedding, golden.batch[i].last);
    assert.ok(dist <= 1e-4, `input ${i}: cosine distance ${dist}`);
    tokens += golden.batch[i].ids.length;
  });
  assert.equal(r.usage.prompt_tokens, tokens);
  assert.equal(r.usage.total_tokens, tokens);
  floats = r.data.map((d) => d.embedding.map(Math.fround)); // 9 digits: the same float32
});

await check('base64 asked for: little-endian float32 bytes equal to float', async () => {
  const r = await client.embeddings.create({ model, input: texts, encoding_format: 'base64' });
  r.data.forEach((d, i) => {
    assert.equal(typeof d.embedding, 'string', 'asked for base64, the SDK hands the string back');
    const bytes = Buffer.from(d.embedding, 'base64');
    const v = Array.from({ length: bytes.length / 4 }, (_, j) => bytes.readFloatLE(4 * j));
    assert.deepEqual(v, floats[i]);
  });
});

await check('default encoding (the SDK asks for base64 and decodes it) equals float', async () => {
  const r = await client.embeddings.create({ model, input: texts[0] });
  assert.deepEqual(r.data[0].embedding, floats[0]);
});

await check('dimensions cut and renormalise', async () => {
  const r = await client.embeddings.create({ model, input: texts[0], dimensions: 8, encoding_format: 'float' });
  const v = r.data[0].embedding;
  assert.equal(v.length, 8);
  const norm = Math.sqrt(v.reduce((s, x) => s + x * x, 0));
  assert.ok(Math.abs(norm - 1) < 1e-6, `norm ${norm}`);
  assert.ok(cosineDistance(v, floats[0].slice(0, 8)) < 1e-6);
});

await check('token ids input', async () => {
  const r = await client.embeddings.create({ model, input: golden.single[0].ids, encoding_format: 'float' });
  assert.ok(cosineDistance(r.data[0].embedding, golden.single[0].last) <= 1e-4);
});

await check('a bad dimensions is a 400 naming it', async () => {
  await assert.rejects(client.embeddings.create({ model, input: 'x', dimensions: 100000 }), (e) => {
    assert.equal(e.status, 400);
    assert.equal(e.param, 'dimensions');
    return true;
  });
});

finish();
