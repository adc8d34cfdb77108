/*
 * json_schema_flatten.c - turns one schema object into one flat form for
 * json_schema.c to compile (see json_schema_internal.h): every keyword
 * checked (an unknown one is an error naming it, never ignored), the older
 * spellings (const, oneOf, items as an array, boolean exclusiveMinimum)
 * rewritten into one vocabulary, and allOf and $ref-with-siblings folded into
 * a single object by intersecting keyword by keyword. Kept apart from the
 * grammar-emitting walk because it is pure schema-to-schema rewriting: it
 * builds no grammar expressions.
 */
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "json_schema_internal.h"

/* ---- keywords -------------------------------------------------------------------------- */

static const char *const TYPE_NAMES[7] = {"null", "boolean", "integer", "number", "string", "array", "object"};

static const struct {
    const char *name;
    int kind;
} KEYWORDS[] = {
    {"title", KW_ANNOTATION}, {"description", KW_ANNOTATION}, {"examples", KW_ANNOTATION},
    {"default", KW_ANNOTATION}, {"$schema", KW_ANNOTATION}, {"$id", KW_ANNOTATION},
    {"$comment", KW_ANNOTATION}, {"deprecated", KW_ANNOTATION}, {"readOnly", KW_ANNOTATION},
    {"writeOnly", KW_ANNOTATION}, {"contentMediaType", KW_ANNOTATION}, {"contentEncoding", KW_ANNOTATION},
    {"$defs", KW_ANNOTATION}, {"definitions", KW_ANNOTATION}, /* read only through $ref */
    {"type", KW_GENERAL}, {"enum", KW_GENERAL}, {"const", KW_GENERAL}, {"anyOf", KW_GENERAL},
    {"oneOf", KW_GENERAL}, {"allOf", KW_GENERAL}, {"$ref", KW_GENERAL},
    {"properties", KW_OBJECT}, {"required", KW_OBJECT}, {"additionalProperties", KW_OBJECT},
    {"minProperties", KW_OBJECT}, {"maxProperties", KW_OBJECT},
    {"items", KW_ARRAY}, {"prefixItems", KW_ARRAY}, {"additionalItems", KW_ARRAY}, {"minItems", KW_ARRAY},
    {"maxItems", KW_ARRAY}, {"uniqueItems", KW_ARRAY},
    {"minLength", KW_STRING}, {"maxLength", KW_STRING}, {"pattern", KW_STRING}, {"format", KW_STRING},
    {"minimum", KW_NUMBER}, {"maximum", KW_NUMBER}, {"exclusiveMinimum", KW_NUMBER},
    {"exclusiveMaximum", KW_NUMBER},
};

int schema_keyword_kind(const char *name) {
    for (size_t i = 0; i < sizeof KEYWORDS / sizeof KEYWORDS[0]; i++)
        if (strcmp(KEYWORDS[i].name, name) == 0) return KEYWORDS[i].kind;
    return -1;
}

static bool is_count_keyword(const char *name) {
    static const char *const COUNTS[] = {"minProperties", "maxProperties", "minItems",
                                         "maxItems",      "minLength",     "maxLength"};
    for (size_t i = 0; i < sizeof COUNTS / sizeof COUNTS[0]; i++)
        if (strcmp(COUNTS[i], name) == 0) return true;
    return false;
}

static int type_bit(const char *name) {
    for (int i = 0; i < 7; i++)
        if (strcmp(TYPE_NAMES[i], name) == 0) return 1 << i;
    return 0;
}

/* The types a "type" value names (checked already), integer included in number. */
int schema_type_mask(const json_t *type) {
    int mask = 0;
    if (json_is_string(type)) mask = type_bit(json_string_value(type));
    for (size_t i = 0; json_is_array(type) && i < json_array_size(type); i++)
        mask |= type_bit(json_string_value(json_array_get(type, i)));
    return mask & T_NUMBER ? mask | T_INTEGER : mask;
}

static bool is_schema(const json_t *v) { return json_is_object(v) || json_is_boolean(v); }

