#!/usr/bin/env bash
# GGUF files on the CPU, our side of the table (issue "GGUF models on the CPU") and, when
# LLAMA_CPP names a llama.cpp build's bin folder, llama.cpp's side on the same files with the
# same threads, alternating program and file each round so a slow moment of the shared host hits
# both alike; medians of ROUNDS rounds, then the ratios.
#
#   scripts/bench_gguf.sh [FILE.gguf ...]
#
# Rows: prefill 512 tokens; single-stream decode at a short context and after 2,048 tokens;
# batched decode of 16 and 64 sequences (128-token prompts, 64 tokens each, the steps where all
# decode). Ours: `nanovllm bench`; llama.cpp's: `llama-bench -p 512 -n 0`, `-p 0 -n 64 -d 0,2048`,
# `llama-batched-bench -npp 128 -ntg 64 -npl 16,64` (flash attention on, as ours always is).
#
# Default files: the random Qwen3-0.6B (scripts/make_random_qwen3.py) written as a BF16 GGUF
# (scripts/make_gguf.py), quantized to Q4_K_M and Q8_0 by llama.cpp's own llama-quantize when
# LLAMA_CPP is set, else by our encoder (--type mix / q8_0). The BF16 file is also measured, so
# the Q4_K_M / BF16 decode ratio comes from the same run.
#
# Environment: ROUNDS (3), THREADS (one per core), NANOVLLM (build/nanovllm), LLAMA_CPP (unset),
# MODELS (build/gguf-bench: where the default files are made).
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${ROUNDS:-3}
THREADS=${THREADS:-$(nproc)}
BIN=${NANOVLLM:-build/nanovllm}
MODELS=${MODELS:-build/gguf-bench}
[ -x "$BIN" ] || make -j"$(nproc)" "$BIN" >&2

