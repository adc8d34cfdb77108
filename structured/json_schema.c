/*
 * json_schema.c - JSON Schema into a grammar of the compact JSON texts it
 * accepts (see json_schema.h): the grammar-emitting walk.
 *
 * Two passes per schema object. schema_flatten() (json_schema_flatten.c)
 * checks every keyword, rewrites the older spellings into one vocabulary and
 * folds allOf and $ref-with-siblings into a single object. The compile_*
 * functions here then turn that object into grammar expressions, one per
 * type it allows. A $ref standing alone becomes a call of a rule compiled
 * once per target, which is what makes recursive schemas finite. The texts
 * of scalars (bounded numbers, string formats, JSON's own lexical rules,
 * keys outside a list) come from json_schema_scalars.c.
 *
 * "Matches nothing" (false, an empty enum, minItems above maxItems) is the
 * value JS_NOTHING rather than an error, because inside anyOf, an optional
 * property or an array's tail it only removes a choice; it is an error only
 * when a whole schema that must produce a value is left with none.
 */
#include "json_schema.h"

#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "json_schema_internal.h"
#include "regex.h"

/* ---- messages and the path they name ---------------------------------------------- */

GExpr schema_fail(SchemaCompiler *sc, const char *fmt, ...) {
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return grammar_fail(sc->g, ERROR_INVALID, "json schema: %s at #%s", msg, sc->path);
}

GExpr schema_out_of_memory(SchemaCompiler *sc) {
    return grammar_fail(sc->g, ERROR_INTERNAL, "json schema: out of memory");
}

/* Says why a part of the schema matches nothing, after the reason already
 * kept, which is that of a part inside it (compile_flat starts each schema
 * with none); the message for a whole schema without a value shows the
 * chain. Returns JS_NOTHING. */
