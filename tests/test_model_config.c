/*
 * test_model_config.c - config.json parsing: defaults, eos forms, and a clear
 * error naming the field for everything unsupported or missing.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>

#include "helpers.h"
#include "model/model_config.h"

#define BASE_FIELDS                                                                               \
    "\"model_type\": \"qwen3\", \"architectures\": [\"Qwen3ForCausalLM\"], \"vocab_size\": 1000, " \
    "\"hidden_size\": 64, \"intermediate_size\": 128, \"num_hidden_layers\": 2, "                  \
    "\"num_attention_heads\": 4"

static void expect_error(const char *json, const char *needle) {
    ModelConfig c;
    Error err = {0};
    cr_expect(model_config_parse(&c, json, NULL, &err) == -1, "accepted: %s", json);
    cr_expect(strstr(err.msg, needle), "error '%s' does not mention '%s'", err.msg, needle);
}

Test(model_config, tiny_fixture) {
    ModelConfig c;
    Error err = {0};
    cr_assert(model_config_load(&c, TINY_MODEL, &err) == 0, "%s", err.msg);
    cr_expect_eq(c.vocab_size, 151936);
    cr_expect_eq(c.hidden_size, 32);
    cr_expect_eq(c.intermediate_size, 96);
    cr_expect_eq(c.num_layers, 3);
    cr_expect_eq(c.num_heads, 4);
    cr_expect_eq(c.num_kv_heads, 2);
    cr_expect_eq(c.head_dim, 128);
    cr_expect_eq(c.max_position_embeddings, 40960);
    cr_expect_float_eq(c.rms_norm_eps, 1e-6, 1e-12);
    cr_expect_float_eq(c.rope_theta, 1e6, 1e-6);
    cr_expect(c.tie_word_embeddings);
    cr_expect_eq(c.num_eos_ids, 1);
    cr_expect_eq(c.eos_ids[0], 151645);
    cr_expect_eq(c.bos_token_id, 151643);
    cr_expect_str_eq(c.torch_dtype, "bfloat16");
}

Test(model_config, defaults_follow_transformers) {
    ModelConfig c;
    Error err = {0};
    cr_assert(model_config_parse(&c, "{" BASE_FIELDS "}", NULL, &err) == 0, "%s", err.msg);
    cr_expect_eq(c.head_dim, 16, "head_dim defaults to hidden_size / num_attention_heads");
    cr_expect_eq(c.num_kv_heads, 4, "num_key_value_heads defaults to num_attention_heads");
    cr_expect_eq(c.max_position_embeddings, 32768);
    cr_expect_float_eq(c.rope_theta, 10000.0, 1e-9);
    cr_expect(!c.tie_word_embeddings);
    cr_expect_eq(c.num_eos_ids, 0);
}

Test(model_config, eos_int_list_and_generation_config) {
    ModelConfig c;
    Error err = {0};
    cr_assert(model_config_parse(&c, "{" BASE_FIELDS ", \"eos_token_id\": [7, 9]}",
                                 "{\"eos_token_id\": [9, 11], \"bos_token_id\": 1}", &err) == 0,
              "%s", err.msg);
    cr_expect_eq(c.num_eos_ids, 3);
    cr_expect(model_config_is_eos(&c, 7) && model_config_is_eos(&c, 9) &&
              model_config_is_eos(&c, 11));
    cr_expect(!model_config_is_eos(&c, 8));
    cr_assert(model_config_parse(&c, "{" BASE_FIELDS ", \"eos_token_id\": 5}", "{\"eos_token_id\": 6}",
                                 &err) == 0);
    cr_expect(c.num_eos_ids == 2 && c.eos_ids[0] == 5 && c.eos_ids[1] == 6);
}

Test(model_config, generation_config_file_is_read) {
    char *dir = make_temp_dir();
    char path[512];
    copy_tiny_config(dir);
    snprintf(path, sizeof path, "%s/generation_config.json", dir);
    write_text(path, "{\"eos_token_id\": [151645, 151643]}");
    ModelConfig c;
    Error err = {0};
    cr_assert(model_config_load(&c, dir, &err) == 0, "%s", err.msg);
    cr_expect(model_config_is_eos(&c, 151643) && model_config_is_eos(&c, 151645));
    write_text(path, "{not json");
    cr_expect(model_config_load(&c, dir, &err) == -1 && strstr(err.msg, "generation_config.json"));
    rm_rf(dir);
    free(dir);
}

Test(model_config, missing_required_fields_are_named) {
    const char *fields[] = {"vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers",
                            "num_attention_heads"};
    for (size_t i = 0; i < 5; i++) {
        char json[1024] = "{\"model_type\": \"qwen3\"";
        for (size_t j = 0; j < 5; j++)
            if (j != i) snprintf(json + strlen(json), sizeof json - strlen(json), ", \"%s\": 8", fields[j]);
        strcat(json, "}");
        expect_error(json, fields[i]);
    }
    expect_error("{\"vocab_size\": 8}", "model_type");
}

Test(model_config, unsupported_models_and_features) {
    expect_error("{\"model_type\": \"llama\", \"vocab_size\": 8}", "'llama'");
    expect_error("{\"model_type\": \"qwen3\", \"architectures\": [\"LlamaForCausalLM\"]}",
                 "LlamaForCausalLM");
    expect_error("{" BASE_FIELDS ", \"rope_scaling\": {\"rope_type\": \"yarn\", \"factor\": 4}}",
                 "rope_scaling");
    expect_error("{" BASE_FIELDS ", \"use_sliding_window\": true}", "use_sliding_window");
    expect_error("{" BASE_FIELDS ", \"attention_bias\": true}", "attention_bias");
    expect_error("{" BASE_FIELDS ", \"hidden_act\": \"gelu\"}", "hidden_act");
}

Test(model_config, bad_values) {
    expect_error("{" BASE_FIELDS ", \"num_key_value_heads\": 3}", "multiple");
    expect_error("{" BASE_FIELDS ", \"head_dim\": 15}", "head_dim");
    expect_error("{\"model_type\": \"qwen3\", \"vocab_size\": -5, \"hidden_size\": 8, "
                 "\"intermediate_size\": 8, \"num_hidden_layers\": 1, \"num_attention_heads\": 1}",
                 "vocab_size");
    expect_error("{" BASE_FIELDS ", \"rms_norm_eps\": \"small\"}", "rms_norm_eps");
    expect_error("{" BASE_FIELDS ", \"eos_token_id\": \"</s>\"}", "eos_token_id");
    expect_error("{" BASE_FIELDS ", \"eos_token_id\": 5000}", "outside the vocabulary");
    expect_error("{" BASE_FIELDS ", \"tie_word_embeddings\": 1}", "tie_word_embeddings");
    expect_error("{" BASE_FIELDS, "invalid JSON");
    expect_error("[1, 2]", "not a JSON object");
}

Test(model_config, missing_folder) {
    ModelConfig c;
    Error err = {0};
    cr_expect(model_config_load(&c, "/nonexistent/model", &err) == -1);
    cr_expect(strstr(err.msg, "no config.json"), "%s", err.msg);
}

Test(model_config, generation_config_sampling_defaults) {
    ModelConfig c;
    Error err = {0};
    cr_assert(model_config_parse(&c, "{" BASE_FIELDS "}",
                                 "{\"temperature\": 0.6, \"top_p\": 0.95, \"top_k\": 20, "
                                 "\"min_p\": 0, \"repetition_penalty\": 1.1, \"do_sample\": true}",
                                 &err) == 0, "%s", err.msg);
    cr_expect(c.has_temperature && c.temperature == 0.6);
    cr_expect(c.has_top_p && c.top_p == 0.95);
    cr_expect(c.has_top_k && c.top_k == 20);
    cr_expect(c.has_min_p && c.min_p == 0.0);
    cr_expect(c.has_repetition_penalty && c.repetition_penalty == 1.1);
    cr_assert(model_config_parse(&c, "{" BASE_FIELDS "}", "{\"temperature\": 7, \"top_k\": 1.5}", &err) == 0);
    cr_expect(!c.has_temperature && !c.has_top_k, "out-of-range or mistyped advice is ignored");
    cr_assert(model_config_parse(&c, "{" BASE_FIELDS "}", NULL, &err) == 0);
    cr_expect(!c.has_temperature && !c.has_top_p);
}

#define MOE_FIELDS                                                                                 \
    "\"model_type\": \"qwen3_moe\", \"architectures\": [\"Qwen3MoeForCausalLM\"], "                \
    "\"vocab_size\": 1000, \"hidden_size\": 64, \"intermediate_size\": 128, "                     \
    "\"num_hidden_layers\": 4, \"num_attention_heads\": 4"

Test(model_config, moe_fixture) {
    ModelConfig c;
    Error err = {0};
    cr_assert(model_config_load(&c, TINY_MOE_MODEL, &err) == 0, "%s", err.msg);
    cr_expect_eq(c.num_experts, 16);
    cr_expect_eq(c.num_experts_per_tok, 4);
    cr_expect_eq(c.moe_intermediate_size, 48);
    cr_expect(c.norm_topk_prob);
    cr_expect(!c.tie_word_embeddings);
    cr_expect(model_config_layer_is_sparse(&c, 0) && !model_config_layer_is_sparse(&c, 1) &&
              model_config_layer_is_sparse(&c, 2), "mlp_only_layers [1] keeps layer 1 dense");
    cr_assert(model_config_load(&c, TINY_MODEL, &err) == 0);
    cr_expect(c.num_experts == 0 && !model_config_layer_is_sparse(&c, 0), "dense: no experts");
}

Test(model_config, moe_defaults_and_sparse_step) {
    ModelConfig c;
    Error err = {0};
    cr_assert(model_config_parse(&c, "{" MOE_FIELDS "}", NULL, &err) == 0, "%s", err.msg);
    cr_expect(c.num_experts == 128 && c.num_experts_per_tok == 8 && c.moe_intermediate_size == 768,
              "transformers' Qwen3MoeConfig defaults");
    cr_expect(!c.norm_topk_prob);
    for (int l = 0; l < 4; l++) cr_expect(model_config_layer_is_sparse(&c, l));
    cr_assert(model_config_parse(&c, "{" MOE_FIELDS ", \"decoder_sparse_step\": 2, "
                                     "\"mlp_only_layers\": [3], \"num_experts\": 4, "
                                     "\"num_experts_per_tok\": 4}", NULL, &err) == 0, "%s", err.msg);
    cr_expect(!model_config_layer_is_sparse(&c, 0) && model_config_layer_is_sparse(&c, 1) &&
              !model_config_layer_is_sparse(&c, 2) && !model_config_layer_is_sparse(&c, 3),
              "sparse every 2nd layer ((l + 1) %% 2 == 0) unless listed dense");
}

Test(model_config, moe_refusals) {
    expect_error("{" MOE_FIELDS ", \"n_shared_experts\": 2}", "shared experts");
    expect_error("{\"model_type\": \"qwen3_moe\", \"architectures\": [\"Qwen3ForCausalLM\"]}",
                 "Qwen3MoeForCausalLM");
    expect_error("{\"model_type\": \"qwen3\", \"architectures\": [\"Qwen3MoeForCausalLM\"]}",
                 "Qwen3ForCausalLM");
    expect_error("{\"model_type\": \"qwen2_moe\"}", "'qwen2_moe'");
    expect_error("{" MOE_FIELDS ", \"num_experts\": 4, \"num_experts_per_tok\": 5}", "exceeds num_experts");
    expect_error("{" MOE_FIELDS ", \"mlp_only_layers\": [4]}", "mlp_only_layers");
    expect_error("{" MOE_FIELDS ", \"mlp_only_layers\": 1}", "mlp_only_layers");
    expect_error("{" MOE_FIELDS ", \"norm_topk_prob\": 1}", "norm_topk_prob");
    expect_error("{" MOE_FIELDS ", \"decoder_sparse_step\": 0}", "decoder_sparse_step");
}

/* A Qwen3-MoE folder with Qwen2-MoE's gated shared expert is read (its
 * tensors are then required by the loader). */
