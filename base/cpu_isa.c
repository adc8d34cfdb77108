/*
 * cpu_isa.c - run-time SIMD level selection (see cpu_isa.h).
 */
#include "cpu_isa.h"

#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__)
#include <sys/syscall.h>
#include <unistd.h>

#define ARCH_REQ_XCOMP_PERM 0x1023
#define XFEATURE_XTILEDATA 18

static int amx_state = -1; /* -1 unknown, 0 no, 1 yes */

bool amx_available(void) {
    if (amx_state < 0) {
        __builtin_cpu_init();
        bool cpu = __builtin_cpu_supports("amx-bf16") && __builtin_cpu_supports("amx-tile") &&
                   __builtin_cpu_supports("avx512bf16");
        /* Linux hands out the 8 KiB of tile state only on request. */
        amx_state = cpu && syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) == 0;
    }
    return amx_state == 1;
}
#else
bool amx_available(void) { return false; }
#endif

bool cpu_isa_byte_lookup(CpuIsa isa) {
#if defined(__x86_64__)
    static int vbmi = -1;
    if (vbmi < 0) {
        __builtin_cpu_init();
        vbmi = __builtin_cpu_supports("avx512vbmi") ? 1 : 0;
    }
    return isa >= CPU_ISA_AVX512_BF16 && vbmi;
#else
    (void)isa;
    return false;
#endif
}

static int active = -1;

CpuIsa cpu_isa_detect(void) {
#if defined(__x86_64__)
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx512vl"))
        return amx_available()                         ? CPU_ISA_AMX
               : __builtin_cpu_supports("avx512bf16") && __builtin_cpu_supports("avx512vnni")
                   ? CPU_ISA_AVX512_BF16
                                                      : CPU_ISA_AVX512;
    /* F16C (the fp8 KV cache's widening) came before AVX2 on every x86 CPU;
     * asked anyway, as a VM may hide it. */
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
        __builtin_cpu_supports("f16c"))
        return CPU_ISA_AVX2;
#endif
    return CPU_ISA_SCALAR;
}

int cpu_isa_set(CpuIsa isa) {
    if (isa > cpu_isa_detect()) return -1;
    active = (int)isa;
    return 0;
}

CpuIsa cpu_isa_active(void) {
    if (active < 0) {
        CpuIsa isa = cpu_isa_detect();
        const char *env = getenv("NANOVLLM_CPU_ISA");
        if (env) {
            for (int i = CPU_ISA_SCALAR; i <= CPU_ISA_AMX; i++)
                if (strcmp(env, cpu_isa_name((CpuIsa)i)) == 0 && i < (int)isa) isa = (CpuIsa)i;
        }
        active = (int)isa;
    }
    return (CpuIsa)active;
}

const char *cpu_isa_name(CpuIsa isa) {
    switch (isa) {
    case CPU_ISA_AMX: return "amx";
    case CPU_ISA_AVX512_BF16: return "avx512bf16";
    case CPU_ISA_AVX512: return "avx512";
    case CPU_ISA_AVX2: return "avx2";
    default: return "scalar";
    }
}
