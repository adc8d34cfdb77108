#!/usr/bin/env bash
# CPU benchmark of issue "foundation": load time, 512-token prefill, single-
# stream decode and peak RSS on a full-size random Qwen3-0.6B (bf16), printed
# beside the llama.cpp reference measured on this machine kind (same random
# model, BF16 GGUF, 2 threads: ~400 tokens/s prefill, ~32 tokens/s decode).
#
#   scripts/bench_cpu.sh [MODEL_DIR] [extra nanovllm bench flags...]
#
# MODEL_DIR defaults to build/qwen3-0.6b-random, generated on first use with
# scripts/make_random_qwen3.py (numpy; 1.2 GB; about 15 s).
set -euo pipefail
cd "$(dirname "$0")/.."
MODEL=${1:-build/qwen3-0.6b-random}
shift || true

if [ ! -f "$MODEL/model.safetensors" ]; then
  echo "generating $MODEL (random Qwen3-0.6B weights)..." >&2
  /usr/bin/python3 scripts/make_random_qwen3.py --preset qwen3-0.6b --out "$MODEL" >&2
fi
[ -x build/nanovllm ] || make -j"$(nproc)" build/nanovllm >&2

json=$(build/nanovllm bench --latency --model "$MODEL" --input-len 512 --output-len 64 \
       --kv-cache-memory 1GiB --json --quiet "$@")
echo "$json"
/usr/bin/python3 - "$json" <<'PY'
import json, sys
r = json.loads(sys.argv[1])
ref_prefill, ref_decode = 400.0, 32.0  # llama.cpp, same model and machine kind (issue text)
rows = [
    ("model load (s)", f"{r['load_s']:.3f}", "target <= 2"),
    ("prefill 512 tokens (tokens/s)", f"{r['prefill_tokens_per_s']:.1f}",
     f"{r['prefill_tokens_per_s'] / ref_prefill:.2f}x llama.cpp (target >= 0.6x)"),
    ("decode (tokens/s)", f"{r['decode_tokens_per_s']:.2f}",
     f"{r['decode_tokens_per_s'] / ref_decode:.2f}x llama.cpp (target >= 0.8x); "
     f"{100 * r['decode_tokens_per_s'] / r['decode_floor_tokens_per_s']:.0f}% of this run's floor"),
    ("peak RSS (MB)", f"{r['peak_rss_bytes'] / 1e6:.0f}",
     f"{r['peak_rss_bytes'] / r['weight_bytes']:.2f}x weights (target <= 1.3x + KV used)"),
    ("memory read (GB/s, same run)", f"{r['memory_read_gb_per_s']:.1f}",
     f"decode floor {r['decode_floor_tokens_per_s']:.1f} tokens/s"),
    ("matmul (GFLOP/s, same run)", f"{r['matmul_gflops']:.0f}", "512x1024x3072, prefill's path"),
]
print(f"\n{r['device']}")
for name, value, note in rows:
    print(f"  {name:32s} {value:>10s}   {note}")
PY
