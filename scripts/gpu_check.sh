#!/usr/bin/env bash
# gpu_check.sh - every GPU check of the CUDA runner in one run, a table last.
#
#   scripts/gpu_bundle.sh                 (on the development machine: build, bundle)
#   scripts/gpu_check.sh OUT_DIR          (on the GPU machine, gpu-bundle/ carried)
#   ONLY="tests" scripts/gpu_check.sh OUT_DIR, then ONLY="compare figures", then
#   ONLY="moe":                           the same in three calls (each under 10 min)
#
# 1. the CUDA tests (kernels against CPU references, the tiny model's golden
#    logits and greedy tokens, CPU vs GPU batches, the engine under forced
#    preemption, graphs vs eager, the GPU sampler vs the CPU sampler);
# 2. a full-size random Qwen3-0.6B (scripts/make_random_qwen3.py): logits of
#    three prompts and the CPU's greedy continuations on the GPU vs the CPU
#    runner vs Hugging Face transformers where installed (float32 and its
#    own bf16: the GPU must be at or under transformers' bf16 distance from
#    float32), and free-running greedy tokens GPU vs CPU, a divergence judged
#    by the CPU's margin at it against bf16 noise (scripts/compare_logits.py);
# 3. figures: bench.py's workload against its floor (scripts/floor.py at the
#    device's copy bandwidth measured by bench --attention), the same with preemption forced,
#    single-sequence decode with and without CUDA graphs, process start to
#    first token, KV capacity;
# 4. moe: Qwen3-30B-A3B's shapes with dummy weights made on the GPU
#    (--load-format dummy, a config.json only): bench.py's workload against
#    its floor (the experts a step's batch is routed to, attention, KV) and
#    single-sequence decode against the bytes one token reads.
#    (The MoE CUDA tests - routing, the layer vs the CPU, the MoE fixture's
#    golden, graphs vs eager, dummy weights GPU vs CPU - are part of 1.)
# Logs and JSON go to OUT_DIR; the model and the logits dumps (GBs) to $WORK.
# Each step has its own time limit, and each row is printed as it is known,
# so a run cut short still says how far it got.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-gpu-check-out}
WORK=${WORK:-/tmp/nanovllm-gpu-check}
TESTS=${BUNDLE:-gpu-bundle}/test_nanovllm
mkdir -p "$OUT" "$WORK"
ROW_WIDTH=34
. scripts/gpu_lib.sh

# ---- the machine -------------------------------------------------------------
gpu=$(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>&1 | head -1)
row "GPU" "-" "$gpu"
"$BIN" --help > /dev/null 2>&1 || { row "binary starts" FAIL "$($BIN --help 2>&1 | head -2)"; }

# ONLY="tests compare figures" (the default) picks sections, e.g. to split a
# run over two calls of a limited length.
want() { [[ " ${ONLY:-tests compare figures moe} " == *" $1 "* ]]; }

# ---- 1. CUDA tests -------------------------------------------------------------
if want tests; then
    NANOVLLM_BIN=$BIN timeout 240 "$TESTS" --filter 'cuda*/*' --verbose > "$OUT/cuda_tests.log" 2>&1
    synth=$(grep -a "Synthesis" "$OUT/cuda_tests.log" | tail -1)
    if grep -aq "CUDA tests did not run" "$OUT/cuda_tests.log"; then
        row "CUDA tests" FAIL "skipped: $(grep -a "CUDA tests did not run" "$OUT/cuda_tests.log" | head -1)"
    elif grep -q "Failing: 0 | Crashing: 0" <<< "$synth" && ! grep -q "Tested: 0 " <<< "$synth"; then
        row "CUDA tests" ok "${synth#*Synthesis: }"
    else
        row "CUDA tests" FAIL "${synth#*Synthesis: } (see cuda_tests.log)"
    fi
    grep -a "relative error" "$OUT/cuda_tests.log" | sed 's/^.*\] //' | head -12 > "$OUT/cuda_tests_errors.txt"
    worst=$(grep -aoE "relative error [0-9.e+-]+" "$OUT/cuda_tests.log" | awk '{print $3}' | sort -g | tail -1)
    row "tiny model logits (worst rel. err)" "-" "${worst:-none} (limit 2e-2)"
    NANOVLLM_BIN=$BIN timeout 60 "$TESTS" --filter 'cli/device_selection' > "$OUT/cli_tests.log" 2>&1 \
        && row "--device cuda / auto pick the GPU" ok "" || row "--device cuda / auto pick the GPU" FAIL "cli_tests.log"

