/*
 * test_chat_output.c - the chat-output parser (chat/): a
 * table of answers, each with the reasoning, content, tool calls and
 * rejections it must give, checked whole and then cut every way a stream
 * can cut it (two pieces at every byte, one byte per feed, random cuts,
 * and the pieces the incremental detokenizer of the tiny Qwen3 tokenizer
 * gives, where <think>, </think>, <tool_call> and </tool_call> are single
 * tokens): every cut must assemble to the same answer, and no feed may
 * release part of a tag. Then what the table cannot say: the reasons given
 * for rejections, the size limit on a call body, and the delta's reuse.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "helpers.h"
#include "chat/chat_output.h"

/* ---- the table ------------------------------------------------------------ */

#define R true  /* parse_reasoning */
#define NO false
#define HERMES (&tool_call_format_hermes)
#define XML (&tool_call_format_qwen3_xml)
#define NONE NULL
#define OTHER NULL /* a format not known here reaches the parser as no format */

static const char WEATHER_TOOLS[] =
    "[{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"parameters\": "
    "{\"type\": \"object\", \"properties\": {\"city\": {\"type\": \"string\"}, \"days\": "
    "{\"type\": \"integer\"}}}}},"
    " {\"type\": \"function\", \"function\": {\"name\": \"run_code\", \"parameters\": "
    "{\"type\": \"object\", \"properties\": {\"code\": {\"type\": \"string\"}}}}}]";

static const char XML_TOOLS[] =
    "[{\"type\": \"function\", \"function\": {\"name\": \"set\", \"parameters\": {\"type\": "
    "\"object\", \"properties\": {\"s\": {\"type\": \"string\"}, \"i\": {\"type\": \"integer\"}, "
    "\"n\": {\"type\": \"number\"}, \"b\": {\"type\": \"boolean\"}, \"o\": {\"type\": \"object\"}, "
    "\"a\": {\"type\": \"array\"}, \"z\": {\"type\": \"null\"}, \"u\": {\"type\": [\"integer\", "
    "\"null\"]}}}}}, {\"type\": \"function\", \"function\": {\"name\": \"get_weather\", "
    "\"parameters\": {\"type\": \"object\", \"properties\": {\"city\": {\"type\": \"string\"}}}}}]";

typedef struct Case {
    const char *name;
    bool reasoning, starts_in_reasoning;
    const ToolCallFormat *format;
    const char *tools; /* JSON text; NULL: no list (any name) */
    const char *text;
    const char *want_reasoning, *want_content;
    const char *want_calls; /* "name arguments\n" per call */
    int want_rejected;
} Case;

#define W WEATHER_TOOLS
#define PARIS "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"days\": 3}}\n</tool_call>"
#define PARIS_CALL "get_weather {\"city\":\"Paris\",\"days\":3}\n"
#define CODE "<tool_call>\n{\"name\": \"run_code\", \"arguments\": {\"code\": \"if (a) { b(\\\"}\\\"); }\"}}\n</tool_call>"
#define CODE_CALL "run_code {\"code\":\"if (a) { b(\\\"}\\\"); }\"}\n"
#define BAD_JSON "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": }}\n</tool_call>"
#define XML_BAD                                                                          \
    "<tool_call>\n<function=set>\n<parameter=s>\nx\n</function>\n</tool_call>\n"            \
    "<tool_call>\n{\"name\": \"set\"}\n</tool_call>\n"                                       \
    "<tool_call>\n<function=set>\n</function>\nmore\n</tool_call>\n"                         \
    "<tool_call>\n<function=set>\n<parameter=s>\nx\n</parameter>\n</tool_call>\n"           \
    "<tool_call>\n<function=nope>\n</function>\n</tool_call>"
#define UNKNOWN "<tool_call>\n{\"name\": \"foo\", \"arguments\": {}}\n</tool_call>"