Test(model_config, moe_shared_expert) {
    ModelConfig c;
    Error err = {0};
    cr_assert(model_config_parse(&c, "{" MOE_FIELDS ", \"shared_expert_intermediate_size\": 5632}", NULL, &err) == 0,
              "%s", err.msg);
    cr_expect_eq(c.shared_expert_intermediate_size, 5632);
    cr_expect(!c.hybrid);
}

#define QWEN3_5_TEXT                                                                                   \
    "\"vocab_size\": 1000, \"hidden_size\": 64, \"intermediate_size\": 128, \"num_hidden_layers\": 8, "    \
    "\"num_attention_heads\": 4, \"num_key_value_heads\": 2, \"head_dim\": 32, "                          \
    "\"linear_num_key_heads\": 2, \"linear_num_value_heads\": 4, \"linear_key_head_dim\": 16, "            \
    "\"linear_value_head_dim\": 8, \"linear_conv_kernel_dim\": 4, \"eos_token_id\": 7"

/* The multimodal layout: text_config read, defaults as transformers'
 * Qwen3_5TextConfig (every 4th layer full, a quarter of the head rotated). */
Test(model_config, qwen3_5_multimodal) {
    ModelConfig c;
    Error err = {0};
    const char *json = "{\"model_type\": \"qwen3_5\", \"architectures\": [\"Qwen3_5ForConditionalGeneration\"], "
                       "\"tie_word_embeddings\": true, \"vision_config\": {\"depth\": 2}, \"text_config\": {"
                       "\"model_type\": \"qwen3_5_text\", " QWEN3_5_TEXT ", \"rope_parameters\": {\"rope_type\": "
                       "\"default\", \"rope_theta\": 10000000, \"partial_rotary_factor\": 0.25, "
                       "\"mrope_section\": [2, 1, 1], \"mrope_interleaved\": true}}}";
    cr_assert(model_config_parse(&c, json, NULL, &err) == 0, "%s", err.msg);
    cr_expect(c.hybrid && c.multimodal && c.attn_output_gate && c.tie_word_embeddings);
    cr_expect_eq(c.num_layers, 8);
    cr_expect_eq(c.rotary_dim, 8);
    cr_expect_eq(c.rope_theta, 1e7);
    cr_expect_eq(c.num_linear_layers, 6);
    for (int l = 0; l < 8; l++) cr_expect_eq(model_config_layer_is_linear(&c, l), (l + 1) % 4 != 0, "layer %d", l);
    cr_expect_eq(model_config_linear_key_dim(&c), 32);
    cr_expect_eq(model_config_linear_value_dim(&c), 32);
    cr_expect_eq(model_config_linear_conv_dim(&c), 96);
    cr_expect_eq(c.num_eos_ids, 1);
    cr_expect_eq(c.eos_ids[0], 7);
    cr_expect_eq(c.num_experts, 0);
}