fi

MODEL=$WORK/qwen3-0.6b-random
if want compare || want figures; then
    [ -f "$MODEL/model.safetensors" ] || "$PY" scripts/make_random_qwen3.py --preset qwen3-0.6b --out "$MODEL" \
        > "$OUT/make_model.log" 2>&1 \
        || row "random 0.6B model" FAIL "make_model.log"
fi

# ---- 2. full-size random model -------------------------------------------------------
if want compare; then
    LONG=$(printf 'The quick brown fox jumps over the lazy dog while the band plays on. %.0s' $(seq 1 110))
    MEDIUM=$(printf 'Paged attention keeps the KV cache in fixed-size blocks. %.0s' $(seq 1 25))
    SHORT="Hello, my name is"
    cases="["
    for name in short medium long; do
        case $name in short) prompt=$SHORT ;; medium) prompt=$MEDIUM ;; long) prompt=$LONG ;; esac
        for dev in cpu cuda; do
            timeout 120 "$BIN" generate --model "$MODEL" --device "$dev" --prompt "$prompt" --max-tokens 32 \
                --ignore-eos --json --max-num-batched-tokens 4096 > "$OUT/gen_${name}_$dev.json" 2> "$OUT/gen_${name}_$dev.log"
        done
        ids=$("$PY" -c 'import json,sys; d=json.load(open(sys.argv[1])); print(",".join(map(str, d["prompt_ids"] + d["ids"][:-1])))' \
            "$OUT/gen_${name}_cpu.json" 2>/dev/null)
        if [ -z "$ids" ]; then
            row "0.6B $name: generate" FAIL "gen_${name}_cpu.log"
            continue
        fi
        for dev in cpu cuda; do
            timeout 120 "$BIN" generate --model "$MODEL" --device "$dev" --prompt-ids "$ids" --max-tokens 1 --quiet \
                --max-num-batched-tokens 4096 --dump-logits "$WORK/${name}_$dev.f32" > /dev/null 2>> "$OUT/gen_${name}_$dev.log"
        done
        cases+=$("$PY" - "$OUT/gen_${name}_cpu.json" "$OUT/gen_${name}_cuda.json" "$WORK" "$name" <<'PY'
import json, sys
cpu = json.load(open(sys.argv[1]))
try:
    cuda = json.load(open(sys.argv[2]))
except (OSError, ValueError):
    cuda = {}
work, name = sys.argv[3], sys.argv[4]
print(json.dumps({"name": name, "ids": cpu["prompt_ids"] + cpu["ids"][:-1], "prompt_len": len(cpu["prompt_ids"]),
                  "cpu_logits": f"{work}/{name}_cpu.f32", "cuda_logits": f"{work}/{name}_cuda.f32",
                  "cpu_greedy": cpu["ids"], "cuda_greedy": cuda.get("ids", [])}) + ",")
PY
    )
    done
    cases="${cases%,}]"
    echo "$cases" > "$WORK/cases.json"
    timeout 240 "$PY" scripts/compare_logits.py "$MODEL" "$WORK/cases.json" --hf > "$OUT/compare.jsonl" 2> "$OUT/compare.log"
    while read -r line; do
        [ -n "$line" ] || continue
        name=$(json_field "$line" "['name']")
        error=$(json_field "$line" ".get('error', '')")
        if [ -n "$error" ]; then
            row "0.6B $name: logits GPU vs CPU" FAIL "$error"
            continue
        fi
        rel=$(json_field "$line" "['rel_cuda_cpu']" .4f)
        limit=$(json_field "$line" "['rel_limit']" .4f)
        agree=$(json_field "$line" "['argmax_cuda_cpu']")
        # GPU vs CPU: both round to bf16, so within bf16's own distance from
        # float32 (transformers' bf16 where installed, else 4e-2)
        [ "$(json_field "$line" "['logits_ok']")" = True ] && v=ok || v=FAIL
        row "0.6B $name: logits GPU vs CPU" "$v" "rel $rel (limit $limit); argmax agree (margin >= 0.1) $agree"
        # fidelity: the GPU at or under transformers' bf16 distance from transformers' float32
        fid=$(json_field "$line" "['fidelity_ok']")
        hf=$(json_field "$line" ".get('rel_cuda_hf', 'n/a')" .4f)
        hf_cpu=$(json_field "$line" ".get('rel_cpu_hf', 'n/a')" .4f)
        hf16=$(json_field "$line" ".get('rel_hfbf16_hf', 'n/a')" .4f)
        case $fid in True) v=ok ;; False) v=FAIL ;; *) v="-" ;; esac
        if [ "$v" = "-" ]; then
            row "0.6B $name: vs transformers" "-" "not judged: $(json_field "$line" ".get('hf_error', 'no transformers')" | cut -c1-120)"
        else
            row "0.6B $name: vs transformers" "$v" "GPU rel $hf (limit: transformers bf16 rel $hf16); CPU rel $hf_cpu"
        fi
        # greedy: a divergence is ok only where the CPU's choice over the GPU's
        # token is within bf16 noise there (compare_logits.py), whatever the step
        div=$(json_field "$line" "['greedy_first_divergence']")
        steps=$(json_field "$line" "['greedy_steps']")
        [ "$(json_field "$line" "['greedy_ok']")" = True ] && v=ok || v=FAIL
        if [ "$div" = None ]; then
            detail="no divergence in $steps steps"
        else
            why=$(json_field "$line" ".get('greedy_why', '')")
            detail="diverges at step $div of $steps: CPU top-1 over the GPU's token $(json_field "$line" ".get('cpu_gap_to_gpu_token', 'n/a')" .3f) (noise limit $(json_field "$line" ".get('greedy_gap_limit', 'n/a')" .3f), CPU margin $(json_field "$line" ".get('cpu_margin_at_divergence', 'n/a')" .3f))${why:+; $why}"
        fi
        row "0.6B $name: greedy GPU vs CPU" "$v" "$detail"
    done < "$OUT/compare.jsonl"
    [ -s "$OUT/compare.jsonl" ] || row "logits comparison" FAIL "compare.log"