static const Case CASES[] = {
    {"plain content", R, NO, HERMES, W, "Hello, world!", "", "Hello, world!", "", 0},
    {"plain content trimmed", R, NO, HERMES, W, "\n  Hello,\n world!  \n\n", "", "Hello,\n world!", "", 0},
    {"pass-through: nothing parsed or trimmed", NO, NO, NONE, W,
     "  Hi <think>x</think>\n<tool_call>{\"name\": \"get_weather\"}</tool_call>\n", "",
     "  Hi <think>x</think>\n<tool_call>{\"name\": \"get_weather\"}</tool_call>\n", "", 0},
    {"other tool format: calls are content", NO, NO, OTHER, W, PARIS "\n", "", PARIS "\n", "", 0},
    {"reasoning parser alone: calls are content", R, NO, NONE, W, "<think>\nr\n</think>\n\n" PARIS,
     "r", PARIS, "", 0},
    {"reasoning only", R, NO, HERMES, W, "<think>\nLet me think.\n</think>", "Let me think.", "", "", 0},
    {"reasoning then content", R, NO, HERMES, W,
     "<think>\nStep 1.\n\nStep 2.\n</think>\n\nThe answer is 4.", "Step 1.\n\nStep 2.",
     "The answer is 4.", "", 0},
    {"whitespace before <think>", R, NO, HERMES, W, " \n<think>a</think>b", "a", "b", "", 0},
    {"starts in reasoning, no <think>", R, R, HERMES, W, "Thinking here.\n</think>\n\nAnswer.",
     "Thinking here.", "Answer.", "", 0},
    {"starts in reasoning, <think> repeated", R, R, HERMES, W, "<think>\nr\n</think>\n\nc", "r", "c", "", 0},
    {"starts in reasoning, empty", R, R, HERMES, W, "</think>\n\nJust content.", "", "Just content.", "", 0},
    {"starts in reasoning, unclosed", R, R, HERMES, W, "\nstill thinking\n", "still thinking", "", "", 0},
    {"<think> without </think>: all reasoning", R, NO, HERMES, W,
     "<think>\nStill thinking about " PARIS " and </think",
     "Still thinking about " PARIS " and </think", "", "", 0},
    {"enable_thinking false: no think at all", R, NO, HERMES, W, "\n\nThe answer.", "", "The answer.", "", 0},
    {"a later <think> is content", R, NO, HERMES, W, "Answer <think>x</think>", "", "Answer <think>x</think>", "", 0},
    {"a second <think> is content", R, NO, HERMES, W, "<think>a</think>b<think>c</think>", "a",
     "b<think>c</think>", "", 0},
    {"near-miss closing tags in reasoning", R, NO, HERMES, W, "<think>a</thinking> <</think>c", "a</thinking> <",
     "c", "", 0},
    {"<thi at the very end", R, NO, HERMES, W, "  <thi", "", "<thi", "", 0},
    {"<thi at the very end, in reasoning", R, R, HERMES, W, "<thi", "<thi", "", "", 0},
    {"one call", R, NO, HERMES, W, PARIS, "", "", PARIS_CALL, 0},
    {"calls only, whitespace around", R, NO, HERMES, W, "\n\n" PARIS "\n", "", "", PARIS_CALL, 0},
    {"text before, between and after calls", R, NO, HERMES, W,
     "<think>\nI should call tools.\n</think>\n\nLet me check.\n" PARIS "\nand\n" CODE "\nDone.",
     "I should call tools.", "Let me check.\n\nand\n\nDone.", PARIS_CALL CODE_CALL, 0},
    {"two calls back to back", R, NO, HERMES, W, PARIS "\n" CODE, "", "", PARIS_CALL CODE_CALL, 0},
    {"nested braces and escaped quotes", NO, NO, HERMES, W, CODE, "", "", CODE_CALL, 0},
    {"tags inside a string argument", NO, NO, HERMES, W,
     "<tool_call>{\"name\": \"run_code\", \"arguments\": {\"code\": \"<tool_call> <think>\"}}</tool_call>",
     "", "", "run_code {\"code\":\"<tool_call> <think>\"}\n", 0},
    {"unicode in content and arguments", R, NO, HERMES, W,
     "<think>Grübeln 🤔</think>\n\nCafé ☕ — 日本語 😀\n<tool_call>\n{\"name\": \"get_weather\", "
     "\"arguments\": {\"city\": \"Zürich 🏔️\", \"note\": \"\\u00e9\\ud83d\\ude00\"}}\n</tool_call>",
     "Grübeln 🤔", "Café ☕ — 日本語 😀", "get_weather {\"city\":\"Zürich 🏔️\",\"note\":\"é😀\"}\n", 0},
    {"arguments as a JSON string", NO, NO, HERMES, W,
     "<tool_call>{\"name\": \"get_weather\", \"arguments\": \"{\\\"city\\\": \\\"Oslo\\\"}\"}</tool_call>",
     "", "", "get_weather {\"city\":\"Oslo\"}\n", 0},
    {"parameters instead of arguments", NO, NO, HERMES, W,
     "<tool_call>{\"parameters\": {\"city\": \"Rome\"}, \"name\": \"get_weather\"}</tool_call>", "", "",
     "get_weather {\"city\":\"Rome\"}\n", 0},
    {"no arguments", NO, NO, HERMES, W, "<tool_call>{\"name\": \"get_weather\"}</tool_call>", "", "",
     "get_weather {}\n", 0},
    {"numbers keep their short form, keys their order", NO, NO, HERMES, W,
     "<tool_call>{\"name\": \"get_weather\", \"arguments\": {\"z\": 0.1, \"a\": [1e100, 2.50, -0.0, 1.0, "
     "-7, true, null, {}], \"m\": \"tab\\there\\u0001\"}}</tool_call>",
     "", "", "get_weather {\"z\":0.1,\"a\":[1e+100,2.5,-0.0,1.0,-7,true,null,{}],\"m\":\"tab\\there\\u0001\"}\n", 0},
    {"no tools list: any name", NO, NO, HERMES, NULL, "<tool_call>{\"name\": \"anything\", \"arguments\": {}}</tool_call>",
     "", "", "anything {}\n", 0},
    {"malformed JSON", R, NO, HERMES, W, "Sure.\n" BAD_JSON "\n", "", "Sure.\n" BAD_JSON, "", 1},
    {"text around the JSON", NO, NO, HERMES, W,
     "<tool_call>\nCall: {\"name\": \"get_weather\"}\n</tool_call>", "",
     "<tool_call>\nCall: {\"name\": \"get_weather\"}\n</tool_call>", "", 1},
    {"not an object, no name, bad arguments", NO, NO, HERMES, W,
     "<tool_call>[1]</tool_call><tool_call>{\"arguments\": {}}</tool_call>"
     "<tool_call>{\"name\": \"get_weather\", \"arguments\": [1]}</tool_call>"
     "<tool_call>{\"name\": \"get_weather\", \"arguments\": \"[1]\"}</tool_call>",
     "", "<tool_call>[1]</tool_call><tool_call>{\"arguments\": {}}</tool_call>"
     "<tool_call>{\"name\": \"get_weather\", \"arguments\": [1]}</tool_call>"
     "<tool_call>{\"name\": \"get_weather\", \"arguments\": \"[1]\"}</tool_call>", "", 4},
    {"unknown function", R, NO, HERMES, W, UNKNOWN "\n" PARIS, "", UNKNOWN, PARIS_CALL, 1},
    {"unclosed <tool_call>", R, NO, HERMES, W, "Sure.\n<tool_call>\n{\"name\": \"get_weather\"", "",
     "Sure.\n<tool_call>\n{\"name\": \"get_weather\"", "", 1},
    {"</tool_call> without opening", R, NO, HERMES, W, "a </tool_call> b\n", "", "a </tool_call> b", "", 0},
    {"a tool call inside reasoning stays reasoning", R, NO, HERMES, W,
     "<think>\nMaybe " PARIS "\n</think>\n\nOK", "Maybe " PARIS, "OK", "", 0},
    {"<tool_ at the very end", R, NO, HERMES, W, "Text <tool_", "", "Text <tool_", "", 0},
    {"< before a call", NO, NO, HERMES, W, "a <" PARIS "<", "", "a <<", PARIS_CALL, 0},
    {"whitespace only", R, NO, HERMES, W, " \n\t \n", "", "", "", 0},
    {"XML: typed parameters", R, NO, XML, XML_TOOLS,
     "<think>\nok\n</think>\n\n<tool_call>\n<function=set>\n<parameter=s>\n42\n</parameter>\n"
     "<parameter=i>\n-17\n</parameter>\n<parameter=n>\n2.50\n</parameter>\n<parameter=b>\nTrue\n"
     "</parameter>\n<parameter=o>\n{\"k\": [1, \"é\"]}\n</parameter>\n<parameter=a>\n[1, 2]\n"
     "</parameter>\n<parameter=z>\nnull\n</parameter>\n<parameter=u>\nnull\n</parameter>\n"
     "<parameter=x>\n7\n</parameter>\n</function>\n</tool_call>",
     "ok", "",
     "set {\"s\":\"42\",\"i\":-17,\"n\":2.5,\"b\":true,\"o\":{\"k\":[1,\"é\"]},\"a\":[1,2],\"z\":null,"
     "\"u\":null,\"x\":\"7\"}\n", 0},
    {"XML: values that are not their type stay strings", NO, NO, XML, XML_TOOLS,
     "<tool_call>\n<function=set>\n<parameter=i>\nmany\n</parameter>\n<parameter=b>\nyes\n</parameter>\n"
     "<parameter=o>\n{oops\n</parameter>\n<parameter=z>\nnothing\n</parameter>\n"
     "<parameter=u>\n3\n</parameter>\n</function>\n</tool_call>",
     "", "", "set {\"i\":\"many\",\"b\":\"yes\",\"o\":\"{oops\",\"z\":\"nothing\",\"u\":3}\n", 0},
    {"XML: one newline off each end, the rest verbatim", NO, NO, XML, XML_TOOLS,
     "Here:\n<tool_call><function=set><parameter=s>\n\n  two\nlines 😀 <tool_call>\n\n</parameter>"
     "<parameter=i>5</parameter></function></tool_call>\nbye",
     "", "Here:\n\nbye", "set {\"s\":\"\\n  two\\nlines 😀 <tool_call>\\n\",\"i\":5}\n", 0},
    {"XML: no parameters, then an untyped tool", NO, NO, XML, XML_TOOLS,
     "<tool_call>\n<function=get_weather>\n</function>\n</tool_call>\n<tool_call>\n<function=get_weather>\n"
     "<parameter=city>\nLyon\n</parameter>\n<parameter=days>\n2\n</parameter>\n</function>\n</tool_call>",
     "", "", "get_weather {}\nget_weather {\"city\":\"Lyon\",\"days\":\"2\"}\n", 0},
    {"XML: malformed", R, NO, XML, XML_TOOLS, "\n" XML_BAD "\n", "", XML_BAD, "", 5},
};
#define NUM_CASES (sizeof CASES / sizeof CASES[0])