/* The text-only MoE layout: explicit layer_types, a shared expert, the
 * router always renormalising. */
Test(model_config, qwen3_5_moe_text) {
    ModelConfig c;
    Error err = {0};
    const char *json = "{\"model_type\": \"qwen3_5_moe_text\", \"architectures\": [\"Qwen3_5MoeForCausalLM\"], "
                       QWEN3_5_TEXT ", \"num_experts\": 8, \"num_experts_per_tok\": 2, \"moe_intermediate_size\": 16, "
                       "\"shared_expert_intermediate_size\": 24, \"layer_types\": [\"linear_attention\", "
                       "\"full_attention\", \"linear\", \"attention\", \"linear_attention\", \"linear_attention\", "
                       "\"linear_attention\", \"full_attention\"], \"partial_rotary_factor\": 0.5}";
    cr_assert(model_config_parse(&c, json, NULL, &err) == 0, "%s", err.msg);
    cr_expect(c.hybrid && !c.multimodal && c.norm_topk_prob);
    cr_expect_eq(c.shared_expert_intermediate_size, 24);
    cr_expect_eq(c.rotary_dim, 16);
    static const int linear[8] = {1, 0, 1, 0, 1, 1, 1, 0};
    for (int l = 0; l < 8; l++) cr_expect_eq(model_config_layer_is_linear(&c, l), linear[l], "layer %d", l);
    for (int l = 0; l < 8; l++) cr_expect(model_config_layer_is_sparse(&c, l), "layer %d", l);
}