/* Checks one keyword's value; the compilers rely on what is checked here. */
static int check_keyword(SchemaCompiler *sc, const char *key, const json_t *value) {
    if (strcmp(key, "type") == 0) {
        if (json_is_array(value) && json_array_size(value) == 0)
            return schema_fail(sc, "'type' must not be an empty list"), -1;
        for (size_t i = 0; i < (json_is_array(value) ? json_array_size(value) : 1); i++) {
            const json_t *name = json_is_array(value) ? json_array_get(value, i) : value;
            if (!json_is_string(name)) return schema_fail(sc, "'type' must be a string or a list of strings"), -1;
            if (!type_bit(json_string_value(name)))
                return schema_fail(sc, "unknown type '%s' in 'type'", json_string_value(name)), -1;
        }
    } else if (strcmp(key, "enum") == 0) {
        if (!json_is_array(value)) return schema_fail(sc, "'enum' must be a list"), -1;
        if (json_array_size(value) > MAX_ENUM_VALUES)
            return schema_fail(sc, "'enum' has more than %d values", MAX_ENUM_VALUES), -1;
    } else if (!strcmp(key, "anyOf") || !strcmp(key, "oneOf") || !strcmp(key, "allOf") || !strcmp(key, "prefixItems")) {
        if (!json_is_array(value) || json_array_size(value) == 0)
            return schema_fail(sc, "'%s' must be a non-empty list of schemas", key), -1;
        size_t limit = strcmp(key, "prefixItems") == 0 ? MAX_TUPLE_ITEMS : MAX_ALTERNATIVES;
        if (json_array_size(value) > limit) return schema_fail(sc, "'%s' has more than %zu schemas", key, limit), -1;
    } else if (strcmp(key, "$ref") == 0 || strcmp(key, "pattern") == 0 || strcmp(key, "format") == 0) {
        if (!json_is_string(value)) return schema_fail(sc, "'%s' must be a string", key), -1;
    } else if (strcmp(key, "properties") == 0) {
        if (!json_is_object(value)) return schema_fail(sc, "'properties' must be an object"), -1;
        if (json_object_size(value) > MAX_PROPERTIES)
            return schema_fail(sc, "'properties' has more than %d names", MAX_PROPERTIES), -1;
    } else if (strcmp(key, "required") == 0) {
        if (!json_is_array(value) || json_array_size(value) > MAX_PROPERTIES)
            return schema_fail(sc, "'required' must be a list of at most %d names", MAX_PROPERTIES), -1;
        for (size_t i = 0; i < json_array_size(value); i++)
            if (!json_is_string(json_array_get(value, i)))
                return schema_fail(sc, "'required' must be a list of strings"), -1;
    } else if (strcmp(key, "additionalProperties") == 0 || strcmp(key, "additionalItems") == 0) {
        if (!is_schema(value)) return schema_fail(sc, "'%s' must be a schema", key), -1;
    } else if (strcmp(key, "items") == 0) {
        if (!is_schema(value) && !json_is_array(value)) return schema_fail(sc, "'items' must be a schema"), -1;
        if (json_is_array(value) && json_array_size(value) > MAX_TUPLE_ITEMS)
            return schema_fail(sc, "'items' has more than %d schemas", MAX_TUPLE_ITEMS), -1;
    } else if (strcmp(key, "uniqueItems") == 0) {
        if (!json_is_boolean(value)) return schema_fail(sc, "'uniqueItems' must be a boolean"), -1;
        /* A grammar cannot compare items with each other. */
        if (json_is_true(value)) return schema_fail(sc, "unsupported keyword 'uniqueItems' (true)"), -1;
    } else if (is_count_keyword(key)) {
        if (!json_is_number(value) || json_number_value(value) < 0 || json_number_value(value) > INT_MAX ||
            !js_number_is_integral(value))
            return schema_fail(sc, "'%s' must be a whole number from 0 to %d", key, INT_MAX), -1;
    } else if (strcmp(key, "minimum") == 0 || strcmp(key, "maximum") == 0) {
        if (!json_is_number(value)) return schema_fail(sc, "'%s' must be a number", key), -1;
    } else if (strcmp(key, "exclusiveMinimum") == 0 || strcmp(key, "exclusiveMaximum") == 0) {
        if (!json_is_number(value) && !json_is_boolean(value))
            return schema_fail(sc, "'%s' must be a number", key), -1;
    }
    return 0;
}