/* ---- running a case ------------------------------------------------------- */

typedef struct Result {
    ByteBuf reasoning, content, calls;
    int rejected;
} Result;

static void result_free(Result *r) {
    byte_buf_free(&r->reasoning);
    byte_buf_free(&r->content);
    byte_buf_free(&r->calls);
}

static const char *str(const ByteBuf *b) { return b->len ? b->data : ""; }

/* Appends, keeping b NUL-terminated. */
static void put(ByteBuf *b, const char *s, size_t n) {
    cr_assert_eq(byte_buf_append(b, s, n), 0);
    cr_assert_eq(byte_buf_reserve(b, 1), 0);
    b->data[b->len] = '\0';
}

static bool is_prefix(const ByteBuf *b, const char *whole) {
    return b->len <= strlen(whole) && memcmp(str(b), whole, b->len) == 0;
}

static void collect(Result *r, ChatOutputDelta *d) {
    put(&r->reasoning, d->reasoning.data, d->reasoning.len);
    put(&r->content, d->content.data, d->content.len);
    for (int i = 0; i < d->num_calls; i++) {
        put(&r->calls, d->calls[i].name, strlen(d->calls[i].name));
        put(&r->calls, " ", 1);
        put(&r->calls, d->calls[i].arguments, strlen(d->calls[i].arguments));
        put(&r->calls, "\n", 1);
    }
    r->rejected += d->num_rejected;
    chat_output_delta_clear(d);
}

