#!/usr/bin/env bash
# nanovllm's side of the CPU serving table (issue "CPU serving speed"): prefill,
# single-stream decode at several contexts, batched decode at 4/16/64 sequences
# and the 16 x (128 in + 64 out) workload end to end, each measured ROUNDS times
# in alternation (so a slow moment of the machine hits every row alike) and
# reported as the median; then the self-relative checks that need no peer build,
# and the machine's own limits measured by the same runs. Builds nothing from
# outside the project: put a llama.cpp build's numbers beside these by hand
# (llama-bench -p 512 -n 64, llama-batched-bench -npp 128 -ntg 64 -npl 4,16,64).
#
#   scripts/bench_cpu_decode.sh [MODEL_DIR] [extra runner flags, e.g. --kv-cache-dtype float32]
#
# Environment: ROUNDS (default 3), THREADS (default: one per core), NANOVLLM
# (default build/nanovllm). To measure what an AVX2-only CPU would do on a
# newer one, cap both our kernels and OpenBLAS's (prefill, prefill
# attention): NANOVLLM_CPU_ISA=avx2 OPENBLAS_CORETYPE=Haswell. MODEL_DIR defaults to build/qwen3-0.6b-random,
# generated on first use with scripts/make_random_qwen3.py.
set -euo pipefail
cd "$(dirname "$0")/.."
MODEL=${1:-build/qwen3-0.6b-random}
shift || true
ROUNDS=${ROUNDS:-3}
BIN=${NANOVLLM:-build/nanovllm}
THREAD_FLAGS=()
[ -n "${THREADS:-}" ] && THREAD_FLAGS=(--threads "$THREADS")

if [ ! -f "$MODEL/model.safetensors" ]; then
  echo "generating $MODEL (random Qwen3-0.6B weights)..." >&2
  /usr/bin/python3 scripts/make_random_qwen3.py --preset qwen3-0.6b --out "$MODEL" >&2
fi
[ -x "$BIN" ] || make -j"$(nproc)" "$BIN" >&2

out=$(mktemp)
trap 'rm -f "$out"' EXIT
latency() { # name input_len output_len
  printf '%s latency %s ' "$1" "$ROUNDS" >>"$out"
  "$BIN" bench --latency --model "$MODEL" --input-len "$2" --output-len "$3" --kv-cache-memory 2GiB \
    --json --quiet "${THREAD_FLAGS[@]}" "${EXTRA[@]}" >>"$out"
}
batch() { # name num_seqs input output
  # Every prompt prefilled in one step, so all sequences then decode together
  # (the bench times the steps where all of them decode).
  local budget=$(( $2 * $3 > 2048 ? $2 * $3 : 2048 ))
  printf '%s batch %s ' "$1" "$ROUNDS" >>"$out"
  "$BIN" bench --model "$MODEL" --num-seqs "$2" --min-input "$3" --max-input "$3" --min-output "$4" \
    --max-output "$4" --max-num-batched-tokens "$budget" --kv-cache-memory 2GiB --json --quiet \
    "${THREAD_FLAGS[@]}" "${EXTRA[@]}" >>"$out"
}
EXTRA=("$@")
for round in $(seq "$ROUNDS"); do
  echo "round $round of $ROUNDS..." >&2
  latency prefill512 512 64
  latency short 16 64
  latency ctx2048 2048 64
  batch b4 4 128 64
  batch b16 16 128 64
  batch b64 64 128 64
done

/usr/bin/python3 - "$out" <<'PY'
import json, statistics, sys
runs = {}
for line in open(sys.argv[1]):
    name, kind, _, blob = line.split(' ', 3)
    runs.setdefault(name, []).append(json.loads(blob))
med = lambda name, f: statistics.median(f(r) for r in runs[name])
spread = lambda name, f: (min(f(r) for r in runs[name]), max(f(r) for r in runs[name]))
decode = lambda r: r['decode_tokens_per_s']
batched = lambda r: r['num_seqs'] * 1e6 / r['decode_step_us'] if r['decode_step_us'] > 0 else float('nan')
e2e = lambda r: r['output_tokens_per_s']
rows = [
    ('prefill 512 tokens', 'prefill512', lambda r: r['prefill_tokens_per_s']),
    ('decode, short context (16)', 'short', decode),
    ('decode after 512 tokens', 'prefill512', decode),
    ('decode after 2048 tokens', 'ctx2048', decode),
    ('4 sequences, decode phase', 'b4', batched),
    ('16 sequences, decode phase', 'b16', batched),
    ('64 sequences, decode phase', 'b64', batched),
    ('16 x (128 in + 64 out), end to end', 'b16', e2e),
]
first = runs['short'][0]
print(f"device: {first['device']}, {first['threads']} threads, {len(runs['short'])} rounds (median [min-max])")
print('| metric | nanovllm tok/s | spread |')
print('| --- | --- | --- |')
for label, name, f in rows:
    lo, hi = spread(name, f)
    print(f'| {label} | {med(name, f):.1f} | {lo:.1f}-{hi:.1f} |')
single = med('short', decode)
print()
print(f"16-sequence batched decode / single stream: {med('b16', batched) / single:.2f}x (goal >= 3.5x)")
print(f"decode after 2048 / decode at 16 tokens:    {med('ctx2048', decode) / single:.2f}x (goal >= 0.8x)")
bw = med('short', lambda r: r['memory_read_gb_per_s'])
gf = med('short', lambda r: r['matmul_gflops'])
floor = med('short', lambda r: r['decode_floor_tokens_per_s'])
print(f"machine (same runs): memory read {bw:.1f} GB/s, matmul {gf:.0f} GFLOP/s; "
      f"single-stream decode at {100 * single / floor:.0f}% of the weight-read floor ({floor:.1f} tok/s)")
PY
