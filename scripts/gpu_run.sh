#!/usr/bin/env bash
# gpu_run.sh - one device call: the bundle unpacked, a SASS check of the new
# kernels, the CUDA tests, the A/B (scripts/gpu_ab.sh) and optionally
# scripts/gpu_check.sh sections, everything packed so that at most 8 files
# come back, the tables printed last.
#
#   scripts/gpu_bundle.sh          (here; carry gpu-bundle)
#   SECTIONS=tests AB="kernels e2e prefill profile" CHECK=compare scripts/gpu_run.sh "$OUT"
#   SECTIONS=tests TEST_FILTER='cuda_fp8/*' AB=fp8 scripts/gpu_run.sh "$OUT"   (FP8 alone)
#   SECTIONS=tests TEST_FILTER='*kv_fp8*/*' AB=kvfp8 scripts/gpu_run.sh "$OUT"   (the fp8 KV cache alone)
#   SECTIONS=tests TEST_FILTER='cuda_gdn/*' AB=hybrid scripts/gpu_run.sh "$OUT"   (Qwen3.5's kernels alone)
#
# Variables: SECTIONS ("tests"), TEST_FILTER ('cuda*/*'), TESTS_S (240), TTFT
# (non-empty: start to first token twice), AB (gpu_ab.sh sections), AB_S
# (300), AB_NOPREFETCH (non-empty: the attention rows again without the
# prefetch), CHECK (gpu_check.sh sections), CHECK_S (200); gpu_ab.sh's own
# (AB_ROUNDS, AB_WORKLOAD) pass through. A whole run of every part fits one
# 10-minute call: tests ~35 s, AB kernels ~12 s, e2e ~150 s, prefill ~90 s,
# profile ~40 s, the model's generation ~40 s; fp8 (estimated, not yet run:
# 3 rounds x 3 dummy 0.6B latency runs) ~90 s; kvfp8 (estimated, not yet run:
# 10 attention runs, 2 rounds x 2 caches of the workload and of a latency run,
# 2 generates) ~150 s, its tests ('*kv_fp8*/*') ~40 s; hybrid (estimated, not
# yet run: 8 dummy 0.8B latency runs, 2 generates) ~120 s.
set -uo pipefail
OUT=$1
B=gpu-bundle
T0=$(date +%s)
mkdir -p "$OUT" "$B" && (xz -dc $B/bundle.tar.xz | tar -C $B -xf -)
export LD_LIBRARY_PATH=$PWD/$B/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
# the fixtures make generates here (the GPU machine runs no make), in the background: the
# embedding model, the MoE weights (checked against their committed checksum), the Qwen3.5
# models with their golden data (the float64 reference: ~15 s each)
python3 scripts/make_random_qwen3.py --preset tiny-embedding --seed 0 --out tests/fixtures/tiny-qwen3-embedding \
    > /dev/null 2>&1 &
(python3 scripts/make_random_qwen3.py --preset tiny-moe --seed 0 --out /tmp/moe-fixture > /dev/null 2>&1 &&
    mv /tmp/moe-fixture/model.safetensors tests/fixtures/tiny-qwen3-moe/ &&
    sha256sum --quiet -c tests/fixtures/tiny-qwen3-moe/model.safetensors.sha256 ||
    echo "FIXTURE tiny-qwen3-moe: not the committed weights") | tee "$OUT/fixtures.txt" &
for m in "tiny dense" "tiny-moe moe"; do
    set -- $m
    (python3 scripts/make_random_qwen3_5.py --preset "$1" --seed 3 --link-tokenizer --out "tests/fixtures/tiny-qwen3_5/$2" \
        > /dev/null 2>&1 && python3 scripts/qwen3_5_ref.py "tests/fixtures/tiny-qwen3_5/$2" golden \
        --out "tests/fixtures/tiny-qwen3_5/$2-golden" --prompts tests/fixtures/tiny-qwen3-golden/golden.json \
        > /dev/null 2>&1 || echo "FIXTURE tiny-qwen3_5/$2: not generated") &