/* Feeds text cut at cuts[0..n) (increasing offsets), then finishes. With
 * want, what each feed releases must be the start of the expected answer:
 * nothing is released that a later piece would turn into a tag (the held
 * "<", "</thi", "<tool_"), so nothing is ever taken back. */
static void run_cuts(const Case *c, const json_t *tools, const size_t *cuts, size_t n, Result *r,
                     const char *how, const Case *want) {
    ChatOutputOptions o = {.parse_reasoning = c->reasoning,
                           .starts_in_reasoning = c->starts_in_reasoning,
                           .tool_format = c->format,
                           .tools = tools};
    ChatOutputParser *p = chat_output_parser_new(&o);
    cr_assert(p);
    ChatOutputDelta d = {0};
    *r = (Result){0};
    size_t len = strlen(c->text), from = 0;
    for (size_t i = 0; i <= n; i++) {
        size_t to = i < n ? cuts[i] : len;
        cr_assert_eq(chat_output_feed(p, c->text + from, to - from, &d), 0);
        from = to;
        collect(r, &d);
        if (want) {
            cr_expect(is_prefix(&r->reasoning, want->want_reasoning),
                      "%s (%s): feed %zu released reasoning '%s', not a start of '%s'", c->name,
                      how, i, str(&r->reasoning), want->want_reasoning);
            cr_expect(is_prefix(&r->content, want->want_content),
                      "%s (%s): feed %zu released content '%s', not a start of '%s'", c->name,
                      how, i, str(&r->content), want->want_content);
            cr_expect(is_prefix(&r->calls, want->want_calls) && r->rejected <= want->want_rejected,
                      "%s (%s): feed %zu released calls '%s' (%d rejected)", c->name, how, i,
                      str(&r->calls), r->rejected);
        }
    }
    cr_assert_eq(chat_output_finish(p, &d), 0);
    collect(r, &d);
    chat_output_delta_free(&d);
    chat_output_parser_free(p);
}

