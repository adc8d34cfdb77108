/*
 * cpu_state_pool.c - slots and checkpoints of recurrent state (see
 * cpu_state_pool.h).
 */
#include "cpu_state_pool.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "cpu_gated_deltanet.h"
#include "base/log.h"

GdnShape cpu_state_gdn_shape(const ModelConfig *c) {
    return (GdnShape){c->linear_num_k_heads, c->linear_num_v_heads, c->linear_k_dim, c->linear_v_dim,
                      c->linear_conv_kernel, (float)c->rms_norm_eps, c->linear_value_heads_tiled};
}

size_t cpu_state_unit_bytes(const ModelConfig *cfg) {
    if (!cfg->hybrid || cfg->num_linear_layers == 0) return 0;
    GdnShape s = cpu_state_gdn_shape(cfg);
    return sizeof(float) * (size_t)cfg->num_linear_layers *
           (gdn_conv_state_floats(&s) + gdn_recurrent_state_floats(&s));
}

int cpu_state_pool_init(CpuStatePool *p, const ModelConfig *cfg, int num_slots, int num_checkpoints,
                        Error *err) {
    memset(p, 0, sizeof *p);
    GdnShape s = cpu_state_gdn_shape(cfg);
    p->num_slots = num_slots;
    p->num_checkpoints = num_checkpoints;
    p->conv_floats = gdn_conv_state_floats(&s);
    p->recurrent_floats = gdn_recurrent_state_floats(&s);
    p->unit_floats = (size_t)cfg->num_linear_layers * (p->conv_floats + p->recurrent_floats);
    p->bytes = sizeof(float) * p->unit_floats * (size_t)(num_slots + num_checkpoints);
    void *m = mmap(NULL, p->bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                   -1, 0);
    if (m == MAP_FAILED) {
        error_set(err, "cannot reserve %zu bytes of recurrent state: %s", p->bytes, strerror(errno));
        p->bytes = 0;
        return -1;
    }
    p->memory = m;
    /* Unlike a KV block, a slot is read and written whole every step of its
     * sequence: huge pages save the TLB misses of ~5000 4 KiB pages a token
     * (0.8B shape); failing that, small pages still work. */
    if (madvise(m, p->bytes, MADV_HUGEPAGE) != 0 && getenv("NANOVLLM_VERBOSE"))
        log_info("recurrent state: no huge pages (%s)", strerror(errno));
    return 0;
}

void cpu_state_pool_free(CpuStatePool *p) {
    if (p->memory) munmap(p->memory, p->bytes);
    memset(p, 0, sizeof *p);
}

static float *unit(const CpuStatePool *p, int u) { return p->memory + (size_t)u * p->unit_floats; }

float *cpu_state_layer(const CpuStatePool *p, int slot, int layer) {
    return unit(p, slot) + (size_t)layer * (p->conv_floats + p->recurrent_floats);
}

void cpu_state_restore(CpuStatePool *p, int slot, int checkpoint) {
    memcpy(unit(p, slot), unit(p, p->num_slots + checkpoint), sizeof(float) * p->unit_floats);
}

void cpu_state_save(CpuStatePool *p, int slot, int checkpoint) {
    memcpy(unit(p, p->num_slots + checkpoint), unit(p, slot), sizeof(float) * p->unit_floats);
}