/* ---- one vocabulary: normalize, merge, schema_flatten ----------------------------------------- */

/* Counts work against MAX_WORK, so that allOf and anyOf multiplying out a
 * hostile schema end in an error rather than minutes of merging. */
bool schema_over_budget(SchemaCompiler *sc, size_t cost) {
    sc->work += (long)(cost < MAX_WORK ? cost : MAX_WORK) + 1;
    if (sc->work <= MAX_WORK) return false;
    schema_fail(sc, "schema too complex (over %d steps after expanding allOf and anyOf)", MAX_WORK);
    return true;
}

/* A new reference to "x and y" as a schema; NULL or true stand for
 * "anything". An x that is only an allOf grows by one part rather than
 * nesting, so that many merges stay one level deep. NULL when out of memory. */
static json_t *all_of2(json_t *x, json_t *y) {
    if (!x || json_is_true(x)) return json_incref(y ? y : json_true());
    if (!y || json_is_true(y)) return json_incref(x);
    json_t *parts = json_object_get(x, "allOf");
    parts = json_object_size(x) == 1 && json_is_array(parts) ? json_copy(parts) : json_pack("[O]", x);
    json_t *schema = json_object();
    if (!parts || !schema || json_array_append(parts, y)) {
        json_decref(schema);
        json_decref(parts);
        return NULL;
    }
    if (json_object_set_new(schema, "allOf", parts)) /* takes parts even when it fails */
        return json_decref(schema), NULL;
    return schema;
}

/* Sets key to a new reference; false when out of memory. */
static bool set_new(json_t *object, const char *key, json_t *value) {
    return value && json_object_set_new(object, key, value) == 0;
}

/* The cross product of two lists of alternatives, each pair as an allOf. */
static json_t *alternatives_product(SchemaCompiler *sc, json_t *a, json_t *b) {
    if (json_array_size(a) * json_array_size(b) > MAX_ALTERNATIVES)
        return schema_fail(sc, "anyOf/oneOf combined through allOf give more than %d alternatives",
                           MAX_ALTERNATIVES),
               NULL;
    json_t *product = json_array();
    for (size_t i = 0; product && i < json_array_size(a); i++)
        for (size_t j = 0; product && j < json_array_size(b); j++)
            if (json_array_append_new(product, all_of2(json_array_get(a, i), json_array_get(b, j)))) {
                json_decref(product);
                product = NULL;
            }
    if (!product) schema_out_of_memory(sc);
    return product;
}

/* A copy of schema (an object) with its keywords checked, annotations
 * dropped, const as a one-value enum, oneOf as anyOf, an items list as
 * prefixItems (additionalItems then being items) and draft-4 boolean
 * exclusiveMinimum/Maximum as numbers. NULL after an error. */
static json_t *normalize(SchemaCompiler *sc, json_t *schema) {
    json_t *out = json_object();
    if (!out) return schema_out_of_memory(sc), NULL;
    const char *key;
    json_t *value;
    json_object_foreach(schema, key, value) {
        int kind = schema_keyword_kind(key);
        if (kind < 0) {
            schema_fail(sc, "unsupported keyword '%s'", key);
            goto fail;
        }
        if (kind == KW_ANNOTATION) continue;
        if (check_keyword(sc, key, value) < 0) goto fail;
        bool later = !strcmp(key, "const") || !strcmp(key, "oneOf") || !strcmp(key, "additionalItems") ||
                     (!strcmp(key, "items") && json_is_array(value)) ||
                     (json_is_boolean(value) && strstr(key, "exclusiveM"));
        if (!later && json_object_set(out, key, value)) goto oom;
    }
    for (int side = 0; side < 2; side++) { /* draft 4: "exclusiveMinimum": true makes minimum exclusive */
        const char *bound = side ? "maximum" : "minimum", *exclusive = side ? "exclusiveMaximum" : "exclusiveMinimum";
        json_t *bound_value = json_object_get(schema, bound);
        if (json_is_true(json_object_get(schema, exclusive)) && bound_value) {
            if (json_object_set(out, exclusive, bound_value)) goto oom;
            json_object_del(out, bound);
        }
    }
    json_t *constant = json_object_get(schema, "const"), *enumeration = json_object_get(out, "enum");
    if (constant) {
        json_t *values = json_array();
        for (size_t i = 0; values && (!enumeration || i < json_array_size(enumeration)); i++) {
            if (enumeration && !json_equal(json_array_get(enumeration, i), constant)) continue;
            if (json_array_append(values, constant)) json_decref(values), values = NULL;
            if (!enumeration) break;
        }
        if (!set_new(out, "enum", values)) goto oom;
    }
    json_t *one_of = json_object_get(schema, "oneOf"), *any_of = json_object_get(out, "anyOf");
    if (one_of) { /* both are read as "any of": the grammar cannot count matching branches */
        json_t *alternatives = any_of ? alternatives_product(sc, any_of, one_of) : json_incref(one_of);
        if (!alternatives) goto fail;
        if (!set_new(out, "anyOf", alternatives)) goto oom;
    }
    json_t *tuple = json_object_get(schema, "items");
    if (json_is_array(tuple)) {
        if (json_object_get(schema, "prefixItems")) {
            schema_fail(sc, "'prefixItems' together with a list in 'items'");
            goto fail;
        }
        json_object_del(out, "items");
        json_t *rest = json_object_get(schema, "additionalItems");
        if (json_object_set(out, "prefixItems", tuple) || (rest && json_object_set(out, "items", rest))) goto oom;
    }
    return out;
oom:
    schema_out_of_memory(sc);
fail:
    json_decref(out);
    return NULL;
}