static void expect_same(const Case *c, const Result *got, const Result *want, const char *how) {
    cr_expect_str_eq(str(&got->reasoning), str(&want->reasoning), "%s (%s): reasoning '%s', want '%s'",
                     c->name, how, str(&got->reasoning), str(&want->reasoning));
    cr_expect_str_eq(str(&got->content), str(&want->content), "%s (%s): content '%s', want '%s'",
                     c->name, how, str(&got->content), str(&want->content));
    cr_expect_str_eq(str(&got->calls), str(&want->calls), "%s (%s): calls '%s', want '%s'", c->name,
                     how, str(&got->calls), str(&want->calls));
    cr_expect_eq(got->rejected, want->rejected, "%s (%s): %d rejected, want %d", c->name, how,
                 got->rejected, want->rejected);
}

static json_t *case_tools(const Case *c) {
    if (!c->tools) return NULL;
    json_error_t e;
    json_t *t = json_loads(c->tools, 0, &e);
    cr_assert(t, "%s: tools: %s", c->name, e.text);
    return t;
}

/* The case fed whole. */
static void run_whole(const Case *c, const json_t *tools, Result *r) { run_cuts(c, tools, NULL, 0, r, "whole", NULL); }

static Result expected(const Case *c) {
    Result w = {0};
    put(&w.reasoning, c->want_reasoning, strlen(c->want_reasoning));
    put(&w.content, c->want_content, strlen(c->want_content));
    put(&w.calls, c->want_calls, strlen(c->want_calls));
    w.rejected = c->want_rejected;
    return w;
}

/* ---- the table, whole and cut --------------------------------------------- */

Test(chat_output, table_whole) {
    for (size_t i = 0; i < NUM_CASES; i++) {
        const Case *c = &CASES[i];
        json_t *tools = case_tools(c);
        Result got, want = expected(c);
        run_whole(c, tools, &got);
        expect_same(c, &got, &want, "whole");
        result_free(&got);
        result_free(&want);
        json_decref(tools);
    }
}

Test(chat_output, table_cut_at_every_byte) {
    for (size_t i = 0; i < NUM_CASES; i++) {
        const Case *c = &CASES[i];
        json_t *tools = case_tools(c);
        Result want = expected(c), got;
        size_t len = strlen(c->text);
        char how[64];
        for (size_t cut = 0; cut <= len; cut++) { /* two pieces (empty ones included) */
            snprintf(how, sizeof how, "cut at byte %zu", cut);
            run_cuts(c, tools, &cut, 1, &got, how, c);
            expect_same(c, &got, &want, how);
            result_free(&got);
        }
        size_t *cuts = malloc((len + 8) * sizeof *cuts); /* every byte, or 8 random cuts */
        cr_assert(cuts);
        for (size_t k = 0; k < len; k++) cuts[k] = k + 1;
        run_cuts(c, tools, cuts, len ? len - 1 : 0, &got, "one byte per feed", c);
        expect_same(c, &got, &want, "one byte per feed");
        result_free(&got);
        /* Random cuts, 2 to 8 of them. */
        unsigned seed = 12345u + (unsigned)i;
        for (int round = 0; round < 50 && len; round++) {
            size_t n = 2 + (size_t)(rand_r(&seed) % 7);
            for (size_t k = 0; k < n; k++) cuts[k] = (size_t)rand_r(&seed) % (len + 1);
            for (size_t a = 1; a < n; a++) /* sort */
                for (size_t b = a; b > 0 && cuts[b - 1] > cuts[b]; b--) {
                    size_t t = cuts[b];
                    cuts[b] = cuts[b - 1];
                    cuts[b - 1] = t;
                }
            snprintf(how, sizeof how, "random cuts, round %d", round);
            run_cuts(c, tools, cuts, n, &got, how, c);
            expect_same(c, &got, &want, how);
            result_free(&got);
        }
        free(cuts);
        result_free(&want);
        json_decref(tools);
    }
}

