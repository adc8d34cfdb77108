/*
 * fuzz_chat_output.c - libFuzzer target for the chat-answer parser
 * (chat/, make fuzz): a model's answer is untrusted text.
 *
 * Input: one option byte (reasoning on/off, starts in reasoning, Hermes /
 * Qwen3-XML / no tool parsing, tools given or not), one split byte, then
 * the answer. The answer is parsed whole, and again fed in pieces whose
 * lengths follow the split byte's xorshift stream; besides no crash, leak
 * or undefined behaviour, the two must release the same reasoning, content,
 * calls (name and arguments) and rejection count, every call's arguments
 * must be a JSON object, and what is released must be valid UTF-8 when the
 * answer was (pieces are cut at character boundaries, as the engine cuts).
 */
#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "chat/chat_output.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char TOOLS[] =
    "[{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"parameters\": {\"type\": \"object\", "
    "\"properties\": {\"city\": {\"type\": \"string\"}, \"days\": {\"type\": \"integer\"}, \"deep\": {\"type\": "
    "\"object\"}, \"ok\": {\"type\": \"boolean\"}}}}}, {\"type\": \"function\", \"function\": {\"name\": \"add\"}}]";

static bool utf8_valid(const char *s, size_t n) {
    for (size_t i = 0; i < n;) {
        unsigned char c = (unsigned char)s[i];
        size_t len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
        if (!len || i + len > n) return false;
        for (size_t k = 1; k < len; k++)
            if (((unsigned char)s[i + k] & 0xC0) != 0x80) return false;
        i += len;
    }
    return true;
}

static size_t char_len(const uint8_t *s, size_t at, size_t n) {
    unsigned char c = s[at];
    size_t len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 1;
    return at + len <= n ? len : n - at;
}

static void run(const ChatOutputOptions *o, const uint8_t *text, size_t n, uint8_t split, ChatOutputDelta *d) {
    ChatOutputParser *p = chat_output_parser_new(o);
    if (!p) __builtin_trap();
    uint32_t x = split | 0x100u;
    size_t at = 0;
    while (at < n) {
        size_t piece = n - at;
        if (split) {
            x ^= x << 13, x ^= x >> 17, x ^= x << 5;
            size_t want = 1 + x % 16, end = at;
            while (end < n && end - at < want) end += char_len(text, end, n);
            piece = end - at;
        }
        if (chat_output_feed(p, (const char *)text + at, piece, d)) __builtin_trap();
        at += piece;
    }
    if (chat_output_finish(p, d)) __builtin_trap();
    chat_output_parser_free(p);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 2 || size > 8192) return 0;
    uint8_t opt = data[0], split = data[1];
    const uint8_t *text = data + 2;
    size_t n = size - 2;
    json_t *tools = (opt & 8) ? json_loads(TOOLS, 0, NULL) : NULL;
    /* The last two: no format, and a format not known here (no format either). */
    static const ToolCallFormat *const formats[] = {&tool_call_format_hermes, &tool_call_format_qwen3_xml, NULL,
                                                    NULL};
    ChatOutputOptions o = {.parse_reasoning = opt & 1, .starts_in_reasoning = (opt & 3) == 3,
                           .tool_format = formats[(opt >> 2) & 3], .tools = tools};
    ChatOutputDelta whole = {0}, pieces = {0};
    run(&o, text, n, 0, &whole);
    run(&o, text, n, split ? split : 1, &pieces);
    if (whole.reasoning.len != pieces.reasoning.len || whole.content.len != pieces.content.len ||
        whole.num_calls != pieces.num_calls || whole.num_rejected != pieces.num_rejected)
        __builtin_trap();
    if (whole.reasoning.len && memcmp(whole.reasoning.data, pieces.reasoning.data, whole.reasoning.len)) __builtin_trap();
    if (whole.content.len && memcmp(whole.content.data, pieces.content.data, whole.content.len)) __builtin_trap();
    for (int i = 0; i < whole.num_calls; i++) {
        if (strcmp(whole.calls[i].name, pieces.calls[i].name) || strcmp(whole.calls[i].arguments, pieces.calls[i].arguments))
            __builtin_trap();
        /* A raw-text value may hold U+0000, which the arguments escape as \u0000. */
        json_t *args = json_loads(whole.calls[i].arguments, JSON_ALLOW_NUL, NULL);
        if (!json_is_object(args)) __builtin_trap();
        json_decref(args);
    }
    if (utf8_valid((const char *)text, n) &&
        (!utf8_valid(whole.reasoning.data, whole.reasoning.len) || !utf8_valid(whole.content.data, whole.content.len)))
        __builtin_trap();
    chat_output_delta_free(&whole);
    chat_output_delta_free(&pieces);
    json_decref(tools);
    return 0;
}