/* One keyword present in both schemas of an allOf: the stricter value, or
 * NULL with *empty when they exclude each other, or NULL after an error. */
static json_t *merge_keyword(SchemaCompiler *sc, const char *key, json_t *a, json_t *b, bool *empty) {
    if (strcmp(key, "type") == 0) {
        int mask = schema_type_mask(a) & schema_type_mask(b);
        json_t *names = json_array();
        for (int i = 0; names && i < 7; i++) {
            bool covered = (1 << i) == T_INTEGER && (mask & T_NUMBER); /* number says it */
            if ((mask & (1 << i)) && !covered && json_array_append_new(names, json_string(TYPE_NAMES[i])))
                json_decref(names), names = NULL;
        }
        if (names && json_array_size(names) == 0) *empty = true, json_decref(names), names = NULL;
        else if (!names) schema_out_of_memory(sc);
        return names;
    }
    if (strcmp(key, "enum") == 0 || strcmp(key, "required") == 0) {
        bool intersect = key[0] == 'e'; /* values in both enums; names in either required */
        if (json_array_size(a) * json_array_size(b) > 10 * 1000 * 1000)
            return schema_fail(sc, "allOf of two '%s' lists too large to combine", key), NULL;
        json_t *out = intersect ? json_array() : json_copy(a);
        for (size_t j = 0; out && j < json_array_size(b); j++) {
            json_t *v = json_array_get(b, j);
            bool in_a = false;
            for (size_t i = 0; i < json_array_size(a) && !in_a; i++) in_a = json_equal(json_array_get(a, i), v);
            if (in_a == intersect && json_array_append(out, v)) json_decref(out), out = NULL;
        }
        if (!out) return schema_out_of_memory(sc), NULL;
        if (intersect && json_array_size(out) == 0) *empty = true, json_decref(out), out = NULL;
        return out;
    }
    if (strcmp(key, "anyOf") == 0) return alternatives_product(sc, a, b);
    bool keep_larger = !strcmp(key, "minimum") || !strcmp(key, "exclusiveMinimum") ||
                       (is_count_keyword(key) && !strncmp(key, "min", 3));
    bool keep_smaller = !strcmp(key, "maximum") || !strcmp(key, "exclusiveMaximum") ||
                        (is_count_keyword(key) && !strncmp(key, "max", 3));
    if (keep_larger || keep_smaller) {
        int order = js_number_compare(a, b);
        return json_incref((order >= 0) == keep_larger ? a : b);
    }
    if (json_equal(a, b)) return json_incref(a);
    return schema_fail(sc, "allOf with two different values of '%s' is not supported", key), NULL;
}

/* Object keywords of "a and b": a property listed by one schema only must
 * also match the other's additionalProperties, so allOf keeps its meaning. */
