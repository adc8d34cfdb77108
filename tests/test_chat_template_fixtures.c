/*
 * test_chat_template_fixtures.c - 11 real chat templates (Qwen3, Qwen2.5,
 * Qwen3-Coder, QwQ, DeepSeek-R1-Distill, Llama 3.1, Mistral Nemo, Gemma 2,
 * Hermes 3 tool use, Phi-3.5, gpt-oss) x 21 cases with what transformers'
 * apply_chat_template renders (tests/fixtures/chat-templates, copied from
 * ../shared; see its README).
 *
 * Every case goes through `nanovllm tokenize --chat --json` with the
 * template in a model folder's tokenizer_config.json: the text must be
 * byte-identical, and where transformers raises the command must fail
 * cleanly (exit 1, a message). The messages reach the template as sent
 * (--chat-template-content-format verbatim), as they reached transformers.
 * With the default format the same holds wherever vLLM's shaping of the
 * request changes nothing.
 */
#include <criterion/criterion.h>
#include <dirent.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "chat/chat_template.h"
#include "helpers.h"

#define TEMPLATES "tests/fixtures/chat-templates"

/* The tiny model's tokenizer.json with every fixture's special tokens added
 * (tokenizer_config.json may only name tokens the tokenizer has). */
static void write_tokenizer_with(const char *path, json_t *extra_tokens) {
    json_error_t jerr;
    json_t *doc = json_load_file(TINY_MODEL "/tokenizer.json", 0, &jerr);
    cr_assert(doc, "%s", jerr.text);
    json_t *added = json_object_get(doc, "added_tokens");
    json_int_t next = 0;
    size_t i;
    json_t *tok;
    json_array_foreach(added, i, tok) {
        json_int_t id = json_integer_value(json_object_get(tok, "id"));
        if (id >= next) next = id + 1;
    }
    const char *content;
    json_t *unused;
    json_object_foreach(extra_tokens, content, unused) {
        json_array_append_new(added, json_pack("{s:I, s:s, s:b, s:b, s:b, s:b, s:b}", "id", next++,
                                               "content", content, "single_word", 0, "lstrip", 0,
                                               "rstrip", 0, "normalized", 0, "special", 1));
    }
    cr_assert_eq(json_dump_file(doc, path, JSON_COMPACT), 0);
    json_decref(doc);
}

/* snprintf that fails the test instead of cutting a path short. */
#define FORMAT(buf, ...) cr_assert_lt((size_t)snprintf(buf, sizeof buf, __VA_ARGS__), sizeof buf)

typedef struct Model {
    char name[256];
    char *dir; /* a model folder with this template */
    json_t *cases;
    json_t *special;
} Model;

static Model models[16];
static int num_models;
static char *tokenizer_dir;

static void load_models(void) {
    DIR *d = opendir(TEMPLATES);
    cr_assert(d);
    struct dirent *e;
    json_t *all_special = json_object();
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.' || strcmp(e->d_name, "README.md") == 0) continue;
        cr_assert_lt(num_models, 16);
        Model *m = &models[num_models++];
        FORMAT(m->name, "%s", e->d_name);
        char path[4096];
        FORMAT(path, TEMPLATES "/%s/cases.jsonl", m->name);
        m->cases = jsonl_load(path);
        FORMAT(path, TEMPLATES "/%s/special_tokens.json", m->name);
        m->special = json_load_file(path, 0, NULL);
        cr_assert(m->special, "%s", path);
        const char *k;
        json_t *v;
        json_object_foreach(m->special, k, v) if (json_is_string(v)) json_object_set(all_special, json_string_value(v), json_true());
    }
    closedir(d);
    tokenizer_dir = make_temp_dir();
    char path[4096];
    FORMAT(path, "%s/tokenizer.json", tokenizer_dir);
    write_tokenizer_with(path, all_special);
    json_decref(all_special);
    for (int i = 0; i < num_models; i++) {
        Model *m = &models[i];
        m->dir = make_temp_dir();
        char link[4096];
        FORMAT(link, "%s/tokenizer.json", m->dir);
        cr_assert_eq(symlink(path, link), 0);
        FORMAT(link, TEMPLATES "/%s/template.jinja", m->name);
        char *text = read_text(link);
        json_t *config = json_deep_copy(m->special);
        json_object_set_new(config, "chat_template", json_string(text));
        FORMAT(link, "%s/tokenizer_config.json", m->dir);
        cr_assert_eq(json_dump_file(config, link, 0), 0);
        json_decref(config);
        free(text);
    }
    /* The fixtures' clock: strftime_now formats 2024-07-26. */
    setenv("SOURCE_DATE_EPOCH", "1722002400", 1);
    setenv("TZ", "UTC", 1);
}