static GExpr nothing_because(SchemaCompiler *sc, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static GExpr nothing_because(SchemaCompiler *sc, const char *fmt, ...) {
    char msg[200], *inner = sc->nothing_reason;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    size_t size = strlen(msg) + strlen(sc->path) + (inner ? strlen(inner) : 0) + 16;
    if (size > 800) size = 800; /* the error message has room for so much */
    sc->nothing_reason = malloc(size);
    if (sc->nothing_reason) snprintf(sc->nothing_reason, size, "%s at #%s%s%s", msg, sc->path, inner ? ": " : "", inner ? inner : "");
    free(inner);
    return JS_NOTHING;
}

static void forget_reason(SchemaCompiler *sc) {
    free(sc->nothing_reason);
    sc->nothing_reason = NULL;
}

/* Appends "/" and a JSON-pointer-escaped segment; a path too long for the
 * buffer ends in "..." (it is only ever shown in messages). */
static size_t path_push(SchemaCompiler *sc, const char *segment, size_t len) {
    size_t saved = sc->path_len;
    const size_t limit = PATH_CAPACITY - 4; /* keeps room for "..." and the NUL */
    bool fits = sc->path_len < limit;
    for (size_t i = 0; fits && i <= len; i++) {
        char c = i == 0 ? '/' : segment[i - 1];
        const char *escape = i > 0 && c == '~' ? "~0" : i > 0 && c == '/' ? "~1" : NULL;
        size_t piece_len = escape ? 2 : 1;
        fits = sc->path_len + piece_len <= limit;
        if (!fits) break;
        if (escape) memcpy(sc->path + sc->path_len, escape, 2);
        else sc->path[sc->path_len] = c;
        sc->path_len += piece_len;
    }
    if (!fits && saved < limit) {
        memcpy(sc->path + sc->path_len, "...", 3);
        sc->path_len += 3;
    }
    sc->path[sc->path_len] = '\0';
    return saved;
}

static size_t path_push_str(SchemaCompiler *sc, const char *segment) {
    return path_push(sc, segment, strlen(segment));
}

static size_t path_push_index(SchemaCompiler *sc, const char *keyword, size_t index) {
    char digits[32];
    size_t saved = path_push_str(sc, keyword);
    snprintf(digits, sizeof digits, "%zu", index);
    path_push_str(sc, digits);
    return saved;
}

static void path_pop(SchemaCompiler *sc, size_t saved) {
    sc->path_len = saved;
    sc->path[saved] = '\0';
}

/* ---- values ---------------------------------------------------------------------------------- */

/* A count keyword's value, already checked to be a whole number in [0, INT_MAX]. */
static int count_value(const json_t *v) {
    return json_is_integer(v) ? (int)json_integer_value(v) : (int)json_number_value(v);
}

static int value_type(const json_t *v) {
    switch (json_typeof(v)) {
    case JSON_NULL: return T_NULL;
    case JSON_TRUE:
    case JSON_FALSE: return T_BOOLEAN;
    case JSON_INTEGER: return T_INTEGER;
    case JSON_REAL: return js_number_is_integral(v) ? T_INTEGER : T_NUMBER;
    case JSON_STRING: return T_STRING;
    case JSON_ARRAY: return T_ARRAY;
    default: return T_OBJECT;
    }
}

/* ---- rules ---------------------------------------------------------------------------------- */

static int new_rule(SchemaCompiler *sc, const char *prefix, GExpr body) {
    if (body == G_ERROR) return -1;
    int rule = grammar_fresh_rule(sc->g, prefix);
    if (rule < 0 || grammar_define(sc->g, rule, body) < 0) return -1;
    return rule;
}

static GExpr rule_ref(SchemaCompiler *sc, int rule) { return rule < 0 ? G_ERROR : g_ref(sc->g, rule); }

static GExpr any_value(SchemaCompiler *sc) { return rule_ref(sc, js_value_rule(sc->g, &sc->json_rules)); }

/* ---- compiling a flattened schema -------------------------------------------------------- */

static GExpr compile_schema(SchemaCompiler *sc, json_t *schema);
static GExpr compile_flat(SchemaCompiler *sc, json_t *flat);

static GExpr compile_at(SchemaCompiler *sc, json_t *schema, const char *keyword, const char *name, size_t name_len) {
    size_t saved = path_push_str(sc, keyword);
    if (name) path_push(sc, name, name_len);
    GExpr e = compile_schema(sc, schema);
    path_pop(sc, saved);
    return e;
}

/* A copy of the JSON text of a value: jansson writes it compactly, escapes
 * only what JSON requires, and keeps an object's keys in their order. */
static GExpr literal_json(SchemaCompiler *sc, const json_t *value) {
    char *text = json_dumps(value, JSON_COMPACT | JSON_ENCODE_ANY);
    if (!text) return schema_out_of_memory(sc);
    GExpr e = g_bytes(sc->g, text, strlen(text));
    free(text);
    return e;
}

static GExpr compile_enum(SchemaCompiler *sc, json_t *flat) {
    const char *key;
    json_t *value, *values = json_object_get(flat, "enum");
    json_object_foreach(flat, key, value)
        if (strcmp(key, "enum") != 0 && strcmp(key, "type") != 0) /* no way to intersect a list with them */
            return schema_fail(sc, "'%s' together with 'enum' or 'const' is not supported", key);
    json_t *type = json_object_get(flat, "type");
    int allowed = type ? schema_type_mask(type) : T_ANY;
    size_t n = json_array_size(values), kept = 0;
    GExpr *alts = malloc((n ? n : 1) * sizeof *alts);
    if (!alts) return schema_out_of_memory(sc);
    for (size_t i = 0; i < n; i++)
        if (value_type(json_array_get(values, i)) & allowed) alts[kept++] = literal_json(sc, json_array_get(values, i));
    GExpr e = kept ? js_alt(sc->g, alts, (int)kept)
                   : nothing_because(sc, n ? "no value of 'enum' or 'const' has the schema's 'type'" : "'enum' is empty");
    free(alts);
    return e;
}

static GExpr compile_string(SchemaCompiler *sc, json_t *flat) {
    Grammar *g = sc->g;
    json_t *pattern = json_object_get(flat, "pattern"), *format = json_object_get(flat, "format");
    json_t *min_length = json_object_get(flat, "minLength"), *max_length = json_object_get(flat, "maxLength");
    int min = min_length ? count_value(min_length) : 0, max = max_length ? count_value(max_length) : G_UNBOUNDED;
    if (pattern && format) return schema_fail(sc, "'pattern' together with 'format' is not supported");
    /* A length and a pattern cannot be intersected by this grammar builder: refused, not loosened. */
    if ((pattern || format) && (min > 0 || max_length))
        return schema_fail(sc, "'%s' together with 'minLength' or 'maxLength' is not supported",
                           pattern ? "pattern" : "format");
    if (max_length && min > max) return nothing_because(sc, "'minLength' %d is above 'maxLength' %d", min, max);
    GExpr body;
    if (pattern) {
        body = regex_to_grammar(g, json_string_value(pattern), json_string_length(pattern), REGEX_SEARCH, G_JSON_STRING);
        if (body == G_ERROR) grammar_error_prefix(g, "json schema: 'pattern' at #%s", sc->path);
    } else if (format) {
        body = js_format_grammar(g, json_string_value(format));
        if (body == JS_NOTHING)
            return schema_fail(sc, "unsupported format '%s' (supported: date, time, date-time, uuid, email)",
                               json_string_value(format));
    } else {
        body = g_repeat(g, js_char_expr(g, &sc->json_rules), min, max);
    }
    return js_seq(g, (GExpr[]){g_str(g, "\""), body, g_str(g, "\"")}, 3);
}

/* The stricter of an inclusive and an exclusive bound (either may be NULL). */
static JsBound stricter_bound(json_t *inclusive, json_t *exclusive, int direction) {
    if (!exclusive) return (JsBound){inclusive, false};
    if (!inclusive) return (JsBound){exclusive, true};
    return js_number_compare(exclusive, inclusive) * direction >= 0 ? (JsBound){exclusive, true}
                                                                    : (JsBound){inclusive, false};
}

static GExpr compile_numeric(SchemaCompiler *sc, json_t *flat, bool integer_only) {
    JsBound lower = stricter_bound(json_object_get(flat, "minimum"), json_object_get(flat, "exclusiveMinimum"), +1);
    JsBound upper = stricter_bound(json_object_get(flat, "maximum"), json_object_get(flat, "exclusiveMaximum"), -1);
    /* OpenAPI's integer formats are ranges; other formats say nothing about numbers. */
    const char *format = json_string_value(json_object_get(flat, "format"));
    bool int32 = integer_only && format && strcmp(format, "int32") == 0;
    bool int64 = integer_only && format && strcmp(format, "int64") == 0;
    json_t *format_min = int32 || int64 ? json_integer(int32 ? INT32_MIN : INT64_MIN) : NULL;
    json_t *format_max = int32 || int64 ? json_integer(int32 ? INT32_MAX : INT64_MAX) : NULL;
    GExpr e;
    if ((int32 || int64) && (!format_min || !format_max)) {
        e = schema_out_of_memory(sc);
    } else {
        if (format_min && (!lower.value || js_number_compare(format_min, lower.value) > 0))
            lower = (JsBound){format_min, false};
        if (format_max && (!upper.value || js_number_compare(format_max, upper.value) < 0))
            upper = (JsBound){format_max, false};
        if (!lower.value && !upper.value)
            e = integer_only ? js_unbounded_integer(sc->g) : rule_ref(sc, js_number_rule(sc->g, &sc->json_rules));
        else
            e = js_number_range(sc->g, integer_only, lower, upper);
        if (e == JS_NOTHING)
            nothing_because(sc, "no %s lies between the schema's minimum and maximum", integer_only ? "integer" : "number");
    }
    json_decref(format_min);
    json_decref(format_max);
    return e;
}

/* "[" items "]" with item i matching prefixItems[i], later ones items, and
 * minItems..maxItems of them; nested so that commas only come between items. */
static GExpr compile_array(SchemaCompiler *sc, json_t *flat) {
    Grammar *g = sc->g;
    json_t *tuple = json_object_get(flat, "prefixItems"), *rest = json_object_get(flat, "items");
    json_t *min_items = json_object_get(flat, "minItems"), *max_items = json_object_get(flat, "maxItems");
    int min = min_items ? count_value(min_items) : 0, max = max_items ? count_value(max_items) : G_UNBOUNDED;
    int tuple_len = (int)json_array_size(tuple);
    GExpr *items = malloc((size_t)(tuple_len + 1) * sizeof *items);
    if (!items) return schema_out_of_memory(sc);
    for (int i = 0; i < tuple_len; i++) { /* an item that can have no value ends the array before it */
        size_t saved = path_push_index(sc, "prefixItems", (size_t)i);
        items[i] = compile_schema(sc, json_array_get(tuple, (size_t)i));
        path_pop(sc, saved);
        if (items[i] == G_ERROR) return free(items), G_ERROR;
        if (items[i] == JS_NOTHING && (max == G_UNBOUNDED || max > i)) max = i;
    }
    int rest_rule = -1;
    if (max == G_UNBOUNDED || max > tuple_len) {
        GExpr rest_expr = rest ? compile_at(sc, rest, "items", NULL, 0) : any_value(sc);
        if (rest_expr == G_ERROR) return free(items), G_ERROR;
        if (rest_expr == JS_NOTHING) max = tuple_len;
        else if ((rest_rule = new_rule(sc, "array-item", rest_expr)) < 0) return free(items), G_ERROR;
    }
    GExpr body;
    if (max != G_UNBOUNDED && min > max) {
        body = nothing_because(sc, "'minItems' %d is above the %d items the array can hold", min, max);
    } else if (max == 0) {
        body = g_empty(g);
    } else {
        /* What may follow once i items are written, built from the last: after
         * the tuple, the rest (rest_rule is set only when items may follow it). */
        GExpr after = g_empty(g);
        if (rest_rule >= 0 && tuple_len > 0)
            after = g_repeat(g, g_seq2(g, g_str(g, ","), g_ref(g, rest_rule)), min > tuple_len ? min - tuple_len : 0,
                             max == G_UNBOUNDED ? G_UNBOUNDED : max - tuple_len);
        if (tuple_len > 0) {
            for (int i = (max != G_UNBOUNDED && max < tuple_len ? max : tuple_len) - 1; i >= 1; i--) {
                GExpr next = js_seq(g, (GExpr[]){g_str(g, ","), items[i], after}, 3);
                after = i >= min ? js_alt2(g, g_empty(g), next) : next;
            }
            body = js_seq2(g, items[0], after);
        } else {
            body = g_seq2(g, g_ref(g, rest_rule),
                          rest_rule < 0 ? g_empty(g)
                                        : g_repeat(g, g_seq2(g, g_str(g, ","), g_ref(g, rest_rule)), min > 1 ? min - 1 : 0,
                                                   max == G_UNBOUNDED ? G_UNBOUNDED : max - 1));
        }
        if (min == 0) body = js_alt2(g, g_empty(g), body);
    }
    free(items);
    return js_seq(g, (GExpr[]){g_str(g, "["), body, g_str(g, "]")}, 3);
}

/* ---- objects ------------------------------------------------------------------------------ */

typedef struct Member {
    const char *name;
    size_t name_len;
    GExpr expr; /* "name":value */
    bool required;
} Member;

static GExpr member_expr(SchemaCompiler *sc, const char *name, size_t name_len, GExpr value) {
    json_t *key = json_stringn(name, name_len);
    if (!key) return schema_out_of_memory(sc);
    GExpr e = js_seq(sc->g, (GExpr[]){literal_json(sc, key), g_str(sc->g, ":"), value}, 3);
    json_decref(key);
    return e;
}

/* The additional-property member "key":value with key none of the listed
 * names, as a rule; -1 when there can be none, -2 after an error. */
static int extra_member_rule(SchemaCompiler *sc, json_t *additional, const Member *members, int num_members) {
    if (json_is_false(additional)) return -1;
    GExpr value = additional ? compile_at(sc, additional, "additionalProperties", NULL, 0) : any_value(sc);
    if (value == JS_NOTHING) return forget_reason(sc), -1;
    if (value == G_ERROR) return -2;
    const char **names = malloc(((size_t)num_members + 1) * sizeof *names);
    size_t *lengths = malloc(((size_t)num_members + 1) * sizeof *lengths);
    if (!names || !lengths) return free(names), free(lengths), schema_out_of_memory(sc), -2;
    for (int i = 0; i < num_members; i++) {
        names[i] = members[i].name, lengths[i] = members[i].name_len;
        if (lengths[i] > MAX_EXCLUDED_NAME) {
            free(names), free(lengths);
            return schema_fail(sc, "a property name longer than %d bytes together with additional properties "
                                   "is not supported", MAX_EXCLUDED_NAME), -2;
        }
    }
    GExpr key = js_key_not_listed(sc->g, names, lengths, num_members);
    free(names), free(lengths);
    Grammar *g = sc->g;
    GExpr member = js_seq(g, (GExpr[]){g_str(g, "\""), key, g_str(g, "\":"), value}, 4);
    int rule = new_rule(sc, "extra-property", member);
    return rule < 0 ? -2 : rule;
}

/* "," and a member, optional unless required. */
static GExpr member_after_comma(Grammar *g, GExpr member, bool required) {
    GExpr e = g_seq2(g, g_str(g, ","), member);
    return required ? e : g_optional(g, e);
}

/* "{" members "}": listed properties in order, each optional one possibly
 * left out, then additional ones. Commas go between members whichever are
 * present: "after k" (members k.. once something is written) is a sequence
 * of optional ",member"s; the start picks the first member written, and
 * only members up to the first required one can be first. Those starts
 * share their "after" rules, so the grammar grows linearly. */
static GExpr object_body(SchemaCompiler *sc, Member *members, int n, int extra, int max_extra) {
    Grammar *g = sc->g;
    int first_required = n;
    for (int i = n - 1; i >= 0; i--)
        if (members[i].required) first_required = i;
    GExpr extras_only = extra < 0 || max_extra == 0 ? g_empty(g)
                        : g_optional(g, g_seq2(g, g_ref(g, extra),
                                               g_repeat(g, g_seq2(g, g_str(g, ","), g_ref(g, extra)), 0,
                                                        max_extra == G_UNBOUNDED ? G_UNBOUNDED : max_extra - 1)));
    if (n == 0) return extras_only;
    int last_start = first_required < n ? first_required : n - 1; /* members that can come first */
    GExpr after = extra < 0 || max_extra == 0 ? g_empty(g) : g_repeat(g, g_seq2(g, g_str(g, ","), g_ref(g, extra)), 0, max_extra);
    for (int k = n - 1; k > last_start; k--) after = g_seq2(g, member_after_comma(g, members[k].expr, members[k].required), after);
    GExpr *alts = malloc((size_t)(last_start + 2) * sizeof *alts);
    if (!alts) return schema_out_of_memory(sc);
    int num_alts = 0;
    if (last_start == 0) {
        alts[num_alts++] = g_seq2(g, members[0].expr, after);
    } else {
        /* Members 1..last_start appear twice (first, or after a comma): as rules. */
        int after_rule = new_rule(sc, "properties-after", after);
        for (int k = last_start; k >= 1 && after_rule >= 0; k--) {
            int member_rule = new_rule(sc, "property", members[k].expr);
            if (member_rule < 0) break;
            alts[num_alts++] = g_seq2(g, g_ref(g, member_rule), g_ref(g, after_rule));
            after_rule = new_rule(sc, "properties-after",
                                  g_seq2(g, member_after_comma(g, g_ref(g, member_rule), members[k].required),
                                         g_ref(g, after_rule)));
        }
        alts[num_alts++] = after_rule < 0 ? G_ERROR : g_seq2(g, members[0].expr, g_ref(g, after_rule));
    }
    if (first_required == n) alts[num_alts++] = extras_only;
    GExpr body = js_alt(g, alts, num_alts);
    free(alts);
    return body;
}

static GExpr compile_object(SchemaCompiler *sc, json_t *flat) {
    json_t *properties = json_object_get(flat, "properties"), *required = json_object_get(flat, "required");
    json_t *additional = json_object_get(flat, "additionalProperties");
    json_t *min_props = json_object_get(flat, "minProperties"), *max_props = json_object_get(flat, "maxProperties");
    if (schema_over_budget(sc, json_object_size(properties) + json_array_size(required))) return G_ERROR;
    /* The required names as keys: looked up once per property, and each only once. */
    json_t *required_set = json_object();
    Member *members = calloc(json_object_size(properties) + json_array_size(required) + 1, sizeof *members);
    GExpr result = G_ERROR;
    bool set_made = required_set != NULL;
    for (size_t i = 0; set_made && i < json_array_size(required); i++) {
        json_t *r = json_array_get(required, i);
        set_made = json_object_setn(required_set, json_string_value(r), json_string_length(r), json_true()) == 0;
    }
    if (!members || !set_made) {
        result = schema_out_of_memory(sc);
        goto done;
    }
    int n = 0;
    const char *name;
    size_t name_len;
    json_t *schema;
    json_object_keylen_foreach(properties, name, name_len, schema) {
        bool is_required = json_object_getn(required_set, name, name_len) != NULL;
        GExpr value = compile_at(sc, schema, "properties", name, name_len);
        if (value == G_ERROR) goto done;
        if (value == JS_NOTHING && is_required) {
            result = nothing_because(sc, "required property '%s' can have no value", name);
            goto done;
        }
        if (value == JS_NOTHING) forget_reason(sc); /* left out, so no reason for anything */
        /* A property that can have no value is still listed: it must not come back as an additional one. */
        members[n++] = (Member){name, name_len, value == JS_NOTHING ? value : member_expr(sc, name, name_len, value),
                                is_required};
    }
    json_t *unused;
    json_object_keylen_foreach(required_set, name, name_len, unused) { /* required but not in properties */
        if (json_object_getn(properties, name, name_len)) continue;
        GExpr value = additional ? compile_at(sc, additional, "additionalProperties", NULL, 0) : any_value(sc);
        if (value == G_ERROR) goto done;
        if (value == JS_NOTHING) {
            result = nothing_because(sc, "required property '%s' is not allowed by additionalProperties", name);
            goto done;
        }
        members[n++] = (Member){name, name_len, member_expr(sc, name, name_len, value), true};
    }
    int extra = extra_member_rule(sc, additional, members, n);
    if (extra == -2) goto done;
    int kept = 0, num_required = 0;
    for (int i = 0; i < n; i++) {
        if (members[i].expr == G_ERROR) goto done;
        if (members[i].expr != JS_NOTHING) members[kept++] = members[i], num_required += members[i].required;
    }
    n = kept;
    int max_extra = G_UNBOUNDED;
    if (min_props && count_value(min_props) > num_required) { /* would need counting optional members */
        result = schema_fail(sc, "'minProperties' above the number of required properties is not supported");
        goto done;
    }
    if (max_props) {
        int max = count_value(max_props);
        if (max < num_required) {
            result = nothing_because(sc, "'maxProperties' %d is below the %d required properties", max, num_required);
            goto done;
        }
        if (max < n) {
            result = schema_fail(sc, "'maxProperties' below the number of listed properties is not supported");
            goto done;
        }
        max_extra = max - n;
    }
    Grammar *g = sc->g;
    result = js_seq(g, (GExpr[]){g_str(g, "{"), object_body(sc, members, n, extra, max_extra), g_str(g, "}")}, 3);
done:
    free(members);
    json_decref(required_set);
    return result;
}

/* ---- schemas --------------------------------------------------------------------------------- */

/* The rule for a $ref's target, made (and queued for compiling) on first use. */
static GExpr ref_call(SchemaCompiler *sc, const json_t *ref) {
    if (!json_is_string(ref)) return schema_fail(sc, "'$ref' must be a string");
    const json_t *target = schema_resolve_ref(sc, ref);
    if (!target) return G_ERROR;
    for (int i = 0; i < sc->num_refs; i++)
        if (sc->refs[i].target == target) return g_ref(sc->g, sc->refs[i].rule);
    if (sc->num_refs == MAX_REFS) return schema_fail(sc, "more than %d different $ref targets", MAX_REFS);
    if (sc->num_refs == sc->refs_capacity) {
        int capacity = sc->refs_capacity ? 2 * sc->refs_capacity : 16;
        RefRule *grown = realloc(sc->refs, (size_t)capacity * sizeof *grown);
        if (!grown) return schema_out_of_memory(sc);
        sc->refs = grown, sc->refs_capacity = capacity;
    }
    const char *text = json_string_value(ref);
    char *pointer = strdup(text + 1); /* without the '#': what the messages show after it */
    int rule = grammar_fresh_rule(sc->g, text);
    if (!pointer || rule < 0) return free(pointer), rule < 0 ? G_ERROR : schema_out_of_memory(sc);
    sc->refs[sc->num_refs++] = (RefRule){target, rule, pointer};
    return g_ref(sc->g, rule);
}

static bool is_ref_only(json_t *schema) {
    const char *key;
    json_t *value;
    if (!json_object_get(schema, "$ref")) return false;
    json_object_foreach(schema, key, value)
        if (strcmp(key, "$ref") != 0 && schema_keyword_kind(key) != KW_ANNOTATION) return false;
    return true;
}

static GExpr compile_any_of(SchemaCompiler *sc, json_t *flat, json_t *any_of) {
    json_t *siblings = json_copy(flat);
    size_t n = json_array_size(any_of);
    GExpr *alts = malloc(n * sizeof *alts);
    if (!siblings || !alts) return json_decref(siblings), free(alts), schema_out_of_memory(sc);
    json_object_del(siblings, "anyOf");
    GExpr result = G_ERROR;
    for (size_t i = 0; i < n; i++) {
        size_t saved = path_push_index(sc, "anyOf", i);
        json_t *alternative = json_array_get(any_of, i);
        forget_reason(sc); /* a reason from the alternative before is not this one's */
        if (json_object_size(siblings) == 0) { /* as it is: a $ref stays a rule call */
            alts[i] = compile_schema(sc, alternative);
        } else { /* the other keywords apply to every alternative */
            json_t *part = schema_flatten(sc, alternative, 0);
            json_t *merged = part ? schema_merge_pair(sc, siblings, part) : NULL;
            alts[i] = merged ? compile_flat(sc, merged) : G_ERROR;
            json_decref(part);
            json_decref(merged);
        }
        path_pop(sc, saved);
        if (alts[i] == G_ERROR) goto done;
    }
    result = js_alt(sc->g, alts, (int)n);
done:
    json_decref(siblings);
    free(alts);
    return result;
}

/* The types a flattened schema allows: its "type", or without one the types
 * its keywords constrain (a schema with "properties" means an object), or any. */
static int allowed_types(json_t *flat) {
    json_t *type = json_object_get(flat, "type");
    if (type) return schema_type_mask(type);
    static const int KIND_TYPES[] = {[KW_OBJECT] = T_OBJECT, [KW_ARRAY] = T_ARRAY, [KW_STRING] = T_STRING,
                                     [KW_NUMBER] = T_NUMBER | T_INTEGER};
    int mask = 0;
    const char *key;
    json_t *value;
    json_object_foreach(flat, key, value) {
        int kind = schema_keyword_kind(key);
        if (kind >= KW_OBJECT) mask |= KIND_TYPES[kind];
    }
    return mask ? mask : T_ANY;
}

static GExpr compile_flat(SchemaCompiler *sc, json_t *flat) {
    if (sc->depth >= MAX_DEPTH) return schema_fail(sc, "schema nested more than %d deep", MAX_DEPTH);
    /* This schema's reason for matching nothing, if it does, replaces any
     * reason kept before; if it matches something, that one is kept. */
    char *outer_reason = sc->nothing_reason;
    sc->nothing_reason = NULL;
    sc->depth++;
    Grammar *g = sc->g;
    GExpr result;
    json_t *any_of = json_object_get(flat, "anyOf");
    int types = allowed_types(flat);
    if (json_is_false(flat)) {
        result = nothing_because(sc, "the schema is false, or its allOf parts exclude each other");
    } else if (any_of) {
        result = compile_any_of(sc, flat, any_of);
    } else if (json_object_get(flat, "enum")) {
        result = compile_enum(sc, flat);
    } else if (types == T_ANY && json_object_size(flat) <= (json_object_get(flat, "type") ? 1u : 0u)) {
        result = any_value(sc);
    } else {
        GExpr alts[7];
        int n = 0;
        if (types & T_NULL) alts[n++] = g_str(g, "null");
        if (types & T_BOOLEAN) alts[n++] = g_alt2(g, g_str(g, "true"), g_str(g, "false"));
        /* Each type on its own: one that has no value says why, not after another. */
        if (types & T_INTEGER) forget_reason(sc), alts[n++] = compile_numeric(sc, flat, !(types & T_NUMBER));
        if (types & T_STRING) forget_reason(sc), alts[n++] = compile_string(sc, flat);
        if (types & T_ARRAY) forget_reason(sc), alts[n++] = compile_array(sc, flat);
        if (types & T_OBJECT) forget_reason(sc), alts[n++] = compile_object(sc, flat);
        result = js_alt(g, alts, n);
    }
    sc->depth--;
    if (result == JS_NOTHING) {
        free(outer_reason);
    } else {
        forget_reason(sc);
        sc->nothing_reason = outer_reason;
    }
    return result;
}

static GExpr compile_schema(SchemaCompiler *sc, json_t *schema) {
    if (grammar_error(sc->g)) return G_ERROR;
    if (json_is_object(schema) && is_ref_only(schema)) return ref_call(sc, json_object_get(schema, "$ref"));
    json_t *flat = schema_flatten(sc, schema, 0);
    if (!flat) return G_ERROR;
    GExpr e = compile_flat(sc, flat);
    json_decref(flat);
    return e;
}

int json_schema_to_grammar(Grammar *g, const json_t *schema) {
    if (!g || grammar_error(g)) return -1;
    if (!schema) return grammar_fail(g, ERROR_INVALID, "json schema: no schema given"), -1;
    SchemaCompiler sc = {.g = g, .root = schema, .json_rules = {-1, -1, -1, -1}};
    /* The root is the first "$ref target", so "#" refers to it without a second copy. */
    json_t *root_ref = json_string("#");
    if (!root_ref) return grammar_fail(g, ERROR_INTERNAL, "json schema: out of memory"), -1;
    ref_call(&sc, root_ref);
    json_decref(root_ref);
    for (int i = 0; i < sc.num_refs && !grammar_error(g); i++) { /* compiling one target may queue more */
        path_pop(&sc, 0);
        size_t pointer_len = strlen(sc.refs[i].pointer);
        if (pointer_len > 0) { /* the pointer is already escaped: copied as it is */
            sc.path_len = pointer_len < PATH_CAPACITY - 1 ? pointer_len : PATH_CAPACITY - 1;
            memcpy(sc.path, sc.refs[i].pointer, sc.path_len);
            sc.path[sc.path_len] = '\0';
        }
        sc.depth = 0;
        GExpr body = compile_schema(&sc, (json_t *)sc.refs[i].target);
        if (body == JS_NOTHING && i == 0)
            grammar_fail(g, ERROR_INVALID, "json schema: the schema accepts nothing (%s)",
                         sc.nothing_reason ? sc.nothing_reason : "false");
        else if (body != G_ERROR) /* a definition without a value: the compiler cuts the calls to it */
            grammar_define(g, sc.refs[i].rule, body == JS_NOTHING ? g_alt(g, NULL, 0) : body);
        forget_reason(&sc);
    }
    if (sc.num_refs > 0) grammar_set_root(g, sc.refs[0].rule);
    for (int i = 0; i < sc.num_refs; i++) free(sc.refs[i].pointer);
    free(sc.refs);
    forget_reason(&sc);
    return grammar_error(g) ? -1 : 0;
}