static bool merge_object_keywords(json_t *out, json_t *a, json_t *b) {
    json_t *props_a = json_object_get(a, "properties"), *props_b = json_object_get(b, "properties");
    json_t *extra_a = json_object_get(a, "additionalProperties"), *extra_b = json_object_get(b, "additionalProperties");
    if (!props_a && !props_b && !extra_a && !extra_b) return true;
    json_t *props = json_object();
    const char *name;
    size_t name_len;
    json_t *schema;
    for (int side = 0; props && side < 2; side++) {
        json_t *mine = side ? props_b : props_a, *theirs = side ? props_a : props_b;
        json_t *their_extra = side ? extra_a : extra_b;
        json_object_keylen_foreach(mine, name, name_len, schema) {
            json_t *other = theirs ? json_object_getn(theirs, name, name_len) : NULL;
            if (side == 1 && other) continue; /* merged from a's side */
            json_t *merged = side == 0 && other ? all_of2(schema, other) : all_of2(schema, their_extra);
            if (!merged || json_object_setn_new(props, name, name_len, merged)) {
                json_decref(props);
                return false;
            }
        }
    }
    if (!set_new(out, "properties", props)) return false;
    return !(extra_a || extra_b) || set_new(out, "additionalProperties", all_of2(extra_a, extra_b));
}

/* prefixItems/items of "a and b": item i matches both schemas' item i. */
static bool merge_array_keywords(json_t *out, json_t *a, json_t *b) {
    json_t *tuple_a = json_object_get(a, "prefixItems"), *tuple_b = json_object_get(b, "prefixItems");
    json_t *rest_a = json_object_get(a, "items"), *rest_b = json_object_get(b, "items");
    if (!tuple_a && !tuple_b && !rest_a && !rest_b) return true;
    size_t len_a = json_array_size(tuple_a), len_b = json_array_size(tuple_b);
    if (len_a || len_b) {
        json_t *tuple = json_array();
        for (size_t i = 0; tuple && i < (len_a > len_b ? len_a : len_b); i++) {
            json_t *item_a = i < len_a ? json_array_get(tuple_a, i) : rest_a;
            json_t *item_b = i < len_b ? json_array_get(tuple_b, i) : rest_b;
            if (json_array_append_new(tuple, all_of2(item_a, item_b))) json_decref(tuple), tuple = NULL;
        }
        if (!set_new(out, "prefixItems", tuple)) return false;
    }
    return !(rest_a || rest_b) || set_new(out, "items", all_of2(rest_a, rest_b));
}

/* "a and b" for two flattened schemas; a new reference, json_false() when
 * they exclude each other, NULL after an error. */
json_t *schema_merge_pair(SchemaCompiler *sc, json_t *a, json_t *b) {
    if (json_is_false(a) || json_is_false(b)) return json_false();
    size_t cost = json_object_size(a) + json_object_size(b);
    static const char *const SIZED[] = {"properties", "enum", "required", "anyOf", "prefixItems"};
    for (size_t i = 0; i < 5; i++) {
        json_t *va = json_object_get(a, SIZED[i]), *vb = json_object_get(b, SIZED[i]);
        cost += json_object_size(va) + json_object_size(vb) + json_array_size(va) + json_array_size(vb);
        if (i == 1 || i == 2) cost += json_array_size(va) * json_array_size(vb) / 16; /* compared pairwise */
    }
    if (schema_over_budget(sc, cost)) return NULL;
    json_t *out = json_copy(a);
    if (!out) return schema_out_of_memory(sc), NULL;
    static const char *const JOINT[] = {"properties", "additionalProperties", "prefixItems", "items"};
    for (size_t i = 0; i < 4; i++) json_object_del(out, JOINT[i]);
    const char *key;
    json_t *vb;
    json_object_foreach(b, key, vb) {
        bool joint = false;
        for (size_t i = 0; i < 4; i++) joint |= strcmp(key, JOINT[i]) == 0;
        json_t *va = json_object_get(out, key);
        if (joint) continue;
        bool empty = false;
        json_t *merged = va ? merge_keyword(sc, key, va, vb, &empty) : json_incref(vb);
        if (empty) return json_decref(out), json_false();
        if (!merged) return json_decref(out), NULL;
        if (json_object_set_new(out, key, merged)) return json_decref(out), schema_out_of_memory(sc), NULL;
    }
    if (!merge_object_keywords(out, a, b) || !merge_array_keywords(out, a, b))
        return json_decref(out), schema_out_of_memory(sc), NULL;
    return out;
}

