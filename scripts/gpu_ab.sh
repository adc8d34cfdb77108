#!/usr/bin/env bash
# gpu_ab.sh - the CUDA kernels against the ones they replaced, in one call on
# a GPU machine, a table last (format kept stable: NAME | RESULT | DETAIL).
#
#   scripts/gpu_bundle.sh                        (here: build and pack the bundle)
#   scripts/gpu_ab.sh OUT_DIR                    (there, gpu-bundle/ carried)
#   AB_ONLY="kernels e2e fuse prefill profile moe fp8 fp8big kvfp8 hybrid ttft hybridprofile workloads fp8profile admission" \
#       scripts/gpu_ab.sh  (sections; all by default)
#
# Every previous kernel is still in the binary and chosen at run time by
# NANOVLLM_CUDA_LEGACY (cuda/cuda_variants.h): "attention", "kernels" (the
# row kernels), "sampler", or a comma list. So A and B run the same build
# on the same warm machine, alternating.
#  kernels: bench --attention (decode attention alone: the current kernel,
#           the same unsplit, the previous kernel; CUDA-event timings, best
#           of 10; the largest difference between the two kernels' outputs on
#           random K, V, q) at the issue's shapes, for Qwen3-0.6B's heads,
#           Qwen3-30B-A3B's (32/4) and Qwen3-8B's (32/8): groups of 3 and more
#           on the tensor cores, and again on FMAs (NANOVLLM_CUDA_LEGACY=bf16decode);
#  e2e:     a random Qwen3-0.6B: single-sequence decode (bench --latency, the
#           median of AB_ROUNDS alternating rounds) and nano-vllm's bench.py
#           workload (bench) for the current build, each part's previous
#           kernels alone and all of them; the current build's logits and
#           greedy tokens against the all-previous build's (AB_WORKLOAD
#           names the variants the workload runs for, e.g. "current all-previous");
#  fuse:    single-sequence decode (and 4 sequences' output rate) with RMSNorm and SiLU x up
#           inside the gemvs against their own launches (NANOVLLM_CUDA_LEGACY=fuse),
#           each with and without programmatic dependent launches ("pdl"),
#           medians of AB_ROUNDS alternating rounds, and 256 greedy tokens through
#           all four (neither changes arithmetic: the same tokens);
#  prefill: the mma.sync flash attention against the WMMA kernel
#           (NANOVLLM_CUDA_LEGACY=prefill): prefill
#           tokens/s at 512, 4,096 and 16,384-token prompts (AB_PREFILL_LENS; medians of 2),
#           the workload, and the logits of one prompt through both;
#  profile: ncu's per-kernel time over a few eager single-sequence decode
#           steps (proportions: ncu serialises the launches);
#  moe:     Qwen3-30B-A3B's shapes with dummy weights: single-sequence decode,
#           current against attention on FMAs (bf16decode), SiLU x up and the
#           norms as launches of their own (fuse), the previous attention and
#           the grouped expert GEMM at decode (NANOVLLM_CUDA_LEGACY=moe: no
#           expert gemvs);
#  fp8:     Qwen3-0.6B's shape with dummy weights, FP8 (config.json with Qwen's
#           quantization_config: layer matrices float8_e4m3fn with 128 x 128
#           block scales, read as FP8 on the GPU) against bf16: single-sequence
#           decode and 512-token prefill (medians of AB_ROUNDS alternating
#           rounds), FP8 with NANOVLLM_CUDA_LEGACY=fp8gemm (prompts dequantized
#           to bf16 for cuBLAS instead of cuBLASLt's FP8 x FP8 GEMM) and with
#           "gemv" (every batch dequantized, the few-row FP8 gemv off); the
#           bench.py workload in FP8 and bf16;
#  fp8big:  the same at Qwen3-8B's shapes, decode and prefill (15.1 GB read a
#           token in bf16, 8.2 GB in FP8 with the bf16 lm_head: bytes allow
#           1.85x, where the 0.6B's tied lm_head allows 1.56x);
#  kvfp8:   the fp8 (e4m3) KV cache against bf16 (needs the CLI's
#           --kv-cache-dtype fp8): bench --attention with NANOVLLM_BENCH_KV=fp8
#           (the fp8 kernel and the bf16 one on the same values and splits, in
#           one process; the fp8 kernel on the tensor cores, then on FMAs:
#           NANOVLLM_CUDA_LEGACY=fp8decode), the bench.py
#           workload and single-sequence decode on a dummy Qwen3-0.6B with
#           --kv-cache-dtype fp8 and bf16 (AB_KV_ROUNDS alternating rounds, 2 by
#           default), the KV capacity each gets, and the logits of one prompt
#           through both caches; the workload again on the FMA kernel. About
#           3.5 minutes on an H100 (estimated).
#  hybrid:  Qwen3.5-0.8B's shape with dummy weights on --device cuda: the
#           chunked Gated DeltaNet prefill against the row-by-row kernel
#           (NANOVLLM_CUDA_LEGACY=gdn) at 512 and 4,096-token prompts (medians
#           of 2), decode after each, and one prompt's logits through both.
#  ttft:    time to first token (one prefill step, bench --latency) of 1k, 4k,
#           16k and 32k-token prompts (AB_TTFT_LENS) on dummy Qwen3-0.6B and
#           Qwen3-30B-A3B;
#  hybridprofile: ncu's per-kernel time of Qwen3.5-0.8B (dummy weights) over
#           a 4,096-token prefill and over a few decode steps;
#  workloads: the bench.py workload on dummy Qwen3.5-0.8B (256 requests) and
#           Qwen3-30B-A3B (AB_MOE_SEQS, 64; again with NANOVLLM_CUDA_LEGACY=moe:
#           the expert GEMM instead of the tile gemvs);
#  fp8profile: ncu's per-kernel time of the FP8 0.6B's 512-token prefill;
#  admission: bench --admission on a dummy 0.6B: a 16k-token prompt arriving
#           while 32 sequences decode, at chunk budgets AB_ADMISSION_BUDGETS.
# Logs and JSON go to OUT_DIR; the model to $WORK.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-gpu-ab-out}
WORK=${WORK:-/tmp/nanovllm-gpu-check}
ROUNDS=${AB_ROUNDS:-3}
mkdir -p "$OUT" "$WORK"
ROW_WIDTH=44
. scripts/gpu_lib.sh
median() { tr ' ' '\n' | grep -v '^$' | sort -g | awk '{a[NR]=$1} END {if (NR) print (NR % 2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN {if (a > 0 && b > 0) printf "%.2fx", a / b; else print "?"}'; }
want() { [[ " ${AB_ONLY:-kernels e2e fuse prefill profile moe fp8 fp8big kvfp8 hybrid ttft hybridprofile workloads fp8profile admission} " == *" $1 "* ]]; }
# ncu_profile NAME SKIP COUNT CMD...: ncu's time of COUNT kernel launches after SKIP, summed per
# kernel and grid into $OUT/NAME.txt (proportions: ncu serialises the launches)
ncu_profile() {
    local name=$1 skip=$2 count=$3 ncu
    shift 3
    ncu=$(command -v ncu || ls /usr/local/cuda/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2> /dev/null | head -1)
    timeout 150 "$ncu" --clock-control none --csv --metrics gpu__time_duration.sum --launch-skip "$skip" \
        --launch-count "$count" "$@" > "$OUT/${name}_raw.csv" 2> "$OUT/$name.log"
    "$PY" - "$OUT/${name}_raw.csv" > "$OUT/$name.txt" 2>> "$OUT/$name.log" <<'PY'
import csv, sys
lines = [l for l in open(sys.argv[1], errors="replace") if l.startswith('"')]
rows = {}
for r in csv.DictReader(lines):
    if r.get("Metric Name") != "gpu__time_duration.sum":
        continue
    unit = {"nsecond": 1e-3, "ns": 1e-3, "usecond": 1, "us": 1, "msecond": 1e3, "ms": 1e3}.get(r["Metric Unit"], 1)
    name = r["Kernel Name"].split("(")[0][:60] + " " + r.get("Grid Size", "")
    t = rows.setdefault(name, [0, 0.0])
    t[0] += 1
    t[1] += float(r["Metric Value"].replace(",", "")) * unit
total = sum(t[1] for t in rows.values())
print(f"kernel time {total:.0f} us over {sum(t[0] for t in rows.values())} launches")
for k, (n, t) in sorted(rows.items(), key=lambda kv: -kv[1][1]):
    print(f"{100 * t / total:5.1f}% {t:9.1f} us {n:5d} x {t / n:7.2f} us  {k}")
PY
}
# The dummy models' configs (--load-format dummy: random weights of these shapes, made on the GPU),
# each folder with the tiny fixture's tokenizer (Qwen3's) for generate.
QWEN3_06B='"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "attention_bias": false,
 "bos_token_id": 151643, "eos_token_id": 151645, "head_dim": 128, "hidden_act": "silu",
 "hidden_size": 1024, "intermediate_size": 3072, "max_position_embeddings": 40960,
 "num_attention_heads": 16, "num_hidden_layers": 28, "num_key_value_heads": 8, "rms_norm_eps": 1e-06,
 "rope_scaling": null, "rope_theta": 1000000, "tie_word_embeddings": true, "torch_dtype": "bfloat16",
 "vocab_size": 151936'
