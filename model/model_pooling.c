/*
 * model_pooling.c - modules.json and 1_Pooling/config.json -> ModelPooling
 * (see model_pooling.h), as sentence-transformers reads them: the modules
 * are identified by their "type" (sentence_transformers.models.Pooling,
 * ...Normalize), the Pooling module's settings sit in its "path" folder;
 * and a GGUF file's pooling_type key, llama.cpp's record of the same.
 */
#include "model_pooling.h"

#include <jansson.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

static bool type_is(const char *type, const char *name) {
    if (!type) return false;
    const char *dot = strrchr(type, '.');
    return strcmp(dot ? dot + 1 : type, name) == 0;
}

/* pooling_mode_* keys: the three implemented, then the ones refused by name. */
static int read_pooling_config(ModelPooling *p, const char *path, Error *err) {
    json_error_t jerr;
    json_t *doc = json_load_file(path, 0, &jerr);
    if (!doc || !json_is_object(doc)) {
        json_decref(doc);
        return error_set(err, "%s: not a JSON object (%s)", path, jerr.text);
    }
    static const struct {
        const char *key;
        PoolingMode mode;
    } known[] = {{"pooling_mode_lasttoken", POOLING_LAST},
                 {"pooling_mode_mean_tokens", POOLING_MEAN},
                 {"pooling_mode_cls_token", POOLING_CLS}};
    int rc = 0, set = 0;
    const char *key;
    json_t *v;
    json_object_foreach(doc, key, v) {
        if (strncmp(key, "pooling_mode", 12) != 0 || !json_is_true(v)) continue;
        PoolingMode mode = POOLING_NONE;
        for (size_t i = 0; i < sizeof known / sizeof known[0]; i++)
            if (strcmp(key, known[i].key) == 0) mode = known[i].mode;
        if (mode == POOLING_NONE) {
            rc = error_set(err, "%s: '%s' is not supported (pooling: lasttoken, mean_tokens or cls_token)",
                           path, key);
            break;
        }
        if (set++) {
            rc = error_set(err, "%s: more than one pooling_mode_* is true ('%s' and another); "
                                "concatenated poolings are not supported", path, key);
            break;
        }
        p->mode = mode;
    }
    if (rc == 0 && set == 0) rc = error_set(err, "%s: no pooling_mode_* is true", path);
    json_decref(doc);
    return rc;
}

int model_pooling_load(ModelPooling *p, const char *model_dir, Error *err) {
    *p = (ModelPooling){POOLING_NONE, false, false};
    char path[4096];
    struct stat st;
    snprintf(path, sizeof path, "%s/modules.json", model_dir);
    if (stat(path, &st) != 0) return 0;
    json_error_t jerr;
    json_t *doc = json_load_file(path, 0, &jerr);
    if (!doc || !json_is_array(doc)) {
        json_decref(doc);
        return error_set(err, "%s: not a JSON list of modules (%s)", path, doc ? "" : jerr.text);
    }
    int rc = 0;
    size_t i;
    json_t *m;
    json_array_foreach(doc, i, m) {
        const char *type = json_string_value(json_object_get(m, "type"));
        if (type_is(type, "Normalize")) p->normalize = true;
        if (!type_is(type, "Pooling") || p->from_folder) continue;
        const char *sub = json_string_value(json_object_get(m, "path"));
        char cfg[4096];
        if (snprintf(cfg, sizeof cfg, "%s/%s%sconfig.json", model_dir, sub ? sub : "",
                     sub && sub[0] ? "/" : "") >= (int)sizeof cfg) {
            rc = error_set(err, "%s: the Pooling module's path is too long", path);
            break;
        }
        p->from_folder = true;
        if ((rc = read_pooling_config(p, cfg, err))) break;
    }
    json_decref(doc);
    return rc;
}

int model_pooling_from_gguf(ModelPooling *p, const Gguf *g, Error *err) {
    *p = (ModelPooling){POOLING_NONE, false, false};
    GgufString arch;
    if (gguf_get_string(g, "general.architecture", &arch, err)) return -1;
    char key[96];
    snprintf(key, sizeof key, "%.*s.pooling_type", (int)(arch.len < 64 ? arch.len : 64), arch.p);
    if (!gguf_find_kv(g, key)) return 0;
    uint32_t type;
    if (gguf_get_u32(g, key, &type, err)) return -1;
    static const PoolingMode modes[] = {POOLING_NONE, POOLING_MEAN, POOLING_CLS, POOLING_LAST};
    if (type == 4)
        return error_set(err, "metadata key '%s' = 4 (rank): a reranker; not supported (embeddings: mean, "
                              "cls or last pooling)", key);
    if (type >= sizeof modes / sizeof modes[0])
        return error_set(err, "metadata key '%s' = %u is not a pooling type (0 none, 1 mean, 2 cls, 3 last)",
                         key, type);
    if (modes[type] != POOLING_NONE) *p = (ModelPooling){modes[type], true, true};
    return 0;
}

const char *pooling_mode_name(PoolingMode m) {
    switch (m) {
    case POOLING_LAST: return "last";
    case POOLING_MEAN: return "mean";
    case POOLING_CLS: return "cls";
    default: return "none";
    }
}