static int hex_value(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* The schema a "#..." $ref names, or NULL after an error. */
json_t *schema_resolve_ref(SchemaCompiler *sc, const json_t *ref) {
    const char *text = json_string_value(ref);
    size_t len = json_string_length(ref);
    if (len == 0 || text[0] != '#' || (len > 1 && text[1] != '/'))
        return schema_fail(sc, "$ref '%s' is not supported: only '#' and '#/...' pointers into this schema",
                           text),
               NULL;
    /* A URI fragment: %XX escapes first, then the JSON pointer's ~1 and ~0 in each segment. */
    char *pointer = malloc(len + 1);
    if (!pointer) return schema_out_of_memory(sc), NULL;
    size_t n = 0;
    for (size_t i = 1; i < len; i++) {
        int high = i + 2 < len ? hex_value(text[i + 1]) : -1, low = i + 2 < len ? hex_value(text[i + 2]) : -1;
        if (text[i] == '%' && high >= 0 && low >= 0) {
            pointer[n++] = (char)(high * 16 + low);
            i += 2;
        } else {
            pointer[n++] = text[i];
        }
    }
    json_t *node = (json_t *)sc->root;
    for (size_t start = 0; node && start < n;) {
        size_t end = start + 1, seg_len = 0;
        char *segment = pointer + start + 1; /* unescaped in place: it only shrinks */
        for (; end < n && pointer[end] != '/'; end++) {
            char c = pointer[end];
            if (c == '~' && end + 1 < n && (pointer[end + 1] == '0' || pointer[end + 1] == '1'))
                c = pointer[++end] == '0' ? '~' : '/';
            segment[seg_len++] = c;
        }
        if (json_is_object(node)) {
            node = json_object_getn(node, segment, seg_len);
        } else if (json_is_array(node) && seg_len > 0 && seg_len < 10 && (segment[0] != '0' || seg_len == 1) &&
                   strspn(segment, "0123456789") >= seg_len) {
            node = json_array_get(node, strtoul(segment, NULL, 10));
        } else {
            node = NULL;
        }
        start = end;
    }
    free(pointer);
    if (!node) return schema_fail(sc, "$ref '%s' points at nothing in the schema", text), NULL;
    return node;
}

/* The schema as one object without allOf or $ref (both intersected into it),
 * normalized; json_false() when it matches nothing; NULL after an error. */
json_t *schema_flatten(SchemaCompiler *sc, json_t *schema, int chain_depth) {
    if (json_is_boolean(schema)) return json_is_true(schema) ? json_object() : json_false();
    if (!json_is_object(schema)) return schema_fail(sc, "a schema must be an object or a boolean"), NULL;
    if (chain_depth > MAX_DEPTH)
        return schema_fail(sc, "allOf/$ref nested more than %d deep (a $ref cycle?)", MAX_DEPTH), NULL;
    if (schema_over_budget(sc, json_object_size(schema))) return NULL;
    json_t *flat = normalize(sc, schema);
    if (!flat) return NULL;
    json_t *ref = json_object_get(flat, "$ref"), *all_of = json_object_get(flat, "allOf");
    json_incref(ref);
    json_incref(all_of);
    json_object_del(flat, "$ref");
    json_object_del(flat, "allOf");
    size_t num_parts = (ref ? 1 : 0) + json_array_size(all_of);
    for (size_t i = 0; flat && !json_is_false(flat) && i < num_parts; i++) {
        json_t *part_schema = ref && i == 0 ? schema_resolve_ref(sc, ref) : json_array_get(all_of, i - (ref ? 1 : 0));
        json_t *part = part_schema ? schema_flatten(sc, part_schema, chain_depth + 1) : NULL;
        json_t *merged = part ? schema_merge_pair(sc, flat, part) : NULL;
        json_decref(part);
        json_decref(flat);
        flat = merged;
    }
    json_decref(ref);
    json_decref(all_of);
    return flat;
}