Test(model_config, qwen3_5_refusals) {
    expect_error("{\"model_type\": \"qwen3_5\", " QWEN3_5_TEXT "}", "text_config");
    expect_error("{\"model_type\": \"qwen3_5_text\", " QWEN3_5_TEXT ", \"layer_types\": [\"linear_attention\"]}",
                 "layer_types");
    expect_error("{\"model_type\": \"qwen3_5_text\", " QWEN3_5_TEXT ", \"layer_types\": [\"mamba\", \"mamba\", "
                 "\"mamba\", \"mamba\", \"mamba\", \"mamba\", \"mamba\", \"mamba\"]}", "'mamba'");
    expect_error("{\"model_type\": \"qwen3_5_text\", " QWEN3_5_TEXT ", \"rope_parameters\": {\"rope_type\": \"yarn\"}}",
                 "'yarn'");
    /* no full-attention layer: nothing for the paged KV cache the engine schedules by */
    expect_error("{\"model_type\": \"qwen3_5_text\", " QWEN3_5_TEXT ", \"full_attention_interval\": 9}",
                 "all 8 layers are linear attention");
    expect_error("{\"model_type\": \"qwen3_5_text\", " QWEN3_5_TEXT ", \"linear_num_value_heads\": 3}",
                 "linear_num_value_heads");
    expect_error("{\"model_type\": \"qwen3_5_text\", " QWEN3_5_TEXT ", \"partial_rotary_factor\": 0.01}",
                 "partial_rotary_factor");
    expect_error("{\"model_type\": \"qwen3_5_text\", \"architectures\": [\"Qwen3ForCausalLM\"], " QWEN3_5_TEXT "}",
                 "Qwen3_5ForCausalLM");
}