Test(chat_output, table_cut_at_every_token) {
    Tokenizer *t = tiny_tokenizer();
    /* The tags are single tokens, as in the real model's stream. */
    const char *tags[] = {"<think>", "</think>", "<tool_call>", "</tool_call>"};
    for (int i = 0; i < 4; i++) {
        int32_t *ids;
        size_t n;
        Error err = {0};
        cr_assert_eq(tokenizer_encode(t, tags[i], strlen(tags[i]), &ids, &n, &err), 0, "%s", err.msg);
        cr_assert(n == 1 && ids[0] == tokenizer_token_to_id(t, tags[i], strlen(tags[i])), "%s", tags[i]);
        free(ids);
    }
    for (size_t i = 0; i < NUM_CASES; i++) {
        const Case *c = &CASES[i];
        json_t *tools = case_tools(c);
        Result want = expected(c), got;
        size_t len = strlen(c->text), n_ids;
        int32_t *ids;
        Error err = {0};
        cr_assert_eq(tokenizer_encode(t, c->text, len, &ids, &n_ids, &err), 0, "%s", err.msg);
        /* The detokenizer's pieces, as cut offsets into the text. */
        Detokenizer dt;
        detokenizer_init(&dt, t, false);
        size_t *cuts = malloc((n_ids + 1) * sizeof *cuts), n = 0, at = 0;
        cr_assert(cuts);
        for (size_t k = 0; k < n_ids; k++) {
            const char *piece;
            size_t plen;
            cr_assert_eq(detokenizer_push(&dt, ids[k], &piece, &plen, &err), 0, "%s", err.msg);
            cr_assert(at + plen <= len && memcmp(c->text + at, piece, plen) == 0,
                      "%s: token %zu does not decode to the text", c->name, k);
            at += plen;
            cuts[n++] = at;
        }
        const char *piece;
        size_t plen;
        cr_assert_eq(detokenizer_finish(&dt, &piece, &plen, &err), 0);
        cr_assert_eq(at + plen, len, "%s: the tokens do not decode to the text", c->name);
        detokenizer_free(&dt);
        run_cuts(c, tools, cuts, n, &got, "token by token", c);
        expect_same(c, &got, &want, "token by token");
        result_free(&got);
        free(cuts);
        free(ids);
        result_free(&want);
        json_decref(tools);
    }
    tokenizer_free(t);
}

/* ---- what the table does not show ---------------------------------------- */

/* Runs text whole and returns the single delta (reason included). */
static void run_text(const ChatOutputOptions *o, const char *text, ChatOutputDelta *d) {
    ChatOutputParser *p = chat_output_parser_new(o);
    cr_assert(p);
    *d = (ChatOutputDelta){0};
    cr_assert_eq(chat_output_feed(p, text, strlen(text), d), 0);
    cr_assert_eq(chat_output_finish(p, d), 0);
    chat_output_parser_free(p);
}

static void expect_reason(const ToolCallFormat *format, const char *text, const char *reason) {
    json_t *tools = json_loads(format == XML ? XML_TOOLS : WEATHER_TOOLS, 0, NULL);
    cr_assert(tools);
    ChatOutputOptions o = {.parse_reasoning = true, .tool_format = format, .tools = tools};
    ChatOutputDelta d;
    run_text(&o, text, &d);
    cr_expect_eq(d.num_rejected, 1, "'%s': %d rejected", text, d.num_rejected);
    cr_expect(strstr(d.rejected_reason, reason), "'%s': reason '%s' lacks '%s'", text,
              d.rejected_reason, reason);
    chat_output_delta_free(&d);
    json_decref(tools);
}

