// Times Hugging Face's Rust tokenizers (npm package `tokenizers`, the Node
// binding of the library Python transformers uses) on the documents that
// `nanovllm tokenize --bench --bench-write FILE` wrote, one thread, the
// same way nanovllm's benchmark times itself: load, then encode passes
// and decode passes over every document in order. Prints one JSON object;
// with --ids OUT also writes each document's ids as JSON lines (for
// `nanovllm tokenize --bench --bench-check OUT`).
//
//   node scripts/bench_tokenizer_hf.mjs MODEL_DIR DOCS.jsonl [--runs N] [--ids OUT]
import { createRequire } from 'node:module';
import { readFileSync, writeFileSync } from 'node:fs';
import { performance } from 'node:perf_hooks';

const require = createRequire(import.meta.url);
const { Tokenizer } = require(process.env.TOKENIZERS_MODULE || 'tokenizers');

const [modelDir, docsPath, ...rest] = process.argv.slice(2);
if (!modelDir || !docsPath) {
  console.error('usage: node bench_tokenizer_hf.mjs MODEL_DIR DOCS.jsonl [--runs N] [--ids OUT]');
  process.exit(2);
}
let runs = 3, idsPath = null;
for (let i = 0; i < rest.length; i++) {
  if (rest[i] === '--runs') runs = Number(rest[++i]);
  else if (rest[i] === '--ids') idsPath = rest[++i];
}

const docs = readFileSync(docsPath, 'utf8').split('\n').filter((l) => l.length).map((l) => JSON.parse(l));
const bytes = docs.reduce((n, d) => n + Buffer.byteLength(d, 'utf8'), 0);

const loads = [];
let tok;
for (let i = 0; i < 5; i++) {
  const t0 = performance.now();
  tok = Tokenizer.fromFile(`${modelDir}/tokenizer.json`);
  loads.push(performance.now() - t0);
}
loads.sort((a, b) => a - b);

const encode = [], decode = [];
let ids = [], tokens = 0;
for (let r = 0; r < runs; r++) {
  ids = [];
  tokens = 0;
  let t0 = performance.now();
  for (const d of docs) {
    const e = await tok.encode(d, null, { addSpecialTokens: false });
    const v = e.getIds();
    ids.push(v);
    tokens += v.length;
  }
  encode.push(bytes / 1e6 / ((performance.now() - t0) / 1e3));
  t0 = performance.now();
  let out = 0;
  for (const v of ids) out += Buffer.byteLength(await tok.decode(v, false), 'utf8');
  decode.push(out / 1e6 / ((performance.now() - t0) / 1e3));
}
if (idsPath) writeFileSync(idsPath, ids.map((v) => JSON.stringify(Array.from(v))).join('\n') + '\n');
console.log(JSON.stringify({
  engine: 'tokenizers (npm, Rust)', load_ms_min: loads[0], load_ms_median: loads[2],
  megabytes: bytes / 1e6, documents: docs.length, tokens,
  encode_mb_per_s: encode, decode_mb_per_s: decode,
}));
