#!/usr/bin/env bash
# Tokenizer benchmark: nanovllm against Hugging Face's Rust tokenizers (npm
# package `tokenizers`, the library Python transformers uses), one thread,
# the same documents, alternating in the same run; prints load time, encode
# and decode MB/s as ranges over all rounds, and the encode ratio per round.
#
#   scripts/bench_tokenizer.sh [MODEL_DIR] [ROUNDS]   (default: the tiny Qwen3 folder, 3)
#
# The npm package is installed once into build/bench-tokenizer/node
# (git-ignored). The documents are nanovllm's deterministic mixed text
# (`nanovllm tokenize --bench-write`); the first round also checks that both
# engines produce the same ids for every document.
set -euo pipefail
cd "$(dirname "$0")/.."
MODEL=${1:-tests/fixtures/tiny-qwen3}
ROUNDS=${2:-3}
WORK=build/bench-tokenizer
NODE_DIR=$WORK/node
mkdir -p "$WORK"
make -s build/nanovllm
if [ ! -d "$NODE_DIR/node_modules/tokenizers" ]; then
  npm install --prefix "$NODE_DIR" --ignore-scripts --no-audit --no-fund tokenizers@0.23.2 >&2
fi
# One thread for the Rust side too: its async encode runs on libuv's pool.
export RAYON_NUM_THREADS=1 UV_THREADPOOL_SIZE=1
export TOKENIZERS_MODULE="$PWD/$NODE_DIR/node_modules/tokenizers"

build/nanovllm tokenize --model "$MODEL" --bench --bench-runs 1 --quiet \
  --bench-write "$WORK/docs.jsonl" > /dev/null
: > "$WORK/results.jsonl"
for round in $(seq 1 "$ROUNDS"); do
  ids_flag=()
  check_flag=()
  if [ "$round" = 1 ]; then
    ids_flag=(--ids "$WORK/hf_ids.jsonl")
  fi
  node scripts/bench_tokenizer_hf.mjs "$MODEL" "$WORK/docs.jsonl" --runs 3 "${ids_flag[@]}" \
    | sed "s/^{/{\"round\":$round,/" >> "$WORK/results.jsonl"
  if [ "$round" = 1 ]; then
    check_flag=(--bench-check "$WORK/hf_ids.jsonl")
  fi
  build/nanovllm tokenize --model "$MODEL" --bench --bench-text "$WORK/docs.jsonl" --json --quiet \
    "${check_flag[@]}" | sed "s/^{/{\"round\":$round,/" >> "$WORK/results.jsonl"
  build/nanovllm tokenize --model "$MODEL" --bench --bench-text "$WORK/docs.jsonl" --json --quiet \
    --pcre2 | sed "s/^{/{\"round\":$round,\"engine_variant\":\"pcre2\",/" >> "$WORK/results.jsonl"
done

python3 - "$WORK/results.jsonl" <<'EOF'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
def name(r):
    if r["engine"] != "nanovllm": return "HF tokenizers (Rust, npm 0.23.2)"
    return "nanovllm, PCRE2 splitter" if r.get("engine_variant") == "pcre2" else "nanovllm"
def warm(r): return r["encode_mb_per_s"][1:] or r["encode_mb_per_s"]
first = rows[0]
print(f"text: {first['megabytes']:.2f} MB, {first['documents']} documents, {first['tokens']} tokens")
for r in rows:
    if "documents_with_different_ids" in r:
        print(f"ids: {r['documents_with_different_ids']} of {r['documents']} documents differ "
              f"between nanovllm and HF tokenizers")
print(f"{'engine':36} {'load ms':>13} {'encode MB/s':>13} {'decode MB/s':>13}")
for n in dict.fromkeys(name(r) for r in rows):
    rs = [r for r in rows if name(r) == n]
    load = [r["load_ms_min"] for r in rs]
    enc = [x for r in rs for x in warm(r)]
    dec = [x for r in rs for x in r["decode_mb_per_s"]]
    rng = lambda v, f: f"{min(v):{f}}-{max(v):{f}}"
    print(f"{n:36} {rng(load, '.0f'):>13} {rng(enc, '.1f'):>13} {rng(dec, '.1f'):>13}")
ratios = []
for rnd in sorted({r["round"] for r in rows}):
    ours = [r for r in rows if r["round"] == rnd and name(r) == "nanovllm"]
    hf = [r for r in rows if r["round"] == rnd and r["engine"] != "nanovllm"]
    if ours and hf:
        ratios.append(max(warm(ours[0])) / max(warm(hf[0])))
print("encode nanovllm / HF tokenizers, per round: " + ", ".join(f"{x:.1f}x" for x in ratios))
print("(encode: warm passes 2-3 of each run; load: best of 5; single thread each)")
EOF