static void free_models(void) {
    for (int i = 0; i < num_models; i++) {
        rm_rf(models[i].dir);
        free(models[i].dir);
        json_decref(models[i].cases);
        json_decref(models[i].special);
    }
    num_models = 0;
    rm_rf(tokenizer_dir);
    free(tokenizer_dir);
}

TestSuite(chat_template_fixtures, .init = load_models, .fini = free_models, .timeout = 600);

/* The request a case stands for. */
static char *case_request(json_t *c) {
    json_t *req = json_pack("{s:O, s:O, s:O}", "messages", json_object_get(c, "messages"),
                            "add_generation_prompt", json_object_get(c, "add_generation_prompt"),
                            "chat_template_kwargs", json_object_get(c, "kwargs"));
    if (json_object_get(c, "tools")) json_object_set(req, "tools", json_object_get(c, "tools"));
    char *text = json_dumps(req, 0);
    json_decref(req);
    return text;
}

/* Runs the case through the CLI; returns the number of mismatches (0 or 1). */
static int run_case(const Model *m, json_t *c, const char *format) {
    const char *tag = json_string_value(json_object_get(c, "tag"));
    json_t *want = json_object_get(c, "expected");
    char *req = case_request(c), *out = NULL, *err = NULL, args[4096];
    FORMAT(args, "tokenize --model %s --chat --json --quiet "
                                "--chat-template-content-format %s", m->dir, format);
    int status = run_nanovllm_stdin(args, req, strlen(req), &out, &err);
    int bad = 0;
    if (want) {
        json_t *got = status == 0 ? json_loads(out, 0, NULL) : NULL;
        json_t *text = json_object_get(got, "text");
        bad = !(json_is_string(text) && json_string_length(text) == json_string_length(want) &&
                memcmp(json_string_value(text), json_string_value(want), json_string_length(want)) == 0);
        cr_expect(!bad, "%s/%s (%s): status %d, stderr %s\n--- got\n%s\n--- want\n%s", m->name, tag,
                  format, status, err, json_string_value(text), json_string_value(want));
        json_decref(got);
    } else {
        /* transformers raises: a clean failure, with a message */
        bad = !(status == 1 && strncmp(err, "nanovllm tokenize: ", 19) == 0 && strlen(err) > 20);
        cr_expect(!bad, "%s/%s (%s): transformers raises (%s); status %d, stderr '%s', stdout '%s'",
                  m->name, tag, format, json_string_value(json_object_get(c, "error")), status, err,
                  out);
    }
    free(req);
    free(out);
    free(err);
    return bad;
}

Test(chat_template_fixtures, every_case_through_the_cli) {
    cr_assert_eq(num_models, 11);
    int cases = 0, bad = 0;
    for (int i = 0; i < num_models; i++) {
        size_t k;
        json_t *c;
        json_array_foreach(models[i].cases, k, c) {
            bad += run_case(&models[i], c, "verbatim");
            cases++;
        }
    }
    cr_expect_eq(cases, 231);
    cr_expect_eq(bad, 0, "%d of %d cases differ", bad, cases);
}

/* vLLM's shaping (null content to "", parts joined, arguments parsed)
 * changes nothing for these messages, so the default format must agree. */
static bool shaping_changes_nothing(json_t *messages) {
    size_t i;
    json_t *m;
    json_array_foreach(messages, i, m) {
        if (!json_is_string(json_object_get(m, "content"))) return false;
        json_t *calls = json_object_get(m, "tool_calls");
        size_t k;
        json_t *call;
        json_array_foreach(calls, k, call)
            if (json_is_string(json_object_get(json_object_get(call, "function"), "arguments")))
                return false;
    }
    return true;
}