files=("$@")
if [ ${#files[@]} -eq 0 ]; then
  mkdir -p "$MODELS"
  if [ ! -f "$MODELS/bf16.gguf" ]; then
    echo "generating the random Qwen3-0.6B and its BF16 GGUF..." >&2
    /usr/bin/python3 scripts/make_random_qwen3.py --preset qwen3-0.6b --out "$MODELS/hf" >&2
    /usr/bin/python3 scripts/make_gguf.py --model "$MODELS/hf" --type bf16 --out "$MODELS/bf16.gguf" >&2
  fi
  for q in q4_k_m q8_0; do
    [ -f "$MODELS/$q.gguf" ] && continue
    if [ -n "${LLAMA_CPP:-}" ]; then
      "$LLAMA_CPP/llama-quantize" "$MODELS/bf16.gguf" "$MODELS/$q.gguf" "${q^^}" > /dev/null 2>&1
    else
      /usr/bin/python3 scripts/make_gguf.py --model "$MODELS/hf" --type "$([ $q = q4_k_m ] && echo mix || echo q8_0)" \
        --out "$MODELS/$q.gguf" >&2
    fi
  done
  files=("$MODELS/q4_k_m.gguf" "$MODELS/q8_0.gguf" "$MODELS/bf16.gguf")
fi

out=$(mktemp)
trap 'rm -f "$out"' EXIT
ours() { # file
  local f=$1 tag
  tag=$(basename "$f")
  for spec in "prefill512 512 64" "short 16 64" "ctx2048 2048 64"; do
    set -- $spec
    printf 'ours %s %s ' "$tag" "$1" >>"$out"
    "$BIN" bench --latency --model "$f" --device cpu --input-len "$2" --output-len "$3" \
      --kv-cache-memory 2GiB --threads "$THREADS" --json --quiet >>"$out"
  done
  for n in 16 64; do
    printf 'ours %s b%s ' "$tag" "$n" >>"$out"
    "$BIN" bench --model "$f" --device cpu --num-seqs "$n" --min-input 128 --max-input 128 \
      --min-output 64 --max-output 64 --max-num-batched-tokens $((n * 128)) --kv-cache-memory 2GiB \
      --threads "$THREADS" --json --quiet >>"$out"
  done
}
theirs() { # file
  local f=$1 tag
  tag=$(basename "$f")
  printf 'llama %s bench ' "$tag" >>"$out"
  "$LLAMA_CPP/llama-bench" -m "$f" -t "$THREADS" -fa 1 -r 1 -p 512 -n 0 -o jsonl 2>/dev/null | tr -d '\n' >>"$out"
  "$LLAMA_CPP/llama-bench" -m "$f" -t "$THREADS" -fa 1 -r 1 -p 0 -n 64 -d 0,2048 -o jsonl 2>/dev/null |
    tr -d '\n' >>"$out"
  echo >>"$out"
  printf 'llama %s batched ' "$tag" >>"$out"
  "$LLAMA_CPP/llama-batched-bench" -m "$f" -t "$THREADS" -fa on -c 16384 -b 2048 -ub 512 -npp 128 \
    -ntg 64 -npl 16,64 --output-format jsonl 2>/dev/null | tr -d '\n' >>"$out"
  echo >>"$out"
}
for round in $(seq "$ROUNDS"); do
  for f in "${files[@]}"; do
    echo "round $round of $ROUNDS: $f..." >&2
    if [ $((round % 2)) -eq 1 ]; then
      ours "$f"
      [ -n "${LLAMA_CPP:-}" ] && theirs "$f"
    else
      [ -n "${LLAMA_CPP:-}" ] && theirs "$f"
      ours "$f"
    fi
  done
done

/usr/bin/python3 - "$out" "$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2)" "$THREADS" <<'PY'
import json, re, statistics, sys
ours, theirs = {}, {}
for line in open(sys.argv[1]):
    who, tag, kind, blob = line.rstrip('\n').split(' ', 3)
    if who == 'ours':
        r = json.loads(blob)
        row = ours.setdefault(tag, {})
        if kind == 'prefill512':
            row.setdefault('prefill 512', []).append(r['prefill_tokens_per_s'])
        elif kind == 'short':
            row.setdefault('decode, short context', []).append(r['decode_tokens_per_s'])
        elif kind == 'ctx2048':
            row.setdefault('decode after 2048', []).append(r['decode_tokens_per_s'])
        else:
            row.setdefault(f'{kind[1:]} sequences, decode', []).append(r['num_seqs'] * 1e6 / r['decode_step_us'])
        continue
    row = theirs.setdefault(tag, {})
    for obj in re.findall(r'\{[^{}]*\}', blob):
        r = json.loads(obj)
        if kind == 'bench' and r.get('n_prompt') == 512 and r.get('n_gen') == 0:
            row.setdefault('prefill 512', []).append(r['avg_ts'])
        elif kind == 'bench' and r.get('n_gen') == 64:
            name = 'decode, short context' if r.get('n_depth', 0) == 0 else 'decode after 2048'
            row.setdefault(name, []).append(r['avg_ts'])
        elif kind == 'batched':
            row.setdefault(f"{r['pl']} sequences, decode", []).append(r['speed_tg'])
rows = ['prefill 512', 'decode, short context', 'decode after 2048', '16 sequences, decode',
        '64 sequences, decode']
med = lambda xs: statistics.median(xs) if xs else float('nan')
print(f'\nCPU:{sys.argv[2]}, {sys.argv[3]} threads; tokens/s, medians')
for tag in ours:
    print(f'\n{tag}\n| metric | llama.cpp | nanovllm | ratio |\n| --- | --- | --- | --- |')
    for name in rows:
        a, b = med(theirs.get(tag, {}).get(name, [])), med(ours[tag].get(name, []))
        print(f'| {name} | {a:.1f} | {b:.1f} | {b / a:.2f}x |' if a == a else f'| {name} | - | {b:.1f} | - |')
q4 = next((t for t in ours if 'q4_k' in t.lower()), None)
bf = next((t for t in ours if 'bf16' in t.lower()), None)
if q4 and bf:
    for name in ('decode, short context', 'decode after 2048'):
        print(f'{q4} / {bf}, {name}: {med(ours[q4][name]) / med(ours[bf][name]):.2f}x')
PY