done
cuobjdump -sass $B/nanovllm > /tmp/sass.txt 2>&1
for k in decode_attention_kernel decode_attention_mma_kernel gemv_kernel flash_attention_kernel add_rmsnorm_warp \
    qk_norm_rope_store_vec silu_mul_vec gemv_fp8_kernel fp8_dequantize16 fp8_quantize_kernel grouped_gemm_fp8 \
    gdn_head_kernel gdn_chunk_kernel; do
    awk -v k=$k '/Function :/{f=($0 ~ k)} f&&/LDG.E.128/{n++} f&&/HMMA/{h++} f&&/(STL|LDL)/{s++} f&&/LDS.64/{d++}
        f&&/E4M3/{e++}
        END{print "SASS", k, ": LDG.E.128 =", n+0, " HMMA =", h+0, " local ld/st =", s+0, " LDS.64 =", d+0,
            " E4M3 cvt =", e+0}' /tmp/sass.txt
done | tee "$OUT/sass.txt"
wait
if [[ " ${SECTIONS:-} " == *" tests "* ]]; then
    NANOVLLM_BIN=$B/nanovllm timeout "${TESTS_S:-240}" $B/test_nanovllm --filter "${TEST_FILTER:-cuda*/*}" --verbose \
        > "$OUT/cuda_tests.log" 2>&1
    grep -aE "^\[(FAIL|----)\]|Synthesis|SKIP\] [0-9]" "$OUT/cuda_tests.log" | grep -av "MoE layer" | head -40
    echo "tests done at +$(($(date +%s) - T0)) s"
fi
if [ -n "${TTFT:-}" ]; then
    M=/tmp/nanovllm-gpu-check/qwen3-0.6b-random
    [ -f $M/model.safetensors ] || python3 scripts/make_random_qwen3.py --preset qwen3-0.6b --out $M > /dev/null 2>&1
    for i in 1 2; do
        t0=$(date +%s.%N)
        $B/nanovllm generate --model $M --device cuda --prompt Hello --max-tokens 1 --quiet > /dev/null 2>> "$OUT/ttft.log"
        t1=$(date +%s.%N)
        echo "start to first token run $i: $(python3 -c "print(round($t1 - $t0, 2))") s" >> "$OUT/ttft.txt"
    done
fi
if [ -n "${AB:-}" ]; then
    AB_ONLY="$AB" timeout "${AB_S:-300}" scripts/gpu_ab.sh "$OUT/ab" > "$OUT/ab.log" 2>&1
    echo "ab done at +$(($(date +%s) - T0)) s"
fi
if [ -n "${AB_NOPREFETCH:-}" ]; then
    NANOVLLM_CUDA_LEGACY=prefetch AB_ONLY=kernels timeout 60 scripts/gpu_ab.sh "$OUT/abnp" > "$OUT/abnp.log" 2>&1
    cp "$OUT/abnp/table.txt" "$OUT/ab_noprefetch_table.txt"
fi
if [ -n "${CHECK:-}" ]; then
    ONLY="$CHECK" timeout "${CHECK_S:-200}" scripts/gpu_check.sh "$OUT/check" > "$OUT/check.log" 2>&1
    cp "$OUT/check/table.txt" "$OUT/check_table.txt" 2> /dev/null
fi
[ -f "$OUT/ab/table.txt" ] && cp "$OUT/ab/table.txt" "$OUT/ab_table.txt"
for f in "$OUT"/ab/*profile.txt; do [ -f "$f" ] && cp "$f" "$OUT/"; done
xz -9 "$OUT/cuda_tests.log" 2> /dev/null
# everything else in one archive: at most 8 files come back
KEEP='^(logs.tgz|.*_table.txt|.*profile.txt|cuda_tests.log.xz|sass.txt|ttft.txt)$'
(cd "$OUT" && ls -A | grep -vE "$KEEP" | tar -czf logs.tgz -T - 2> /dev/null &&
    ls -A | grep -vE "$KEEP" | xargs -r rm -rf)
echo "==== total +$(($(date +%s) - T0)) s"
cat "$OUT/sass.txt" "$OUT/ttft.txt" 2> /dev/null
grep attention "$OUT/ab_noprefetch_table.txt" 2> /dev/null | sed 's/^/NOPREFETCH /'
cat "$OUT/ab_table.txt" "$OUT/check_table.txt" 2> /dev/null
for f in "$OUT"/*profile.txt; do [ -f "$f" ] && echo "== $(basename "$f")" && head -16 "$f"; done
