/*
 * json_schema.h - JSON Schema into a Grammar of the JSON texts it accepts.
 *
 * For response_format json_schema / json_object, guided_json and
 * structured_outputs.json. Supported: type (and lists of types), object
 * properties / required / additionalProperties (false, true or a schema),
 * array items / prefixItems / minItems / maxItems, enum, const, string
 * minLength / maxLength / pattern / format (date, time, date-time, uuid,
 * email), integer and number minimum / maximum / exclusiveMinimum /
 * exclusiveMaximum, boolean, null, anyOf and oneOf (both as anyOf), allOf of
 * object schemas (merged), $ref to #/$defs/... and #/definitions/...
 * (recursion included). Keywords that only annotate (title, description,
 * examples, default, $schema, $id, $comment, ...) are ignored; any other
 * keyword is an ERROR_INVALID naming it, so a schema is never silently
 * loosened.
 *
 * The output is written compactly: properties in the schema's order, no
 * whitespace between tokens, so bounded strings and arrays give a bounded
 * answer and a model cannot loop on spaces.
 */
#ifndef NANOVLLM_JSON_SCHEMA_H
#define NANOVLLM_JSON_SCHEMA_H

#include <jansson.h>

#include "grammar.h"

/* Defines rules for the schema in g and sets the root to the top value.
 * Returns 0, or -1 with grammar_error(g) ("json schema: ... at /path"). */
int json_schema_to_grammar(Grammar *g, const json_t *schema);

#endif