fi

# ---- 3. figures ------------------------------------------------------------------------
if want figures; then
    [ -s "$OUT/gen_short_cuda.log" ] || timeout 120 "$BIN" generate --model "$MODEL" --device cuda --prompt "Hi" \
        --max-tokens 1 --quiet > /dev/null 2> "$OUT/gen_short_cuda.log"
    kv=$(grep -ao "KV cache [0-9]* blocks x [0-9]* tokens = [0-9]* tokens ([0-9.]* GB)" "$OUT/gen_short_cuda.log" | head -1)
    row "KV capacity (0.6B, util 0.9)" "-" "${kv:-unknown}"
    graphs=$(grep -ao "[0-9]* decode graphs (up to batch [0-9]*) in [0-9.]* s" "$OUT/gen_short_cuda.log" | head -1)
    row "CUDA graphs captured" "-" "${graphs:-unknown}"
    for run in 1 2; do
        t0=$(date +%s.%N)
        "$BIN" generate --model "$MODEL" --device cuda --prompt "Hello" --max-tokens 1 --quiet > /dev/null 2> "$OUT/ttft_$run.log"
        rc=$?
        t1=$(date +%s.%N)
        row "start to first token, run $run (s)" "$([ $rc = 0 ] && echo ok || echo FAIL)" \
            "$(awk -v a="$t0" -v b="$t1" 'BEGIN {printf "%.2f", b - a}') (target <= 3)"
    done
    json=$(timeout 120 "$BIN" bench --latency --device cuda --model "$MODEL" --input-len 512 --output-len 256 --json --quiet 2> "$OUT/bench_latency.log")
    echo "$json" > "$OUT/bench_latency.json"
    # its floor: weight bytes per token at the device's copy rate (bench --latency measures it)
    row "single-sequence decode (tok/s)" "-" "$(json_field "$json" "['decode_tokens_per_s']" .0f) (floor $(json_field "$json" "['decode_floor_tokens_per_s']" .0f) at $(json_field "$json" "['memory_read_gb_per_s']" .0f) GB/s $(json_field "$json" ".get('memory_read_source', 'host memory read')"); prefill 512: $(json_field "$json" "['prefill_tokens_per_s']" .0f) tok/s)"
    json=$(timeout 120 "$BIN" bench --latency --device cuda --enforce-eager --model "$MODEL" --input-len 512 --output-len 256 --json --quiet 2> "$OUT/bench_latency_eager.log")
    echo "$json" > "$OUT/bench_latency_eager.json"
    row "  the same without CUDA graphs" "-" "$(json_field "$json" "['decode_tokens_per_s']" .0f) tok/s"
    # Decode attention alone against the copy bandwidth (bench --attention).
    for shape in "256 1024" "64 4096" "1 16384"; do
        set -- $shape
        json=$(timeout 120 "$BIN" bench --attention --num-seqs "$1" --input-len "$2" --json 2> "$OUT/bench_attention_$1_$2.log")
        echo "$json" > "$OUT/bench_attention_$1_$2.json"
        row "attention $1 x $2 tokens" "$([ -n "$json" ] && echo ok || echo FAIL)" \
            "$(json_field "$json" "['kv_gb_per_s']" .0f) GB/s = $(json_field "$json" "['fraction_of_copy']" .0%) of copy ($(json_field "$json" "['splits']") splits; unsplit $(json_field "$json" "['kv_gb_per_s_unsplit']" .0f) GB/s)"
    done
    # The device's own copy bandwidth (bytes read + written), for the floor:
    # bench --attention measured it in its last run.
    bw=$(json_field "$json" "['copy_gb_per_s']" .0f)
    row "device copy bandwidth (GB/s)" "-" "${bw:-unknown, floor at 3000}"
    floor=$("$PY" scripts/floor.py "$MODEL" --bandwidth "${bw:-3000}" --json 2> "$OUT/floor.log")
    echo "$floor" > "$OUT/floor.json"
    row "bench.py floor (out tok/s)" "-" "$(json_field "$floor" "['floor_output_tokens_per_s']" .0f) ($(json_field "$floor" "['memory_floor_s']" .2f) s memory, $(json_field "$floor" "['compute_floor_s']" .2f) s compute)"
    json=$(timeout 240 "$BIN" bench --device cuda --model "$MODEL" --json 2> "$OUT/bench.log")
    echo "$json" > "$OUT/bench.json"
    pct=$("$PY" -c "import json,sys; b=json.loads(sys.argv[1]); f=json.loads(sys.argv[2]); print('%.0f%%' % (100 * b['output_tokens_per_s'] / f['floor_output_tokens_per_s']))" "$json" "$floor" 2>/dev/null)
    row "bench.py workload (out tok/s)" "$([ -n "$json" ] && echo ok || echo FAIL)" \
        "$(json_field "$json" "['output_tokens_per_s']" .0f) in $(json_field "$json" "['seconds']" .2f) s = ${pct:-?} of the floor, $(json_field "$json" "['preemptions']") preemptions"
    json=$(timeout 180 "$BIN" bench --device cuda --model "$MODEL" --num-seqs 64 --num-gpu-blocks-override 24 --json 2> "$OUT/bench_preempt.log")
    echo "$json" > "$OUT/bench_preempt.json"
    row "64 seqs, 24 KV blocks (preemption)" "$([ -n "$json" ] && echo ok || echo FAIL)" \
        "$(json_field "$json" "['output_tokens_per_s']" .0f) out tok/s, $(json_field "$json" "['preemptions']") preemptions"

