# nanovllm - build, test, sanitizers, benchmark.
#
#   make              build/nanovllm (cli/, server/), build/libnanovllm.a (every other room:
#                     base/ text/ structured/ chat/ model/ engine/ cpu/ cuda/), and the embedding
#                     fixture's generated weights and tokenizer (tests/fixtures/tiny-qwen3-embedding)
#   make test         the include order of the rooms (make layers), then the Criterion suite
#                     (and the binary it drives)
#   make layers       scripts/check_layers.sh: every include points down the rooms' order
#   make asan         the same suite under AddressSanitizer + UBSan (CPU only)
#   make bench        nanovllm bench on a full-size random Qwen3-0.6B (generated once)
#   make docker-test  build the CPU container image with podman, run it, check it serves
#   make fuzz         libFuzzer targets: build-fuzz/fuzz_tokenizer, fuzz_jinja, fuzz_structured, fuzz_gguf,
#                     fuzz_gguf_model, fuzz_chat_output (clang-14)
#   CUDA=0            build without the CUDA sources even when nvcc is present
#
# CUDA sources build when nvcc is found (PATH or /usr/local/cuda). The CUDA
# runtime is linked statically, so the binary runs on machines without CUDA.

CC      ?= gcc
BUILD   ?= build
NVCC    ?= $(shell command -v nvcc 2>/dev/null || ls /usr/local/cuda/bin/nvcc 2>/dev/null)
CUDA    ?= $(if $(NVCC),1,0)
CUDA_HOME ?= $(patsubst %/bin/nvcc,%,$(NVCC))

WARN     = -Wall -Wextra -Werror
# Includes across folders name the path from the repository root ("base/error.h").
CFLAGS  += -std=c11 -D_GNU_SOURCE -O3 -g -pthread -I. $(WARN) -MMD -MP $(EXTRA_CFLAGS)
LDLIBS   = -luv -ljansson -lpcre2-8 -lutf8proc -lopenblas -lxxhash -lm -lpthread
LDFLAGS += $(EXTRA_LDFLAGS)