QWEN3_30B_A3B='"architectures": ["Qwen3MoeForCausalLM"], "model_type": "qwen3_moe", "attention_bias": false,
 "bos_token_id": 151643, "eos_token_id": 151645, "head_dim": 128, "hidden_act": "silu",
 "hidden_size": 2048, "intermediate_size": 6144, "max_position_embeddings": 40960,
 "num_attention_heads": 32, "num_hidden_layers": 48, "num_key_value_heads": 4,
 "rms_norm_eps": 1e-06, "rope_scaling": null, "rope_theta": 1000000, "tie_word_embeddings": false,
 "torch_dtype": "bfloat16", "vocab_size": 151936, "decoder_sparse_step": 1, "mlp_only_layers": [],
 "norm_topk_prob": true, "num_experts": 128, "num_experts_per_tok": 8, "moe_intermediate_size": 768'
QWEN3_8B='"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "attention_bias": false,
 "bos_token_id": 151643, "eos_token_id": 151645, "head_dim": 128, "hidden_act": "silu",
 "hidden_size": 4096, "intermediate_size": 12288, "max_position_embeddings": 40960,
 "num_attention_heads": 32, "num_hidden_layers": 36, "num_key_value_heads": 8, "rms_norm_eps": 1e-06,
 "rope_scaling": null, "rope_theta": 1000000, "tie_word_embeddings": false, "torch_dtype": "bfloat16",
 "vocab_size": 151936'
QWEN3_5_08B='"architectures": ["Qwen3_5ForConditionalGeneration"], "model_type": "qwen3_5", "tie_word_embeddings": true,
 "text_config": {"model_type": "qwen3_5_text", "vocab_size": 248320, "hidden_size": 1024,
  "intermediate_size": 3584, "num_hidden_layers": 24, "num_attention_heads": 8, "num_key_value_heads": 2,
  "head_dim": 256, "attention_bias": false, "attn_output_gate": true, "linear_num_key_heads": 16,
  "linear_num_value_heads": 16, "linear_key_head_dim": 128, "linear_value_head_dim": 128,
  "linear_conv_kernel_dim": 4, "rms_norm_eps": 1e-6, "full_attention_interval": 4,
  "max_position_embeddings": 262144, "tie_word_embeddings": true, "eos_token_id": 248044,
  "torch_dtype": "bfloat16", "rope_parameters": {"mrope_interleaved": true, "mrope_section": [11, 11, 10],
  "rope_type": "default", "rope_theta": 10000000, "partial_rotary_factor": 0.25}}'
QUANT='"quantization_config": {"quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic",
 "weight_block_size": [128, 128]}'
# dummy_model DIR CONFIG_FIELDS [MORE_FIELDS]
dummy_model() {
    mkdir -p "$1"
    echo "{$2${3:+, $3}}" > "$1/config.json"
    cp tests/fixtures/tiny-qwen3/tokenizer.json tests/fixtures/tiny-qwen3/tokenizer_config.json "$1/" 2> /dev/null
}
declare -A PREFILL
row "GPU" "-" "$(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>&1 | head -1)"

# ---- kernels: decode attention alone ------------------------------------------------
if want kernels; then
    # groups of 3+ (32/4: Qwen3-30B-A3B, 32/8: Qwen3-4B/8B) run on the tensor cores; ":fma" the
    # same shape on the FMA kernel (NANOVLLM_CUDA_LEGACY=bf16decode)
    for spec in "16/8 256 1024" "16/8 64 4096" "16/8 1 16384" "16/8 1 550" "16/8 16 2048" \
        "32/4 64 4096" "32/4 1 16384" "32/4 1 550" "32/8 64 4096" "32/4 64 4096 fma" "32/4 1 16384 fma" \
        "32/8 64 4096 fma"; do
        set -- $spec
        legacy=${4:+bf16decode}
        tag="${1/\//-}_$2_$3${4:+_fma}"
        name="attention $1 heads, $2 x $3${4:+, FMA kernel}"
        json=$(NANOVLLM_CUDA_LEGACY=$legacy NANOVLLM_BENCH_HEADS=$1 timeout 60 "$BIN" bench --attention \
            --num-seqs "$2" --input-len "$3" --json 2> "$OUT/attention_$tag.log")
        echo "$json" > "$OUT/attention_$tag.json"
        if [ -z "$json" ]; then
            row "$name" FAIL "see attention_$tag.log"
            continue
        fi
        diff=$(json_field "$json" "['max_diff_vs_legacy']" .2g)
        verdict=$(awk -v d="$diff" 'BEGIN {print (d == d + 0 && d <= 0.02) ? "ok" : "FAIL"}')
        # which kernel ran (bench --attention's device line), against the one expected: the tensor
        # cores from 3 query heads a KV head unless bf16decode
        kern=$(json_field "$json" "['device']" | grep -o 'on the tensor cores\|on FMAs' | head -1)
        group=$(( ${1%/*} / ${1#*/} ))
        want_kern=$([ "$group" -ge 3 ] && [ -z "$legacy" ] && echo "on the tensor cores" || echo "on FMAs")
        [ "$kern" = "$want_kern" ] || verdict=FAIL
        row "$name" "$verdict" "${kern:-kernel unknown}: $(json_field "$json" "['kv_gb_per_s']" .0f) GB/s = $(json_field "$json" "['fraction_of_copy']" .0%) of copy, $(json_field "$json" "['us_per_launch']" .1f) us, $(json_field "$json" "['splits']") splits (unsplit $(json_field "$json" "['kv_gb_per_s_unsplit']" .0f)); previous $(json_field "$json" "['kv_gb_per_s_legacy']" .0f) GB/s, $(json_field "$json" "['us_legacy']" .1f) us = $(ratio "$(json_field "$json" "['us_legacy']")" "$(json_field "$json" "['us_per_launch']")") faster; max |diff| $diff"
    done
    row "device copy bandwidth (GB/s)" "-" "$(json_field "$json" "['copy_gb_per_s']" .0f)"
