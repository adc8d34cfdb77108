#!/usr/bin/env node
// Serving load generator for `nanovllm serve` (or any OpenAI-compatible
// server): N requests at a fixed concurrency, each a streamed
// /v1/completions with a random token-id prompt of the given length and
// ignore_eos, so every request produces exactly --output-len tokens.
// Reports requests/s, output tokens/s, and time to first token and
// inter-token latency percentiles (p50/p90/p99). Node 20, no dependencies.
//
//   node scripts/loadgen.mjs --url http://127.0.0.1:8000 --model NAME \
//        [--concurrency 8] [--requests 64] [--prompt-len 128] [--output-len 64] \
//        [--api-key KEY] [--seed 0] [--json]
const args = Object.fromEntries(process.argv.slice(2).reduce((acc, a, i, all) => {
  if (a.startsWith('--')) acc.push([a.slice(2), all[i + 1]?.startsWith('--') || all[i + 1] === undefined ? 'true' : all[i + 1]]);
  return acc;
}, []));
const url = (args.url ?? 'http://127.0.0.1:8000').replace(/\/$/, '');
const model = args.model;
const concurrency = Number(args.concurrency ?? 8);
const total = Number(args.requests ?? 64);
const promptLen = Number(args['prompt-len'] ?? 128);
const outputLen = Number(args['output-len'] ?? 64);
if (!model) { console.error('--model is required'); process.exit(2); }

let seed = Number(args.seed ?? 0) >>> 0 || 1;
const random = () => { seed ^= seed << 13; seed >>>= 0; seed ^= seed >>> 17; seed ^= seed << 5; seed >>>= 0; return seed; };
const headers = { 'Content-Type': 'application/json' };
if (args['api-key']) headers.Authorization = `Bearer ${args['api-key']}`;

async function one() {
  const prompt = Array.from({ length: promptLen }, () => random() % 100000);
  const start = performance.now();
  const res = await fetch(`${url}/v1/completions`, {
    method: 'POST', headers,
    body: JSON.stringify({ model, prompt, max_tokens: outputLen, ignore_eos: true, temperature: 0,
                           stream: true, stream_options: { include_usage: true } }),
  });
  if (!res.ok) throw new Error(`HTTP ${res.status}: ${await res.text()}`);
  const decoder = new TextDecoder();
  let buffer = '', first = null, last = null, tokens = 0;
  const gaps = [];
  for await (const bytes of res.body) {
    const now = performance.now();
    buffer += decoder.decode(bytes, { stream: true });
    let cut;
    while ((cut = buffer.indexOf('\n\n')) >= 0) {
      const event = buffer.slice(0, cut);
      buffer = buffer.slice(cut + 2);
      if (!event.startsWith('data: ') || event === 'data: [DONE]') continue;
      const chunk = JSON.parse(event.slice(6));
      if (chunk.error) throw new Error(chunk.error.message);
      if (chunk.usage) tokens = chunk.usage.completion_tokens;
      if (!chunk.choices?.length) continue;
      if (first === null) first = now; else gaps.push(now - last);
      last = now;
    }
  }
  return { ttft: first - start, e2e: performance.now() - start, gaps, tokens };
}

const results = [];
let next = 0;
const t0 = performance.now();
await Promise.all(Array.from({ length: Math.min(concurrency, total) }, async () => {
  while (next < total) { next++; results.push(await one()); }
}));
const seconds = (performance.now() - t0) / 1000;

const pct = (xs, p) => { const s = [...xs].sort((a, b) => a - b); return s.length ? s[Math.min(s.length - 1, Math.floor(p / 100 * s.length))] : NaN; };
const ttfts = results.map((r) => r.ttft), itls = results.flatMap((r) => r.gaps), e2es = results.map((r) => r.e2e);
const outTokens = results.reduce((a, r) => a + r.tokens, 0);
const report = {
  requests: results.length, concurrency, prompt_len: promptLen, output_len: outputLen, seconds,
  requests_per_s: results.length / seconds, output_tokens_per_s: outTokens / seconds,
  ttft_ms: { p50: pct(ttfts, 50), p90: pct(ttfts, 90), p99: pct(ttfts, 99) },
  itl_ms: { p50: pct(itls, 50), p90: pct(itls, 90), p99: pct(itls, 99) },
  e2e_ms: { p50: pct(e2es, 50), p90: pct(e2es, 90), p99: pct(e2es, 99) },
};
if (args.json) { console.log(JSON.stringify(report)); process.exit(0); }
const ms = (o) => `p50 ${o.p50.toFixed(1)}  p90 ${o.p90.toFixed(1)}  p99 ${o.p99.toFixed(1)} ms`;
console.log(`${report.requests} requests, concurrency ${concurrency}, prompt ${promptLen}, output ${outputLen}: ${seconds.toFixed(2)} s`);
console.log(`throughput     ${report.requests_per_s.toFixed(2)} requests/s, ${report.output_tokens_per_s.toFixed(1)} output tokens/s`);
console.log(`TTFT           ${ms(report.ttft_ms)}`);
console.log(`inter-token    ${ms(report.itl_ms)}`);
console.log(`end to end     ${ms(report.e2e_ms)}`);
