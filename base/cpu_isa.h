/*
 * cpu_isa.h - which SIMD instruction set the CPU kernels use.
 *
 * The binary is built for baseline x86-64 (or any other target) so it runs
 * on every CI and user machine; kernels for AVX2 and AVX-512 are compiled
 * with per-function target attributes and chosen here at run time.
 * NANOVLLM_CPU_ISA=scalar|avx2|avx512|avx512bf16|amx forces a lower level (tests use it to
 * check every path against the portable one).
 */
#ifndef NANOVLLM_CPU_ISA_H
#define NANOVLLM_CPU_ISA_H

#include <stdbool.h>

/* Ordered: each level has everything below it. AVX512_BF16 adds vdpbf16ps
 * (bf16 dot products) and AVX512-VNNI's vpdpbusd (8-bit dot products):
 * Zen 4, Cooper Lake and later Intel, which have both. AMX means all of
 * that plus AMX-BF16 tiles that the kernel agreed to hand out (amx_available).
 * AVX2 includes FMA and F16C (half <-> float, which every AVX2 CPU has). */
typedef enum CpuIsa {
    CPU_ISA_SCALAR,
    CPU_ISA_AVX2,
    CPU_ISA_AVX512,
    CPU_ISA_AVX512_BF16,
    CPU_ISA_AMX
} CpuIsa;

/* The best level this CPU supports (ignores the environment). */
CpuIsa cpu_isa_detect(void);

/* The level in use: the environment override if set and supported, else detected. */
CpuIsa cpu_isa_active(void);

/* Sets the level in use; returns -1 (leaving it unchanged) if the CPU lacks it. */
int cpu_isa_set(CpuIsa isa);

const char *cpu_isa_name(CpuIsa isa);

/* AMX-BF16 present and tile state granted by the kernel (asked once). */
bool amx_available(void);

/* Whether `isa` may run the kernels that widen fp8 bytes by 128-entry
 * table lookups (vpermi2b): AVX512-BF16 or above on a CPU with
 * AVX512-VBMI (Zen 4, Sapphire Rapids). Tied to a level so that the level
 * below runs the other kernels on the same CPU (the tests compare them). */
bool cpu_isa_byte_lookup(CpuIsa isa);

#endif