fi

# ---- e2e: the random Qwen3-0.6B -----------------------------------------------------------
MODEL=$WORK/qwen3-0.6b-random
VARIANTS=("current:" "attention:attention" "kernels:kernels" "sampler:sampler" "gemv:gemv" "prefill:prefill"
    "all-previous:attention,kernels,sampler,gemv,prefill,fuse,pdl")
ALL_PREVIOUS="all-previous:attention,kernels,sampler,gemv,prefill,fuse,pdl"
# AB_WORKLOAD="current all-previous" limits the (longer) workload runs to those variants
in_workload() { [ -z "${AB_WORKLOAD:-}" ] || [[ " $AB_WORKLOAD " == *" $1 "* ]]; }
if want e2e; then
    [ -f "$MODEL/model.safetensors" ] || timeout 300 "$PY" scripts/make_random_qwen3.py --preset qwen3-0.6b \
        --out "$MODEL" > "$OUT/make_model.log" 2>&1 || row "random 0.6B model" FAIL "make_model.log"
    declare -A DECODE
    for round in $(seq 1 "$ROUNDS"); do
        for v in "${VARIANTS[@]}"; do
            name=${v%%:*}
            json=$(NANOVLLM_CUDA_LEGACY=${v#*:} timeout 90 "$BIN" bench --latency --device cuda --model "$MODEL" \
                --input-len 512 --output-len 256 --json --quiet 2>> "$OUT/latency_$name.log")
            echo "$json" >> "$OUT/latency_$name.jsonl"
            DECODE[$name]+=" $(json_field "$json" "['decode_tokens_per_s']")"
        done
    done
    cur=$(median <<< "${DECODE[current]}")
    for v in "${VARIANTS[@]}"; do
        name=${v%%:*}
        m=$(median <<< "${DECODE[$name]}")
        row "single-sequence decode, $name" "$([ -n "$m" ] && echo - || echo FAIL)" \
            "$(printf '%.0f' "${m:-0}") tok/s (median of ${DECODE[$name]# }); current / this = $(ratio "$cur" "$m")"
    done
    declare -A WORKLOAD
    for v in "${VARIANTS[@]}" "current:" "$ALL_PREVIOUS"; do
        name=${v%%:*}
        in_workload "$name" || continue
        json=$(NANOVLLM_CUDA_LEGACY=${v#*:} timeout 150 "$BIN" bench --device cuda --model "$MODEL" --json \
            2>> "$OUT/workload_$name.log")
        echo "$json" >> "$OUT/workload_$name.jsonl"
        WORKLOAD[$name]+=" $(json_field "$json" "['output_tokens_per_s']")"
    done
    cur=$(median <<< "${WORKLOAD[current]}")
    for v in "${VARIANTS[@]}"; do
        name=${v%%:*}
        in_workload "$name" || continue
        m=$(median <<< "${WORKLOAD[$name]}")
        row "bench.py workload, $name" "$([ -n "$m" ] && echo - || echo FAIL)" \
            "$(printf '%.0f' "${m:-0}") out tok/s (runs:${WORKLOAD[$name]}); current / this = $(ratio "$cur" "$m")"
    done
    # The same tokens and logits, current against all-previous.
    PROMPT=$(printf 'Paged attention keeps the KV cache in fixed-size blocks. %.0s' $(seq 1 40))
    for v in "current:" "$ALL_PREVIOUS"; do
        name=${v%%:*}
        NANOVLLM_CUDA_LEGACY=${v#*:} timeout 90 "$BIN" generate --model "$MODEL" --device cuda --prompt "$PROMPT" \
            --max-tokens 64 --ignore-eos --json > "$OUT/greedy_$name.json" 2> "$OUT/greedy_$name.log"
    done
    ids=$("$PY" -c 'import json,sys; d=json.load(open(sys.argv[1])); print(",".join(map(str, d["prompt_ids"] + d["ids"][:-1])))' \
        "$OUT/greedy_all-previous.json" 2> /dev/null)
    for v in "current:" "$ALL_PREVIOUS"; do
        name=${v%%:*}
        [ -n "$ids" ] && NANOVLLM_CUDA_LEGACY=${v#*:} timeout 90 "$BIN" generate --model "$MODEL" --device cuda \
            --prompt-ids "$ids" --max-tokens 1 --quiet --max-num-batched-tokens 4096 \
            --dump-logits "$WORK/ab_$name.f32" > /dev/null 2>> "$OUT/greedy_$name.log"
    done
    cmp=$("$PY" - "$OUT/greedy_current.json" "$OUT/greedy_all-previous.json" "$WORK/ab_current.f32" \
        "$WORK/ab_all-previous.f32" 2> "$OUT/compare.log" <<'PY'
import json, sys
import numpy as np
a, b = (json.load(open(p))["ids"] for p in sys.argv[1:3])
first = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), None)
la, lb = (np.fromfile(p, dtype=np.float32) for p in sys.argv[3:5])
rel = float(np.linalg.norm(la - lb) / np.linalg.norm(lb))
print(f"{rel:.2e}|{'none' if first is None else first}|{len(a)}")
PY
)
    IFS='|' read -r rel first count <<< "${cmp:-?|?|?}"
    ok=$(awk -v r="$rel" 'BEGIN {print (r == r + 0 && r < 2e-2) ? "ok" : "FAIL"}')
    row "logits current vs all-previous (rel L2)" "$ok" "$rel over every position of the prompt + 63 tokens"
    row "greedy current vs all-previous" "-" "first divergence: $first of $count tokens"
fi

# ---- fuse: RMSNorm and SiLU inside the decode gemvs, and programmatic launches ------------------
if want fuse; then
    [ -f "$MODEL/model.safetensors" ] || timeout 300 "$PY" scripts/make_random_qwen3.py --preset qwen3-0.6b \
        --out "$MODEL" > "$OUT/make_model.log" 2>&1
    FUSE_VARIANTS=("current:" "no pdl:pdl" "separate:fuse" "separate, no pdl:fuse,pdl")
    declare -A FUSE
    for round in $(seq 1 "$ROUNDS"); do
        for v in "${FUSE_VARIANTS[@]}"; do
            tag=${v%%:*}
            tag=${tag//[ ,]/_}
            json=$(NANOVLLM_CUDA_LEGACY=${v#*:} timeout 90 "$BIN" bench --latency --device cuda --model "$MODEL" \
                --input-len 512 --output-len 256 --json 2>> "$OUT/fuse_$tag.log")
            echo "$json" >> "$OUT/fuse_${tag}_1.jsonl"
            FUSE[${v%%:*}1]+=" $(json_field "$json" "['decode_tokens_per_s']")"
            # 4 sequences decoding together (output tokens/s of the whole run, prefill included)
            json=$(NANOVLLM_CUDA_LEGACY=${v#*:} timeout 90 "$BIN" bench --device cuda --model "$MODEL" --num-seqs 4 \
                --min-input 512 --max-input 512 --min-output 512 --max-output 512 --json 2>> "$OUT/fuse_$tag.log")
            echo "$json" >> "$OUT/fuse_${tag}_4.jsonl"
            FUSE[${v%%:*}4]+=" $(json_field "$json" "['output_tokens_per_s']")"
        done
    done
    for seqs in 1 4; do
        c=$(median <<< "${FUSE[current$seqs]}")
        for v in "${FUSE_VARIANTS[@]}"; do
            name=${v%%:*}
            m=$(median <<< "${FUSE[$name$seqs]}")
            row "decode x$seqs, $name" "$([ -n "$m" ] && echo - || echo FAIL)" \
                "$(printf '%.0f' "${m:-0}") tok/s (runs:${FUSE[$name$seqs]}); current / this = $(ratio "$c" "$m")"
        done
    done
    # the same bits every way: fusion and launch order change no arithmetic
    PROMPT=$(printf 'The residual stream carries every layer. %.0s' $(seq 1 20))
    for v in "${FUSE_VARIANTS[@]}"; do
        tag=${v%%:*}
        tag=${tag//[ ,]/_}
        NANOVLLM_CUDA_LEGACY=${v#*:} timeout 90 "$BIN" generate --model "$MODEL" --device cuda --prompt "$PROMPT" \
            --max-tokens 256 --ignore-eos --json > "$OUT/fuse_greedy_$tag.json" 2>> "$OUT/fuse_greedy.log"
    done
    for tag in no_pdl separate separate__no_pdl; do
        same=$("$PY" -c 'import json, sys; a, b = (json.load(open(p))["ids"] for p in sys.argv[1:]); print("same" if a == b and len(a) == 256 else "differ at %s" % next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b))))' \
            "$OUT/fuse_greedy_current.json" "$OUT/fuse_greedy_$tag.json" 2>> "$OUT/fuse_greedy.log")
        row "greedy 256 tokens, current vs $tag" "$([ "$same" = same ] && echo ok || echo FAIL)" "${same:-?}"
    done
    row "fused decode's start-up check" "$(grep -q 'inside the gemvs (the same bytes' "$OUT/fuse_current.log" && echo ok || echo FAIL)" \
        "$(grep -ao 'decode steps of up to 4 rows: .\{0,80\}' "$OUT/fuse_current.log" | head -1)"
    row "graphs with programmatic launches" "$(grep -q 'programmatic dependent launches failed' "$OUT/fuse_current.log" && echo FAIL || echo ok)" \
        "$(grep -ao 'CUDA graphs [^;]*' "$OUT/fuse_current.log" | head -1)"
fi

# ---- prefill: the mma.sync flash attention (opt-in) against the WMMA kernel ---------------------
if want prefill; then
    [ -f "$MODEL/model.safetensors" ] || timeout 300 "$PY" scripts/make_random_qwen3.py --preset qwen3-0.6b \
        --out "$MODEL" > "$OUT/make_model.log" 2>&1
    for len in ${AB_PREFILL_LENS:-512 4096 16384}; do
        for v in "wmma:prefill" "flash:" "wmma:prefill" "flash:"; do
            name=${v%%:*}
            json=$(NANOVLLM_CUDA_LEGACY=${v#*:} timeout 90 "$BIN" bench --latency --device cuda --model "$MODEL" \
                --input-len "$len" --output-len 2 --max-num-batched-tokens "$len" --json --quiet \
                2>> "$OUT/prefill_${name}_$len.log")
            echo "$json" >> "$OUT/prefill_${name}_$len.jsonl"
            PREFILL[$name$len]+=" $(json_field "$json" "['prefill_tokens_per_s']")"
        done
        w=$(median <<< "${PREFILL[wmma$len]}")
        f=$(median <<< "${PREFILL[flash$len]}")
        row "prefill $len tokens, flash vs wmma" "$([ -n "$f" ] && echo - || echo FAIL)" \
            "$(printf '%.0f' "${f:-0}") vs $(printf '%.0f' "${w:-0}") tok/s = $(ratio "$f" "$w")"
    done
    json=$(timeout 150 "$BIN" bench --device cuda --model "$MODEL" --json \
        2>> "$OUT/workload_flash.log")
    row "bench.py workload, flash prefill" "$([ -n "$json" ] && echo - || echo FAIL)" \
        "$(json_field "$json" "['output_tokens_per_s']" .0f) out tok/s"
    PROMPT=$(printf 'Flash attention keeps the scores in registers. %.0s' $(seq 1 60))
    for v in "wmma:prefill" "flash:"; do
        NANOVLLM_CUDA_LEGACY=${v#*:} timeout 90 "$BIN" generate --model "$MODEL" --device cuda --prompt "$PROMPT" \
            --max-tokens 1 --quiet --dump-logits "$WORK/prefill_${v%%:*}.f32" > /dev/null 2>> "$OUT/prefill_logits.log"
    done
    rel=$("$PY" -c 'import sys, numpy as np; a, b = (np.fromfile(p, dtype=np.float32) for p in sys.argv[1:]); print(f"{np.linalg.norm(a - b) / np.linalg.norm(b):.2e}")' \
        "$WORK/prefill_flash.f32" "$WORK/prefill_wmma.f32" 2>> "$OUT/prefill_logits.log")
    ok=$(awk -v r="$rel" 'BEGIN {print (r == r + 0 && r < 2e-2) ? "ok" : "FAIL"}')
    row "prefill logits flash vs wmma (rel L2)" "$ok" "${rel:-?} over a ~600-token prompt"
fi

# ---- profile: where a single-sequence decode step's time goes (ncu, eager) -------------------
if want profile; then
    [ -f "$MODEL/model.safetensors" ] || timeout 300 "$PY" scripts/make_random_qwen3.py --preset qwen3-0.6b \
        --out "$MODEL" > "$OUT/make_model.log" 2>&1
    # the launches after warm-up and the 512-token prefill: a few decode steps
    ncu_profile profile "${AB_PROFILE_SKIP:-3000}" "${AB_PROFILE_COUNT:-900}" \
        "$BIN" bench --latency --device cuda --enforce-eager --model "$MODEL" --input-len 512 --output-len 32
    row "profile: decode kernels (ncu, eager)" "$([ -s "$OUT/profile.txt" ] && echo - || echo FAIL)" \
        "$(head -1 "$OUT/profile.txt"); top: $(sed -n 2,4p "$OUT/profile.txt" | awk '{printf "%s %s; ", $1, $7}')"
fi

# ---- moe: Qwen3-30B-A3B's shapes, dummy weights --------------------------------------------
if want moe; then
    MOE=$WORK/qwen3-30b-a3b-dummy
    dummy_model "$MOE" "$QWEN3_30B_A3B"
    # attention on FMAs (bf16decode: eight heads a KV head leave the tensor cores), SiLU x up and the
    # norms as launches of their own (fuse), the previous decode kernel, the grouped GEMM
    for v in "current:" "FMA attention:bf16decode" "separate SiLU:fuse" "attention:attention" "grouped GEMM:moe"; do
        name=${v%%:*}
        json=$(NANOVLLM_CUDA_LEGACY=${v#*:} timeout 120 "$BIN" bench --latency --device cuda --load-format dummy \
            --model "$MOE" --input-len 512 --output-len 128 --json 2>> "$OUT/moe_${name// /_}.log")
        echo "$json" >> "$OUT/moe_${name// /_}.jsonl"
        row "30B-A3B single-stream decode, $name" "$([ -n "$json" ] && echo - || echo FAIL)" \
            "$(json_field "$json" "['decode_tokens_per_s']" .0f) tok/s"
    done
fi

# ---- fp8: a dummy FP8 Qwen3-0.6B against the same shapes in bf16 --------------------------------
if want fp8; then
    dummy_model "$WORK/qwen3-0.6b-dummy-bf16" "$QWEN3_06B"
    dummy_model "$WORK/qwen3-0.6b-dummy-fp8" "$QWEN3_06B" "$QUANT"
    FP8_VARIANTS=("bf16:bf16:" "fp8:fp8:" "fp8, prompts dequantized:fp8:fp8gemm" "fp8 dequantized:fp8:gemv")
    declare -A FP8_DECODE FP8_PREFILL FP8_WORKLOAD
    for round in $(seq 1 "$ROUNDS"); do
        for v in "${FP8_VARIANTS[@]}"; do
            IFS=: read -r name kind legacy <<< "$v"
            log="$OUT/fp8_${name// /_}.log"
            json=$(NANOVLLM_CUDA_LEGACY=$legacy timeout 120 "$BIN" bench --latency --device cuda --load-format dummy \
                --model "$WORK/qwen3-0.6b-dummy-$kind" --input-len 512 --output-len 256 --json 2>> "$log")
            echo "$json" >> "$OUT/fp8_${name// /_}.jsonl"
            FP8_DECODE[$name]+=" $(json_field "$json" "['decode_tokens_per_s']")"
            FP8_PREFILL[$name]+=" $(json_field "$json" "['prefill_tokens_per_s']")"
        done
    done
    # the upload's own line: how many stacks stayed FP8, and their bytes; and how prompts multiply
    row "0.6B dummy fp8: weights on the GPU" "$(grep -q 'read as FP8 on the GPU' "$OUT/fp8_fp8.log" && echo ok || echo FAIL)" \
        "$(grep -ao 'FP8 weights: [^;]*' "$OUT/fp8_fp8.log" | head -1)"
    row "0.6B dummy fp8: prompt steps" "$(grep -q 'FP8 x FP8 on the tensor cores' "$OUT/fp8_fp8.log" && echo ok || echo FAIL)" \
        "$(grep -ao 'FP8 prompt steps: .\{0,90\}' "$OUT/fp8_fp8.log" | head -1)"
    # what quantizing the activations does to one prompt's logits (dummy weights: noise, so only the size)
    PROMPT=$(printf 'Block scales keep FP8 close to bf16. %.0s' $(seq 1 40))
    for v in "tensor:" "dequantized:fp8gemm"; do
        NANOVLLM_CUDA_LEGACY=${v#*:} timeout 90 "$BIN" generate --model "$WORK/qwen3-0.6b-dummy-fp8" --load-format dummy \
            --device cuda --prompt "$PROMPT" --max-tokens 1 --quiet --dump-logits "$WORK/fp8_${v%%:*}.f32" \
            > /dev/null 2>> "$OUT/fp8_logits.log"
    done
    rel=$("$PY" -c 'import sys, numpy as np; a, b = (np.fromfile(p, dtype=np.float32) for p in sys.argv[1:]); print(f"{np.linalg.norm(a - b) / np.linalg.norm(b):.2e}")' \
        "$WORK/fp8_tensor.f32" "$WORK/fp8_dequantized.f32" 2>> "$OUT/fp8_logits.log")
    row "0.6B dummy fp8 prompt logits, FP8 x FP8 vs dequantized (rel L2)" "$([ -n "$rel" ] && echo - || echo FAIL)" \
        "${rel:-?} (a ~400-token prompt)"
    # the bench.py workload: decode batches past 16 rows take the FP8 GEMM too (inside the graphs)
    for kind in bf16 fp8; do
        json=$(timeout 150 "$BIN" bench --device cuda --load-format dummy --model "$WORK/qwen3-0.6b-dummy-$kind" \
            --json 2>> "$OUT/fp8_workload_$kind.log")
        echo "$json" >> "$OUT/fp8_workload_$kind.jsonl"
        FP8_WORKLOAD[$kind]=$(json_field "$json" "['output_tokens_per_s']")
    done
    row "0.6B dummy bench.py workload, fp8 vs bf16" "$([ -n "${FP8_WORKLOAD[fp8]}" ] && echo - || echo FAIL)" \
        "$(printf '%.0f' "${FP8_WORKLOAD[fp8]:-0}") vs $(printf '%.0f' "${FP8_WORKLOAD[bf16]:-0}") out tok/s = $(ratio "${FP8_WORKLOAD[fp8]}" "${FP8_WORKLOAD[bf16]}")"
    base=$(median <<< "${FP8_DECODE[bf16]}")
    base_prefill=$(median <<< "${FP8_PREFILL[bf16]}")
    for v in "${FP8_VARIANTS[@]}"; do
        name=${v%%:*}
        d=$(median <<< "${FP8_DECODE[$name]}")
        pf=$(median <<< "${FP8_PREFILL[$name]}")
        row "0.6B dummy decode, $name" "$([ -n "$d" ] && echo - || echo FAIL)" \
            "$(printf '%.0f' "${d:-0}") tok/s (median of ${FP8_DECODE[$name]# }) = $(ratio "$d" "$base") of bf16; prefill 512: $(printf '%.0f' "${pf:-0}") tok/s = $(ratio "$pf" "$base_prefill")"
    done
fi

# ---- fp8big: Qwen3-8B's shapes, FP8 against bf16 (bytes, not launches, bound its decode) -------
if want fp8big; then
    dummy_model "$WORK/qwen3-8b-dummy-bf16" "$QWEN3_8B"
    dummy_model "$WORK/qwen3-8b-dummy-fp8" "$QWEN3_8B" "$QUANT"
    declare -A BIG_DECODE BIG_PREFILL
    for round in $(seq 1 "$ROUNDS"); do
        for kind in bf16 fp8; do
            json=$(timeout 150 "$BIN" bench --latency --device cuda --load-format dummy \
                --model "$WORK/qwen3-8b-dummy-$kind" --input-len 512 --output-len 128 --json 2>> "$OUT/fp8big_$kind.log")
            echo "$json" >> "$OUT/fp8big_$kind.jsonl"
            BIG_DECODE[$kind]+=" $(json_field "$json" "['decode_tokens_per_s']")"
            BIG_PREFILL[$kind]+=" $(json_field "$json" "['prefill_tokens_per_s']")"
        done
    done
    b=$(median <<< "${BIG_DECODE[bf16]}")
    f=$(median <<< "${BIG_DECODE[fp8]}")
    row "8B dummy decode, fp8 vs bf16" "$([ -n "$f" ] && [ -n "$b" ] && echo - || echo FAIL)" \
        "$(printf '%.0f' "${f:-0}") vs $(printf '%.0f' "${b:-0}") tok/s = $(ratio "$f" "$b") (bytes allow 1.85x); prefill 512 $(ratio "$(median <<< "${BIG_PREFILL[fp8]}")" "$(median <<< "${BIG_PREFILL[bf16]}")")"
fi

# ---- kvfp8: the fp8 KV cache against bf16 ---------------------------------------------------
if want kvfp8; then
    # decode attention alone: NANOVLLM_BENCH_KV=fp8 times the fp8 kernel, and as "legacy" the
    # bf16 kernel on a bf16 cache of the same (e4m3) values with the same splits; the fp8
    # kernel on the tensor cores (sm_89+), then on FMAs (NANOVLLM_CUDA_LEGACY=fp8decode)
    for legacy in "" fp8decode; do
        for spec in "16/8 256 1024" "16/8 64 4096" "16/8 16 2048" "16/8 1 16384" "32/4 64 4096"; do
            set -- $spec
            tag="${1/\//-}_$2_$3${legacy:+_fma}"
            name="kv fp8 attention $1, $2 x $3, ${legacy:+FMA kernel}${legacy:-current}"
            json=$(NANOVLLM_BENCH_KV=fp8 NANOVLLM_CUDA_LEGACY=$legacy NANOVLLM_BENCH_HEADS=$1 timeout 60 "$BIN" bench \
                --attention --num-seqs "$2" --input-len "$3" --json 2> "$OUT/kvfp8_attention_$tag.log")
            echo "$json" > "$OUT/kvfp8_attention_$tag.json"
            if [ -z "$json" ]; then
                row "$name" FAIL "see kvfp8_attention_$tag.log"
                continue
            fi
            diff=$(json_field "$json" "['max_diff_vs_legacy']" .2g)
            verdict=$(awk -v d="$diff" 'BEGIN {print (d == d + 0 && d <= 0.02) ? "ok" : "FAIL"}')
            # the tensor cores from 3 query heads a KV head unless fp8decode
            kern=$(json_field "$json" "['device']" | grep -o 'fp8 KV cache on [a-zA-Z ]*(' | head -1)
            group=$(( ${1%/*} / ${1#*/} ))
            want_kern=$([ "$group" -ge 3 ] && [ -z "$legacy" ] && echo "the tensor cores" || echo "FMAs")
            [ "$kern" = "fp8 KV cache on $want_kern (" ] || verdict=FAIL
            us=$(json_field "$json" "['us_per_launch']")
            us_bf16=$(json_field "$json" "['us_legacy']")
            row "$name" "$verdict" "${kern%% (}: $(printf '%.1f' "${us:-0}") us vs bf16 $(printf '%.1f' "${us_bf16:-0}") us = $(ratio "$us_bf16" "$us") faster; fp8 $(json_field "$json" "['kv_gb_per_s']" .0f) GB/s = $(json_field "$json" "['fraction_of_copy']" .0%) of copy, $(json_field "$json" "['splits']") splits (unsplit $(json_field "$json" "['kv_gb_per_s_unsplit']" .0f) GB/s); max |fp8 - bf16| $diff"
        done
    done
    row "device copy bandwidth (GB/s)" "-" "$(json_field "$json" "['copy_gb_per_s']" .0f)"

    # the bench.py workload and single-sequence decode, a dummy Qwen3-0.6B
    KVM=$WORK/qwen3-0.6b-dummy-kv
    dummy_model "$KVM" "$QWEN3_06B"
    declare -A KV_WORK KV_DECODE
    # the option itself comes with the CLI's plumbing (another branch): without it, say so once
    if ! "$BIN" bench --device null --model tests/fixtures/tiny-qwen3 --kv-cache-dtype fp8 --num-seqs 1 \
        --input-len 4 --output-len 1 --json > /dev/null 2> "$OUT/kvfp8_cli.log"; then
        row "nanovllm --kv-cache-dtype fp8" FAIL "$(head -c 160 "$OUT/kvfp8_cli.log" | tr '\n' ' ')"
    fi
    for round in $(seq 1 "${AB_KV_ROUNDS:-2}"); do
        for kv in bf16 fp8; do
            json=$(timeout 150 "$BIN" bench --device cuda --load-format dummy --model "$KVM" --kv-cache-dtype "$kv" \
                --json 2>> "$OUT/kvfp8_workload_$kv.log")
            echo "$json" >> "$OUT/kvfp8_workload_$kv.jsonl"
            KV_WORK[$kv]+=" $(json_field "$json" "['output_tokens_per_s']")"
            if [ "$kv" = fp8 ]; then # the same on the FMA kernel
                json=$(NANOVLLM_CUDA_LEGACY=fp8decode timeout 150 "$BIN" bench --device cuda --load-format dummy \
                    --model "$KVM" --kv-cache-dtype fp8 --json 2>> "$OUT/kvfp8_workload_fma.log")
                KV_WORK[fma]+=" $(json_field "$json" "['output_tokens_per_s']")"
            fi
            json=$(timeout 90 "$BIN" bench --latency --device cuda --load-format dummy --model "$KVM" \
                --kv-cache-dtype "$kv" --input-len 512 --output-len 256 --json 2>> "$OUT/kvfp8_latency_$kv.log")
            echo "$json" >> "$OUT/kvfp8_latency_$kv.jsonl"
            KV_DECODE[$kv]+=" $(json_field "$json" "['decode_tokens_per_s']")"
        done
    done
    for kv in bf16 fp8; do
        cap=$(grep -ao "KV cache [0-9]* blocks x [0-9]* tokens = [0-9]* tokens ([0-9.]* GB)" \
            "$OUT/kvfp8_workload_$kv.log" | head -1)
        row "0.6B dummy KV capacity, $kv" "$([ -n "$cap" ] && echo - || echo FAIL)" "${cap:-unknown}"
    done
    grep -q "fp8 e4m3 KV cache" "$OUT/kvfp8_workload_fp8.jsonl" 2> /dev/null && fp8_ok=ok || fp8_ok=FAIL
    w_bf16=$(median <<< "${KV_WORK[bf16]}")
    w_fp8=$(median <<< "${KV_WORK[fp8]}")
    speedup=$(ratio "$w_fp8" "$w_bf16")
    goal=$(awk -v a="${w_fp8:-0}" -v b="${w_bf16:-0}" 'BEGIN {print (b > 0 && a / b >= 1.6) ? "ok" : "FAIL"}')
    row "bench.py workload, kv bf16" "$([ -n "$w_bf16" ] && echo - || echo FAIL)" \
        "$(printf '%.0f' "${w_bf16:-0}") out tok/s (runs:${KV_WORK[bf16]})"
    row "bench.py workload, kv fp8" "$fp8_ok" \
        "$(printf '%.0f' "${w_fp8:-0}") out tok/s (runs:${KV_WORK[fp8]}); fp8 / bf16 = $speedup"
    row "bench.py workload fp8 >= 1.6x bf16" "$goal" "$speedup (the issue's goal)"
    w_fma=$(median <<< "${KV_WORK[fma]}")
    # the 0.6B has two query heads a KV head: its fp8 decode attention runs on FMAs (DMMA_MIN_GROUP)
    grep -q "decode attention on FMAs (head group" "$OUT/kvfp8_workload_fp8.log" 2> /dev/null && mma_ok=ok || mma_ok=FAIL
    row "bench.py workload, kv fp8 on FMAs" "$([ -n "$w_fma" ] && echo - || echo FAIL)" \
        "$(printf '%.0f' "${w_fma:-0}") out tok/s (runs:${KV_WORK[fma]}); tensor cores / FMAs = $(ratio "$w_fp8" "$w_fma")"
    row "0.6B fp8 decode attention on FMAs (log)" "$mma_ok" "runner's log line in kvfp8_workload_fp8.log"
    d_bf16=$(median <<< "${KV_DECODE[bf16]}")
    d_fp8=$(median <<< "${KV_DECODE[fp8]}")
    row "single-sequence decode, kv fp8 vs bf16" "$([ -n "$d_fp8" ] && echo - || echo FAIL)" \
        "$(printf '%.0f' "${d_fp8:-0}") vs $(printf '%.0f' "${d_bf16:-0}") tok/s = $(ratio "$d_fp8" "$d_bf16")"
    # one prompt's logits through both caches (dummy weights: random, so only a size check;
    # the tiny fixture's tokenizer is Qwen3's)
    PROMPT=$(printf 'The KV cache holds one byte a value in e4m3. %.0s' $(seq 1 40))
    for kv in bf16 fp8; do
        timeout 90 "$BIN" generate --model "$KVM" --load-format dummy --device cuda --kv-cache-dtype "$kv" \
            --prompt "$PROMPT" --max-tokens 1 --quiet --dump-logits "$WORK/kvfp8_$kv.f32" > /dev/null \
            2>> "$OUT/kvfp8_logits.log"
    done
    rel=$("$PY" -c 'import sys, numpy as np; a, b = (np.fromfile(p, dtype=np.float32) for p in sys.argv[1:]); print(f"{np.linalg.norm(a - b) / np.linalg.norm(b):.2e}")' \
        "$WORK/kvfp8_fp8.f32" "$WORK/kvfp8_bf16.f32" 2>> "$OUT/kvfp8_logits.log")
    row "logits kv fp8 vs bf16 (rel L2)" "-" "${rel:-?} over a ~500-token prompt, dummy weights"
fi

if want hybrid; then
    # Qwen3.5-0.8B's shape with dummy weights (--device cuda: auto keeps Qwen3.5 on the CPU until
    # this runs): the chunked Gated DeltaNet kernels against the row-by-row one (NANOVLLM_CUDA_LEGACY=gdn)
    # in prefill, single-sequence decode (graphs: the row kernel either way), and one prompt's logits
    # through both
    QM=$WORK/qwen3.5-0.8b-dummy
    dummy_model "$QM" "$QWEN3_5_08B"
    declare -A GDN_PREFILL GDN_DECODE
    for len in 512 4096; do
        for v in "chunked:" "rows:gdn" "chunked:" "rows:gdn"; do
            name=${v%%:*}
            json=$(NANOVLLM_CUDA_LEGACY=${v#*:} timeout 90 "$BIN" bench --latency --device cuda --load-format dummy \
                --model "$QM" --input-len "$len" --output-len 128 --max-num-batched-tokens "$len" --json \
                2>> "$OUT/hybrid_${name}_$len.log")
            echo "$json" >> "$OUT/hybrid_${name}_$len.jsonl"
            GDN_PREFILL[$name$len]+=" $(json_field "$json" "['prefill_tokens_per_s']")"
            GDN_DECODE[$name$len]+=" $(json_field "$json" "['decode_tokens_per_s']")"
        done
        c=$(median <<< "${GDN_PREFILL[chunked$len]}")
        r=$(median <<< "${GDN_PREFILL[rows$len]}")
        row "Qwen3.5-0.8B prefill $len, chunked vs rows" "$([ -n "$c" ] && echo - || echo FAIL)" \
            "$(printf '%.0f' "${c:-0}") vs $(printf '%.0f' "${r:-0}") tok/s = $(ratio "$c" "$r")"
        d=$(median <<< "${GDN_DECODE[chunked$len]}")
        row "Qwen3.5-0.8B decode after $len" "$([ -n "$d" ] && echo - || echo FAIL)" \
            "$(printf '%.0f' "${d:-0}") tok/s; floor $(json_field "$(tail -1 "$OUT/hybrid_chunked_$len.jsonl")" \
            "['decode_floor_tokens_per_s']" .0f) tok/s at the copy rate"
    done
    PROMPT=$(printf 'A gated delta rule keeps one state a head. %.0s' $(seq 1 60))
    for v in "chunked:" "rows:gdn"; do
        NANOVLLM_CUDA_LEGACY=${v#*:} timeout 90 "$BIN" generate --model "$QM" --load-format dummy --device cuda \
            --prompt "$PROMPT" --max-tokens 1 --quiet --dump-logits "$WORK/hybrid_${v%%:*}.f32" > /dev/null \
            2>> "$OUT/hybrid_logits.log"
    done
    rel=$("$PY" -c 'import sys, numpy as np; a, b = (np.fromfile(p, dtype=np.float32) for p in sys.argv[1:]); print(f"{np.linalg.norm(a - b) / np.linalg.norm(b):.2e}")' \
        "$WORK/hybrid_chunked.f32" "$WORK/hybrid_rows.f32" 2>> "$OUT/hybrid_logits.log")
    ok=$(awk -v r="$rel" 'BEGIN {print (r == r + 0 && r < 1e-2) ? "ok" : "FAIL"}')
    row "Qwen3.5 logits chunked vs rows (rel L2)" "$ok" "${rel:-?} over a ~600-token prompt, dummy weights"
fi

# ---- ttft: long prompts, one prefill step each (dummy 0.6B and 30B-A3B) ------------------------
if want ttft; then
    dummy_model "$WORK/qwen3-0.6b-dummy-bf16" "$QWEN3_06B"
    dummy_model "$WORK/qwen3-30b-a3b-dummy" "$QWEN3_30B_A3B"
    for m in "0.6B:qwen3-0.6b-dummy-bf16" "30B-A3B:qwen3-30b-a3b-dummy"; do
        for len in ${AB_TTFT_LENS:-1024 4096 16384 32768}; do
            json=$(timeout 120 "$BIN" bench --latency --device cuda --load-format dummy --model "$WORK/${m#*:}" \
                --input-len "$len" --output-len 2 --max-num-batched-tokens "$len" --max-model-len $((len + 64)) \
                --json 2>> "$OUT/ttft_${m%%:*}_$len.log")
            tps=$(json_field "$json" "['prefill_tokens_per_s']")
            row "time to first token, ${m%%:*}, $len tokens" "$([ -n "$tps" ] && echo - || echo FAIL)" \
                "$(awk -v n="$len" -v t="${tps:-0}" 'BEGIN {if (t > 0) printf "%.3f s (%.0f tok/s; one prefill step, process start not counted)", n / t, t; else print "?"}')"
        done
    done
fi

# ---- hybridprofile: where Qwen3.5-0.8B's prefill and decode time goes (ncu, eager) --------------
if want hybridprofile; then
    QM=$WORK/qwen3.5-0.8b-dummy
    dummy_model "$QM" "$QWEN3_5_08B"
    ncu_profile hybrid_prefill_profile 0 "${AB_HYBRID_PREFILL_COUNT:-2000}" "$BIN" bench --latency --device cuda \
        --enforce-eager --load-format dummy --model "$QM" --input-len 4096 --output-len 1 --max-num-batched-tokens 4096
    ncu_profile hybrid_decode_profile "${AB_HYBRID_DECODE_SKIP:-2000}" "${AB_HYBRID_DECODE_COUNT:-600}" "$BIN" bench \
        --latency --device cuda --enforce-eager --load-format dummy --model "$QM" --input-len 512 --output-len 64
    for p in prefill decode; do
        row "Qwen3.5-0.8B $p kernels (ncu, eager)" "$([ -s "$OUT/hybrid_${p}_profile.txt" ] && echo - || echo FAIL)" \
            "$(head -1 "$OUT/hybrid_${p}_profile.txt"); top: $(sed -n 2,5p "$OUT/hybrid_${p}_profile.txt" | awk '{printf "%s %s; ", $1, $7}')"
    done
fi

# ---- workloads: the bench.py workload on the dummy Qwen3.5-0.8B and Qwen3-30B-A3B ---------------
if want workloads; then
    dummy_model "$WORK/qwen3.5-0.8b-dummy" "$QWEN3_5_08B"
    dummy_model "$WORK/qwen3-30b-a3b-dummy" "$QWEN3_30B_A3B"
    # the 30B-A3B twice more: with the expert GEMM at every batch past 8 tokens (NANOVLLM_CUDA_LEGACY=moe)
    for m in "Qwen3.5-0.8B:qwen3.5-0.8b-dummy:256:" "30B-A3B:qwen3-30b-a3b-dummy:${AB_MOE_SEQS:-64}:" \
        "30B-A3B, expert GEMM:qwen3-30b-a3b-dummy:${AB_MOE_SEQS:-64}:moe"; do
        IFS=: read -r name dir seqs legacy <<< "$m"
        json=$(NANOVLLM_CUDA_LEGACY=$legacy timeout 150 "$BIN" bench --device cuda --load-format dummy \
            --model "$WORK/$dir" --num-seqs "$seqs" --json 2>> "$OUT/workload_${dir}${legacy:+_$legacy}.log")
        echo "$json" >> "$OUT/workload_${dir}${legacy:+_$legacy}.jsonl"
        row "bench.py workload, $name, $seqs seqs" "$([ -n "$json" ] && echo - || echo FAIL)" \
            "$(json_field "$json" "['output_tokens_per_s']" .0f) out tok/s, $(json_field "$json" "['preemptions']") preemptions"
    done
fi

# ---- fp8profile: where an FP8 0.6B's 512-token prefill goes (ncu, eager) -----------------------
if want fp8profile; then
    dummy_model "$WORK/qwen3-0.6b-dummy-fp8" "$QWEN3_06B" "$QUANT"
    ncu_profile fp8_prefill_profile 0 "${AB_FP8_PROFILE_COUNT:-1200}" "$BIN" bench --latency --device cuda \
        --enforce-eager --load-format dummy --model "$WORK/qwen3-0.6b-dummy-fp8" --input-len 512 --output-len 1
    row "FP8 0.6B prefill kernels (ncu, eager)" "$([ -s "$OUT/fp8_prefill_profile.txt" ] && echo - || echo FAIL)" \
        "$(head -1 "$OUT/fp8_prefill_profile.txt")"
fi

# ---- admission: a 16k-token prompt arriving while 32 sequences decode (dummy 0.6B) -------------
if want admission; then
    dummy_model "$WORK/qwen3-0.6b-dummy-bf16" "$QWEN3_06B"
    for budget in ${AB_ADMISSION_BUDGETS:-2048 8192 16384}; do
        json=$(timeout 120 "$BIN" bench --admission --device cuda --load-format dummy --model "$WORK/qwen3-0.6b-dummy-bf16" \
            --num-seqs 32 --input-len 16384 --max-num-batched-tokens "$budget" --json --quiet \
            2>> "$OUT/admission_$budget.log")
        echo "$json" >> "$OUT/admission_$budget.jsonl"
        row "16k prompt among 32 decoding, budget $budget" "$([ -n "$json" ] && echo - || echo FAIL)" \
            "ttft $(json_field "$json" "['ttft_s']" .3f) s in $(json_field "$json" "['admission_steps']") steps; decode $(json_field "$json" "['admission_decode_tokens_per_s']" .0f) tok/s meanwhile vs $(json_field "$json" "['steady_decode_tokens_per_s']" .0f) before; longest step $(json_field "$json" "['longest_step_ms']" .1f) ms"
    done
fi

print_table "nanovllm GPU A/B"