Test(chat_output, rejection_reasons) {
    expect_reason(HERMES, BAD_JSON, "tool call 1: not valid JSON: ");
    expect_reason(HERMES, PARIS UNKNOWN, "tool call 2: unknown function 'foo'");
    expect_reason(HERMES, PARIS "\n<tool_call>\n{", "tool call 2: unclosed <tool_call>");
    expect_reason(HERMES, "<tool_call>[]</tool_call>", "tool call 1: not a JSON object");
    expect_reason(HERMES, "<tool_call>{\"name\": 3}</tool_call>", "tool call 1: no function name");
    expect_reason(HERMES, "<tool_call>{\"name\": \"get_weather\", \"arguments\": 3}</tool_call>",
                  "tool call 1: \"arguments\" is not an object");
    expect_reason(HERMES, "<tool_call>{\"name\": \"get_weather\", \"arguments\": \"{x\"}</tool_call>",
                  "tool call 1: \"arguments\" string is not valid JSON");
    expect_reason(XML, "<tool_call><function=set><parameter=s>x</tool_call>",
                  "tool call 1: <parameter=s> is not closed");
    expect_reason(XML, "<tool_call>{}</tool_call>", "tool call 1: no <function=NAME>");
    expect_reason(XML, "<tool_call><function=set></tool_call>", "tool call 1: no </function>");
    expect_reason(XML, "<tool_call><function=set></function>x</tool_call>",
                  "tool call 1: text after </function>");
    expect_reason(XML, "<tool_call><function=set><param=s></function></tool_call>",
                  "tool call 1: expected <parameter=NAME> or </function>");
    expect_reason(XML, "<tool_call><function=set>\xff</function></tool_call>", "not valid UTF-8");
    /* A long name is cut at a character boundary (whichever byte the cut
     * falls on: the name starts with shift ASCII letters). */
    for (int shift = 0; shift < 2; shift++) {
        char text[600];
        snprintf(text, sizeof text, "<tool_call>{\"name\": \"%s%s\"}</tool_call>", shift ? "a" : "",
                 "éééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééé"
                 "éééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééé");
        json_t *tools = json_loads(WEATHER_TOOLS, 0, NULL);
        ChatOutputOptions o = {.tool_format = HERMES, .tools = tools};
        ChatOutputDelta d;
        run_text(&o, text, &d);
        size_t n = strlen(d.rejected_reason);
        cr_expect_geq(n, sizeof d.rejected_reason - 2, "'%s'", d.rejected_reason);
        /* Whole characters: every é is two bytes, after the ASCII prefix. */
        const char *q = strchr(d.rejected_reason, '\'');
        cr_assert(q);
        cr_expect_eq((size_t)(d.rejected_reason + n - (q + 1 + shift)) % 2, 0, "'%s'",
                     d.rejected_reason);
        chat_output_delta_free(&d);
        json_decref(tools);
    }
}

/* A body over 1 MiB is rejected whatever the cuts, and streams out as
 * content instead of being held. */
