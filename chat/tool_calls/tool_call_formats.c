/*
 * tool_call_formats.c - the one table of tool-call formats this build
 * knows (see tool_call_format.h), and the lookups over it. Its order is
 * detection's: a template is taken to teach the first format whose test it
 * passes, so a format whose templates also pass another's test comes
 * first (Qwen3-Coder's XML calls sit inside Hermes' <tool_call> tags).
 */
#include "tool_call_format.h"

#include <string.h>

static const ToolCallFormat *const FORMATS[] = {
    &tool_call_format_qwen3_xml,
    &tool_call_format_hermes,
};

#define NUM_FORMATS (sizeof FORMATS / sizeof FORMATS[0])

const ToolCallFormat *tool_call_format_at(size_t i) { return i < NUM_FORMATS ? FORMATS[i] : NULL; }

const ToolCallFormat *tool_call_format_named(const char *name) {
    for (size_t i = 0; i < NUM_FORMATS; i++) {
        const ToolCallFormat *f = FORMATS[i];
        if (strcmp(f->name, name) == 0) return f;
        for (const char *const *alias = f->aliases; alias && *alias; alias++)
            if (strcmp(*alias, name) == 0) return f;
    }
    return NULL;
}

const ToolCallFormat *tool_call_format_taught_by(const char *template_text) {
    for (size_t i = 0; i < NUM_FORMATS; i++)
        if (FORMATS[i]->taught_by(template_text)) return FORMATS[i];
    return NULL;
}