fi
# ---- 4. MoE: Qwen3-30B-A3B's shapes, dummy weights ---------------------------------------
if want moe; then
    MOE=$WORK/qwen3-30b-a3b-dummy
    mkdir -p "$MOE"
    cat > "$MOE/config.json" <<'JSON'
{"architectures": ["Qwen3MoeForCausalLM"], "model_type": "qwen3_moe", "attention_bias": false,
 "bos_token_id": 151643, "eos_token_id": 151645, "head_dim": 128, "hidden_act": "silu",
 "hidden_size": 2048, "intermediate_size": 6144, "max_position_embeddings": 40960,
 "num_attention_heads": 32, "num_hidden_layers": 48, "num_key_value_heads": 4,
 "rms_norm_eps": 1e-06, "rope_scaling": null, "rope_theta": 1000000, "tie_word_embeddings": false,
 "torch_dtype": "bfloat16", "vocab_size": 151936, "decoder_sparse_step": 1, "mlp_only_layers": [],
 "norm_topk_prob": true, "num_experts": 128, "num_experts_per_tok": 8, "moe_intermediate_size": 768}
JSON
    bw=${bw:-$(json_field "$(timeout 60 "$BIN" bench --attention --num-seqs 1 --input-len 16384 --json 2>/dev/null)" "['copy_gb_per_s']" .0f)}
    floor=$("$PY" scripts/floor.py "$MOE" --bandwidth "${bw:-3000}" --json 2> "$OUT/floor_moe.log")
    echo "$floor" > "$OUT/floor_moe.json"
    json=$(timeout 180 "$BIN" bench --latency --device cuda --load-format dummy --model "$MOE" \
        --input-len 512 --output-len 128 --json 2> "$OUT/bench_moe_latency.log")
    echo "$json" > "$OUT/bench_moe_latency.json"
    row "30B-A3B dummy: load" "$([ -n "$json" ] && echo ok || echo FAIL)" \
        "$(grep -ao "[0-9.]*B parameters, [0-9.]*B active per token" "$OUT/bench_moe_latency.log" | head -1); ready in $(json_field "$json" "['load_s']" .1f) s"
    row "30B-A3B single-stream decode" "-" \
        "$(json_field "$json" "['decode_tokens_per_s']" .0f) tok/s (floor $(json_field "$floor" "['single_stream_floor_tokens_per_s']" .0f) for $(json_field "$floor" "['bytes_per_single_token']/1e9" .2f) GB/token); prefill 512: $(json_field "$json" "['prefill_tokens_per_s']" .0f) tok/s"
    json=$(timeout 420 "$BIN" bench --device cuda --load-format dummy --model "$MOE" --json 2> "$OUT/bench_moe.log")
    echo "$json" > "$OUT/bench_moe.json"
    pct=$("$PY" -c "import json,sys; b=json.loads(sys.argv[1]); f=json.loads(sys.argv[2]); print('%.0f%%' % (100 * b['output_tokens_per_s'] / f['floor_output_tokens_per_s']))" "$json" "$floor" 2>/dev/null)
    row "30B-A3B bench.py workload" "$([ -n "$json" ] && echo ok || echo FAIL)" \
        "$(json_field "$json" "['output_tokens_per_s']" .0f) out tok/s = ${pct:-?} of the floor ($(json_field "$floor" "['floor_output_tokens_per_s']" .0f)); $(json_field "$json" "['preemptions']") preemptions"
fi

print_table "nanovllm GPU check"