Test(chat_output, long_call_body) {
    const size_t limit = (size_t)1 << 20;
    json_t *tools = json_loads(WEATHER_TOOLS, 0, NULL);
    ChatOutputOptions o = {.tool_format = HERMES, .tools = tools};
    static const char head[] = "<tool_call>{\"name\": \"get_weather\", \"arguments\": {\"city\": \"";
    static const char tail[] = "\"}}</tool_call>";
    const size_t body_fixed = sizeof head - 1 - 11 + sizeof tail - 1 - 12;
    /* Bodies of exactly the limit (accepted) and one byte over (rejected),
     * and a much longer one; each whole, and in 4 KiB and odd-sized feeds. */
    const size_t bodies[] = {limit, limit + 1, 3 * limit};
    for (int b = 0; b < 3; b++) {
        size_t fill = bodies[b] - body_fixed, len = sizeof head - 1 + fill + sizeof tail - 1;
        char *text = malloc(len + 8);
        cr_assert(text);
        memcpy(text, head, sizeof head - 1);
        memset(text + sizeof head - 1, 'x', fill);
        memcpy(text + sizeof head - 1 + fill, tail, sizeof tail);
        memcpy(text + len, " end", 5);
        size_t total = len + 4;
        const size_t steps[] = {total, 4096, 4093, 1 << 16};
        for (int s = 0; s < 4; s++) {
            ChatOutputParser *p = chat_output_parser_new(&o);
            cr_assert(p);
            ChatOutputDelta d = {0};
            Result r = {0};
            bool released_early = false;
            for (size_t at = 0; at < total; at += steps[s]) {
                size_t n = total - at < steps[s] ? total - at : steps[s];
                cr_assert_eq(chat_output_feed(p, text + at, n, &d), 0);
                if (at + n < len && d.content.len) released_early = true;
                collect(&r, &d);
            }
            cr_assert_eq(chat_output_finish(p, &d), 0);
            collect(&r, &d);
            chat_output_parser_free(p);
            if (b == 0) {
                cr_expect_eq(r.rejected, 0, "body %zu, feeds of %zu", bodies[b], steps[s]);
                cr_expect_eq(r.calls.len, strlen("get_weather {\"city\":\"\"}\n") + fill);
                cr_expect_str_eq(str(&r.content), "end");
            } else {
                cr_expect_eq(r.rejected, 1, "body %zu, feeds of %zu", bodies[b], steps[s]);
                cr_expect_eq(r.calls.len, 0);
                cr_expect_eq(r.content.len, total);
                cr_expect(r.content.len == total && memcmp(r.content.data, text, total) == 0);
                if (b == 2 && steps[s] < total)
                    cr_expect(released_early, "a body past the limit was held (feeds of %zu)", steps[s]);
            }
            result_free(&r);
            chat_output_delta_free(&d);
        }
        /* Cut near the closing tag of the body just over the limit, every byte. */
        for (size_t cut = len - 40; b == 1 && cut <= len; cut++) {
            Case c = {"long body", false, false, HERMES, NULL, text, "", "", "", 0};
            Result r;
            run_cuts(&c, tools, &cut, 1, &r, "near the end", NULL);
            cr_expect_eq(r.rejected, 1, "cut at %zu", cut);
            cr_expect_eq(r.content.len, total, "cut at %zu", cut);
            result_free(&r);
        }
        /* An open body past the limit at the end: content, one rejection. */
        ChatOutputParser *p = chat_output_parser_new(&o);
        ChatOutputDelta d = {0};
        Result r = {0};
        cr_assert(p);
        for (size_t at = 0; at < len - 20; at += 5000) {
            size_t n = len - 20 - at < 5000 ? len - 20 - at : 5000;
            cr_assert_eq(chat_output_feed(p, text + at, n, &d), 0);
            collect(&r, &d);
        }
        cr_assert_eq(chat_output_finish(p, &d), 0);
        collect(&r, &d);
        cr_expect_eq(r.rejected, 1);
        cr_expect_eq(r.content.len, len - 20);
        result_free(&r);
        chat_output_delta_free(&d);
        chat_output_parser_free(p);
        free(text);
    }
    json_decref(tools);
}

Test(chat_output, delta_reuse_and_finish) {
    json_t *tools = json_loads(WEATHER_TOOLS, 0, NULL);
    ChatOutputOptions o = {.parse_reasoning = true, .tool_format = HERMES, .tools = tools};
    ChatOutputParser *p = chat_output_parser_new(&o);
    cr_assert(p);
    ChatOutputDelta d = {0};
    const char *a = "<think>\nr</think>\n\nx " UNKNOWN " y\n" PARIS;
    cr_assert_eq(chat_output_feed(p, a, strlen(a), &d), 0);
    cr_expect_str_eq(d.reasoning.data, "r"); /* NUL-terminated */
    cr_expect_str_eq(d.content.data, "x " UNKNOWN " y");
    cr_expect_eq(d.num_calls, 1);
    cr_expect_eq(d.num_rejected, 1);
    chat_output_delta_clear(&d);
    cr_expect_eq(d.reasoning.len + d.content.len, 0);
    cr_expect_eq(d.num_calls + d.num_rejected, 0);
    cr_expect_str_eq(d.rejected_reason, "");
    /* Appended to, never overwritten. */
    cr_assert_eq(chat_output_feed(p, "\nz <tool_", 9, &d), 0);
    cr_expect_str_eq(d.content.data, "\n\nz"); /* " y\n" + "\nz", " <tool_" held */
    cr_assert_eq(chat_output_feed(p, "x", 1, &d), 0);
    cr_expect_str_eq(d.content.data, "\n\nz <tool_x");
    cr_assert_eq(chat_output_finish(p, &d), 0);
    /* Finished: later feeds and finishes change nothing. */
    cr_assert_eq(chat_output_feed(p, "more", 4, &d), 0);
    cr_assert_eq(chat_output_finish(p, &d), 0);
    cr_expect_str_eq(d.content.data, "\n\nz <tool_x");
    chat_output_delta_free(&d);
    chat_output_parser_free(p);
    chat_output_parser_free(NULL);
    json_decref(tools);
}