LIB_SRC  = $(wildcard base/*.c text/*/*.c structured/*.c chat/*.c chat/*/*.c model/*.c engine/*.c cpu/*.c)
BIN_SRC  = $(wildcard server/*/*.c cli/*.c cli/*/*.c)
TEST_SRC = $(wildcard tests/*.c)

ifeq ($(CUDA),1)
CU_SRC    = $(wildcard cuda/*.cu)
# sm_80 machine code also runs on sm_86/89; the compute_90 PTX lets newer GPUs JIT it.
NVCCFLAGS = -O2 -std=c++17 -I. -gencode arch=compute_80,code=sm_80 -gencode arch=compute_90,code=sm_90 \
            -gencode arch=compute_90,code=compute_90 -Xcompiler -Wall,-Wextra,-Werror -MMD -MP
LDLIBS   += -L$(CUDA_HOME)/lib64 -lcudart_static -ldl -lrt -lstdc++
else
LIB_SRC  += cuda/cuda_device_none.c
TEST_SRC := $(filter-out tests/test_cuda%,$(TEST_SRC)) # they need the CUDA kernels
endif

LIB_OBJ  = $(LIB_SRC:%.c=$(BUILD)/obj/%.o) $(CU_SRC:%.cu=$(BUILD)/obj/%.cu.o)
BIN_OBJ  = $(BIN_SRC:%.c=$(BUILD)/obj/%.o)
TEST_OBJ = $(TEST_SRC:%.c=$(BUILD)/obj/%.o)

.PHONY: all fixtures test layers asan bench fuzz docker-test clean

# The embedding fixture's weights and tokenizer are the tiny model's, stored
# under Qwen3-Embedding's names and with its end-of-text post-processor:
# generated from them (byte for byte the same each time, ~1.5 s) rather than
# committed a second time (21 MB).
EMBED_FIXTURE   = tests/fixtures/tiny-qwen3-embedding
EMBED_GENERATED = $(EMBED_FIXTURE)/model.safetensors $(EMBED_FIXTURE)/tokenizer.json
# and the same model as a BF16 GGUF file (scripts/make_gguf.py: qwen3.pooling_type, add_eos_token)
EMBED_GGUF      = tests/fixtures/tiny-qwen3-embedding.gguf

# The MoE fixture's weights (../shared's tiny-qwen3-moe, 20 MB) are what
# make_random_qwen3.py writes for tiny-moe, seed 0: generated (~2 s) and checked
# against the committed checksum, so that what a GPU call carries (the working
# tree and the bundle, 64 MiB) keeps its margin.
MOE_WEIGHTS     = tests/fixtures/tiny-qwen3-moe/model.safetensors
MOE_TMP         = $(BUILD)/moe-fixture-src

# The GGUF fixtures: the tiny-gguf and tiny-gguf-moe presets (seed 0) written by
# scripts/make_gguf.py in each tensor type, each X.gguf with X.ref beside it: the
# float64 reference (scripts/qwen3_ref.py) of exactly the weights X.gguf holds, at
# every position of a fixed 12-token prompt, and its 16 greedy tokens (the layout is
# in make_gguf.py's docstring). Generated, byte for byte the same each time; the
# decoded F32 folders they come from are deleted (160 MB each).
GGUF_FIXTURE   = tests/fixtures/tiny-qwen3-gguf
GGUF_TYPES     = q8_0 q4_0 q5_0 iq4_nl q4_k q5_k q6_k bf16 mix
GGUF_MOE_TYPES = q4_k q8_0
GGUF_GENERATED = $(foreach t,$(GGUF_TYPES),$(GGUF_FIXTURE)/$(t).gguf $(GGUF_FIXTURE)/$(t).ref) \
                 $(foreach t,$(GGUF_MOE_TYPES),$(GGUF_FIXTURE)/moe-$(t).gguf $(GGUF_FIXTURE)/moe-$(t).ref)
GGUF_TMP       = $(BUILD)/gguf-fixture-src

# The FP8 fixtures: Qwen's FP8 checkpoint layout (scripts/make_fp8_qwen3.py: F8_E4M3
# projections, BF16 weight_scale_inv per 128x128 tile) of the tiny-gguf and
# tiny-gguf-moe presets (seed 0: whole tiles) and of the committed tiny-qwen3 (odd/:
# hidden 32, intermediate 96, every tile partial), each DIR/ with DIR.ref beside it
# (the float64 reference of exactly the dequantized weights, make_gguf.py's .ref
# layout), and e4m3.f32, the 256 float8_e4m3fn values as float32. Generated, byte
# for byte the same each time; the sources and F32 folders are deleted.
FP8_FIXTURE   = tests/fixtures/tiny-qwen3-fp8
FP8_MODELS    = dense moe odd
FP8_GENERATED = $(foreach m,$(FP8_MODELS),$(FP8_FIXTURE)/$(m)/model.safetensors $(FP8_FIXTURE)/$(m).ref) \
                $(FP8_FIXTURE)/e4m3.f32
FP8_TMP       = $(BUILD)/fp8-fixture-src

# The Qwen3.5 fixtures (scripts/make_random_qwen3_5.py, seed 3: of seeds 0..5 the one whose
# smallest greedy margin is largest for both presets): the tiny preset (dense, multimodal
# folder layout) in dense/ and tiny-moe (text-only layout, shared expert) in moe/, each with
# DIR-golden/ beside it (scripts/qwen3_5_ref.py golden: golden.json in tiny-qwen3-golden's
# format, logits/ for four prompts, a README.md with the measured tolerances). Generated
# in ~60 s on 2 cores. Each model is also written as llama.cpp's GGUF (qwen35, qwen35moe:
# scripts/make_gguf_qwen3_5.py) in bf16 (the same weights: the golden holds for it) and
# q8_0, with DIR-q8_0-golden/: the golden of the weights that file holds, decoded.
QWEN35_FIXTURE   = tests/fixtures/tiny-qwen3_5
QWEN35_MODELS    = dense moe
QWEN35_GENERATED = $(foreach m,$(QWEN35_MODELS),$(QWEN35_FIXTURE)/$(m)/model.safetensors \
                                                $(QWEN35_FIXTURE)/$(m)-golden/golden.json \
                     $(QWEN35_FIXTURE)/$(m)-bf16.gguf $(QWEN35_FIXTURE)/$(m)-q8_0.gguf \
                     $(QWEN35_FIXTURE)/$(m)-q8_0-golden/golden.json)
QWEN35_TMP       = $(BUILD)/qwen3_5-fixture-src

all: $(BUILD)/nanovllm $(BUILD)/libnanovllm.a

# The generated fixtures (python3-numpy, ~1 min for the GGUF files, ~15 s for FP8, ~60 s
# for Qwen3.5) are the
# tests' and the README's examples', not the program's: `make test` and
# scripts/setup.sh make them, a plain build does not.
fixtures: $(EMBED_GENERATED) $(EMBED_GGUF) $(MOE_WEIGHTS) $(GGUF_GENERATED) $(FP8_GENERATED) $(QWEN35_GENERATED)

$(EMBED_GGUF): $(EMBED_GENERATED) scripts/make_gguf.py
	scripts/make_gguf.py --model $(EMBED_FIXTURE) --type bf16 --out $@ > /dev/null

$(MOE_WEIGHTS): scripts/make_random_qwen3.py $(MOE_WEIGHTS).sha256
	scripts/make_random_qwen3.py --preset tiny-moe --seed 0 --out $(MOE_TMP) > /dev/null
	mv $(MOE_TMP)/model.safetensors $@ && rm -rf $(MOE_TMP)
	sha256sum --quiet -c $@.sha256 || { rm -f $@; echo "$@: not the committed fixture"; exit 1; }

$(EMBED_GENERATED) &: scripts/make_random_qwen3.py tests/fixtures/tiny-qwen3/tokenizer.json
	scripts/make_random_qwen3.py --preset tiny-embedding --seed 0 --out $(EMBED_FIXTURE) > /dev/null

$(GGUF_GENERATED) &: scripts/make_gguf.py scripts/qwen3_ref.py scripts/make_random_qwen3.py \
                     tests/fixtures/tiny-qwen3/tokenizer.json tests/fixtures/tiny-qwen3/tokenizer_config.json
	@rm -rf $(GGUF_TMP) && mkdir -p $(GGUF_FIXTURE)
	scripts/make_random_qwen3.py --preset tiny-gguf --seed 0 --out $(GGUF_TMP)/dense > /dev/null
	scripts/make_random_qwen3.py --preset tiny-gguf-moe --seed 0 --out $(GGUF_TMP)/moe > /dev/null
	for t in $(GGUF_TYPES); do \
	    scripts/make_gguf.py --model $(GGUF_TMP)/dense --name tiny-qwen3-gguf --type $$t \
	        --out $(GGUF_FIXTURE)/$$t.gguf --ref-out $(GGUF_TMP)/ref \
	        --ref-logits $(GGUF_FIXTURE)/$$t.ref > /dev/null || exit 1; \
	done
	for t in $(GGUF_MOE_TYPES); do \
	    scripts/make_gguf.py --model $(GGUF_TMP)/moe --name tiny-qwen3-gguf-moe --type $$t \
	        --out $(GGUF_FIXTURE)/moe-$$t.gguf --ref-out $(GGUF_TMP)/ref \
	        --ref-logits $(GGUF_FIXTURE)/moe-$$t.ref > /dev/null || exit 1; \
	done
	rm -rf $(GGUF_TMP)

$(FP8_GENERATED) &: scripts/make_fp8_qwen3.py scripts/make_gguf.py scripts/qwen3_ref.py \
                    scripts/make_random_qwen3.py tests/fixtures/tiny-qwen3/model.safetensors \
                    tests/fixtures/tiny-qwen3/config.json tests/fixtures/tiny-qwen3/tokenizer.json \
                    tests/fixtures/tiny-qwen3/tokenizer_config.json
	@rm -rf $(FP8_TMP) $(addprefix $(FP8_FIXTURE)/,$(FP8_MODELS)) && mkdir -p $(FP8_FIXTURE)
	scripts/make_random_qwen3.py --preset tiny-gguf --seed 0 --out $(FP8_TMP)/dense > /dev/null
	scripts/make_random_qwen3.py --preset tiny-gguf-moe --seed 0 --out $(FP8_TMP)/moe > /dev/null
	for m in $(FP8_MODELS); do \
	    src=$(FP8_TMP)/$$m; [ $$m = odd ] && src=tests/fixtures/tiny-qwen3; \
	    scripts/make_fp8_qwen3.py --model $$src --out $(FP8_FIXTURE)/$$m --ref-out $(FP8_TMP)/ref \
	        --ref-logits $(FP8_FIXTURE)/$$m.ref > /dev/null || exit 1; \
	done
	scripts/make_fp8_qwen3.py --e4m3-table $(FP8_FIXTURE)/e4m3.f32 > /dev/null
	rm -rf $(FP8_TMP)

$(QWEN35_GENERATED) &: scripts/make_random_qwen3_5.py scripts/qwen3_5_ref.py scripts/qwen3_ref.py \
                       scripts/make_random_qwen3.py tests/fixtures/tiny-qwen3-golden/golden.json \
                       scripts/make_gguf_qwen3_5.py scripts/make_gguf.py \
                       tests/fixtures/tiny-qwen3/tokenizer.json tests/fixtures/tiny-qwen3/tokenizer_config.json
	@rm -rf $(QWEN35_FIXTURE) && mkdir -p $(QWEN35_FIXTURE)
	scripts/make_random_qwen3_5.py --preset tiny --seed 3 --link-tokenizer --out $(QWEN35_FIXTURE)/dense > /dev/null
	scripts/make_random_qwen3_5.py --preset tiny-moe --seed 3 --link-tokenizer --out $(QWEN35_FIXTURE)/moe > /dev/null
	for m in $(QWEN35_MODELS); do \
	    scripts/qwen3_5_ref.py $(QWEN35_FIXTURE)/$$m golden --out $(QWEN35_FIXTURE)/$$m-golden \
	        --prompts tests/fixtures/tiny-qwen3-golden/golden.json > /dev/null 2>&1 || exit 1; \
	    scripts/make_gguf_qwen3_5.py --model $(QWEN35_FIXTURE)/$$m --type bf16 \
	        --out $(QWEN35_FIXTURE)/$$m-bf16.gguf > /dev/null || exit 1; \
	    scripts/make_gguf_qwen3_5.py --model $(QWEN35_FIXTURE)/$$m --type q8_0 \
	        --out $(QWEN35_FIXTURE)/$$m-q8_0.gguf --ref-out $(QWEN35_TMP)/$$m-q8_0 > /dev/null || exit 1; \
	    scripts/qwen3_5_ref.py $(QWEN35_TMP)/$$m-q8_0 golden --out $(QWEN35_FIXTURE)/$$m-q8_0-golden \
	        --prompts tests/fixtures/tiny-qwen3-golden/golden.json > /dev/null 2>&1 || exit 1; \
	done
	rm -rf $(QWEN35_TMP)

$(BUILD)/obj/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -c $< -o $@

$(BUILD)/obj/%.cu.o: %.cu
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCCFLAGS) -c $< -o $@

# The chat page's files are assembled into this object (.incbin), which
# the compiler's dependency files cannot see: an edited file rebuilds it.
$(BUILD)/obj/server/webui/webui.o: $(wildcard server/webui/*.html server/webui/*.js server/webui/*.css)

# Rebuilt from scratch: `ar r` would keep members of an earlier CUDA=0/1 build.
$(BUILD)/libnanovllm.a: $(LIB_OBJ)
	rm -f $@
	$(AR) rcs $@ $^

$(BUILD)/nanovllm: $(BIN_OBJ) $(BUILD)/libnanovllm.a
	$(CC) $(CFLAGS) $(LDFLAGS) $^ $(LDLIBS) -o $@

$(BUILD)/test_nanovllm: $(TEST_OBJ) $(BUILD)/libnanovllm.a
	$(CC) $(CFLAGS) $(LDFLAGS) $^ -lcriterion $(LDLIBS) -o $@

# Tests find the binary through NANOVLLM_BIN and the fixtures relative to here.
test: layers $(BUILD)/test_nanovllm $(BUILD)/nanovllm fixtures
	NANOVLLM_BIN=$(BUILD)/nanovllm $(BUILD)/test_nanovllm $(TEST_ARGS)

layers:
	scripts/check_layers.sh

asan: export LSAN_OPTIONS = suppressions=$(CURDIR)/tests/lsan.supp
asan:
	$(MAKE) BUILD=build-asan CUDA=0 \
	    EXTRA_CFLAGS="-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=all" \
	    EXTRA_LDFLAGS="-fsanitize=address,undefined" test

# The random full-size model is generated on first use (see the script).
bench: $(BUILD)/nanovllm
	scripts/bench_cpu.sh $(BENCH_MODEL) $(BENCH_ARGS)

# The image is built from the sources, not from build/; the host binary is
# the reference its answers are compared with.
docker-test: $(BUILD)/nanovllm
	NANOVLLM_BIN=$(BUILD)/nanovllm scripts/docker_test.sh

# libFuzzer + ASan + UBSan on the tokenizer library (and the chat templates it
# renders), on the Jinja interpreter and on structured outputs (constraint
# texts compiled over a synthetic vocabulary, masks walked); not part of test.
# Run from the repository root: build-fuzz/fuzz_tokenizer -runs=N CORPUS_DIR
# (and build-fuzz/fuzz_jinja, seeded with tests/fixtures/chat-templates/*/template.jinja;
# build-fuzz/fuzz_structured, seeded with schemas, regexes and GBNF grammars,
# each input a kind byte then the text: see tests/fuzz/fuzz_structured.c)
FUZZ_CC  ?= clang-14
FUZZ_BASE = base/error.c base/byte_buf.c base/read_file.c
FUZZ_HDR  = $(wildcard text/tokenizer/*.h text/jinja/*.h base/*.h)
FUZZ_FLAGS = -std=c11 -D_GNU_SOURCE -O1 -g -pthread -I. $(WARN) -fsanitize=fuzzer,address,undefined \
             -fno-sanitize-recover=all
# token_vocab_new reads a Tokenizer: the grammar engine stands on the tokenizer library.
# Tool-call formats write grammars, so the chat-output parser brings the grammar engine too;
# the tokenizer target renders chat templates, which detect tool-call formats.
STRUCTURED_FUZZ_SRC = $(wildcard structured/*.c text/tokenizer/*.c) $(FUZZ_BASE)
TOOL_CALLS_FUZZ_SRC = $(wildcard chat/tool_calls/*.c) $(STRUCTURED_FUZZ_SRC)
CHAT_OUTPUT_FUZZ_SRC = $(wildcard chat/chat_output*.c) $(TOOL_CALLS_FUZZ_SRC)
FUZZ_SRC  = $(wildcard text/jinja/*.c) chat/chat_template.c $(TOOL_CALLS_FUZZ_SRC)
fuzz: build-fuzz/fuzz_tokenizer build-fuzz/fuzz_jinja build-fuzz/fuzz_structured build-fuzz/fuzz_chat_output build-fuzz/fuzz_gguf \
      build-fuzz/fuzz_gguf_model

build-fuzz/fuzz_tokenizer: tests/fuzz/fuzz_tokenizer.c $(FUZZ_SRC) $(FUZZ_HDR) $(wildcard chat/*.h chat/tool_calls/*.h structured/*.h)
	@mkdir -p $(dir $@)
	$(FUZZ_CC) $(FUZZ_FLAGS) tests/fuzz/fuzz_tokenizer.c $(FUZZ_SRC) -ljansson -lpcre2-8 -lutf8proc -lm -o $@

build-fuzz/fuzz_jinja: tests/fuzz/fuzz_jinja.c $(wildcard text/jinja/*.c) $(FUZZ_HDR)
	@mkdir -p $(dir $@)
	$(FUZZ_CC) $(FUZZ_FLAGS) tests/fuzz/fuzz_jinja.c $(wildcard text/jinja/*.c) -ljansson -lutf8proc -lm -o $@

build-fuzz/fuzz_structured: tests/fuzz/fuzz_structured.c $(STRUCTURED_FUZZ_SRC) $(FUZZ_HDR) $(wildcard structured/*.h)
	@mkdir -p $(dir $@)
	$(FUZZ_CC) $(FUZZ_FLAGS) tests/fuzz/fuzz_structured.c $(STRUCTURED_FUZZ_SRC) -ljansson -lpcre2-8 -lutf8proc -lm -o $@

build-fuzz/fuzz_chat_output: tests/fuzz/fuzz_chat_output.c $(CHAT_OUTPUT_FUZZ_SRC) $(FUZZ_HDR) $(wildcard chat/*.h chat/tool_calls/*.h structured/*.h)
	@mkdir -p $(dir $@)
	$(FUZZ_CC) $(FUZZ_FLAGS) tests/fuzz/fuzz_chat_output.c $(CHAT_OUTPUT_FUZZ_SRC) -ljansson -lpcre2-8 -lutf8proc -lm -o $@

build-fuzz/fuzz_gguf: tests/fuzz/fuzz_gguf.c model/gguf.c model/gguf.h model/mapped_file.c model/mapped_file.h $(FUZZ_BASE) $(FUZZ_HDR)
	@mkdir -p $(dir $@)
	$(FUZZ_CC) $(FUZZ_FLAGS) tests/fuzz/fuzz_gguf.c model/gguf.c model/mapped_file.c $(FUZZ_BASE) -lm -o $@

# The metadata above the container: config, pooling, tokenizer (seeds: tests/fuzz/make_gguf_model_seeds.py DIR).
GGUF_MODEL_FUZZ_SRC = model/gguf.c model/mapped_file.c model/gguf_model.c model/model_config.c \
                      model/model_config_hybrid.c model/model_pooling.c model/weight_format.c \
                      engine/model_tokenizer.c $(wildcard text/tokenizer/*.c) base/log.c $(FUZZ_BASE)
build-fuzz/fuzz_gguf_model: tests/fuzz/fuzz_gguf_model.c $(GGUF_MODEL_FUZZ_SRC) $(wildcard model/*.h engine/model_tokenizer.h) $(FUZZ_HDR)
	@mkdir -p $(dir $@)
	$(FUZZ_CC) $(FUZZ_FLAGS) tests/fuzz/fuzz_gguf_model.c $(GGUF_MODEL_FUZZ_SRC) -ljansson -lpcre2-8 -lutf8proc -lm -o $@

clean:
	rm -rf build build-asan build-fuzz

-include $(shell find $(BUILD)/obj -name '*.d' 2>/dev/null)