Test(chat_template_fixtures, default_content_format_where_it_changes_nothing) {
    int cases = 0, bad = 0;
    for (int i = 0; i < num_models; i++) {
        size_t k;
        json_t *c;
        json_array_foreach(models[i].cases, k, c) {
            if (!shaping_changes_nothing(json_object_get(c, "messages"))) continue;
            bad += run_case(&models[i], c, "auto");
            cases++;
        }
    }
    cr_expect_gt(cases, 150);
    cr_expect_eq(bad, 0, "%d of %d cases differ", bad, cases);
}

Test(chat_template_fixtures, tool_call_formats) {
    static const struct {
        const char *model;
        const ToolCallFormat *format; /* NULL: none known */
        bool takes_tools;
    } want[] = {
        {"Qwen-Qwen3-0.6B", &tool_call_format_hermes, true},
        {"Qwen-Qwen2.5-7B-Instruct", &tool_call_format_hermes, true},
        {"Qwen-QwQ-32B", &tool_call_format_hermes, true},
        {"NousResearch-Hermes-3-Llama-3.1-8B-tool_use", &tool_call_format_hermes, true},
        {"Qwen3-Coder", &tool_call_format_qwen3_xml, true},
        {"meta-llama-Llama-3.1-8B-Instruct", NULL, true}, /* a format not known here */
        {"google-gemma-2-2b-it", NULL, false},
    };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        const Model *m = NULL;
        for (int k = 0; k < num_models; k++)
            if (strcmp(models[k].name, want[i].model) == 0) m = &models[k];
        cr_assert(m, "%s", want[i].model);
        Error err = {0};
        Tokenizer *t = tokenizer_load(m->dir, 0, &err);
        cr_assert(t, "%s", err.msg);
        ChatTemplate *ct = chat_template_new(t, NULL, CHAT_CONTENT_AUTO, NULL, &err);
        cr_assert(ct, "%s", err.msg);
        cr_expect_eq(chat_template_tool_call_format(ct), want[i].format, "%s", m->name);
        cr_expect_eq(chat_template_takes_tools(ct), want[i].takes_tools, "%s", m->name);
        chat_template_free(ct);
        tokenizer_free(t);
    }
}

/* The registry on the templates' text alone: each format found where its
 * template writes it, in the registry's order (Qwen3-Coder's template
 * writes <tool_call> as well as <function=), none in Llama 3.1's JSON
 * calls; and the names --tool-call-parser takes. */
Test(tool_call_formats, registry_detects_each_format_from_its_template) {
    static const struct {
        const char *model;
        const ToolCallFormat *format;
    } want[] = {
        {"Qwen-Qwen3-0.6B", &tool_call_format_hermes},
        {"Qwen3-Coder", &tool_call_format_qwen3_xml},
        {"meta-llama-Llama-3.1-8B-Instruct", NULL},
    };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        char path[4096];
        FORMAT(path, TEMPLATES "/%s/template.jinja", want[i].model);
        char *text = read_text(path);
        cr_assert(text, "%s", path);
        cr_expect(strstr(text, "tools"), "%s renders tools", want[i].model);
        cr_expect_eq(tool_call_format_taught_by(text), want[i].format, "%s", want[i].model);
        free(text);
    }
    cr_expect_eq(tool_call_format_named("hermes"), &tool_call_format_hermes);
    cr_expect_eq(tool_call_format_named("qwen3_xml"), &tool_call_format_qwen3_xml);
    cr_expect_eq(tool_call_format_named("qwen3_coder"), &tool_call_format_qwen3_xml);
    cr_expect_null(tool_call_format_named("auto"));
    cr_expect_null(tool_call_format_named("none"));
    size_t n = 0;
    for (const ToolCallFormat *f; (f = tool_call_format_at(n)); n++) {
        cr_expect(f->name && f->call_open && f->call_close && f->taught_by && f->read_call, "format %zu", n);
        cr_expect_eq(tool_call_format_named(f->name), f, "%s", f->name);
    }
    cr_expect_eq(n, 2);
}
