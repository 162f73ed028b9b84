/*
 * isa_mask: run any program as if the CPU lacked AVX-512 (or AVX2 too), so that ladder and its
 * peers (onnxruntime's MLAS, XLA, tract) pick the same kernels they would on a machine without
 * them, side by side on one machine. Loaded with LD_PRELOAD; needs Linux's CPUID faulting
 * (`cpuid_fault` in /proc/cpuinfo): the constructor makes CPUID trap for this process and the
 * threads it starts, and the SIGSEGV handler runs the real instruction and clears the feature
 * bits of the levels above ISA_MASK before returning the result.
 *
 *   ISA_MASK=avx2    no AVX-512 (any of its extensions)
 *   ISA_MASK=sse4.1  no AVX-512, AVX2, AVX, FMA or F16C either
 *
 * Build: cc -O2 -shared -fPIC -o isa_mask.so isa_mask.c
 * Use:   ISA_MASK=avx2 LD_PRELOAD=$PWD/isa_mask.so python3 bench_ort.py
 *
 * CPUID faulting ends at execve (a child started through exec sees the real CPU). Code that
 * read CPUID before the constructor ran (the dynamic loader's and libc's own dispatch, such as
 * memcpy's) keeps what it read.
 */
#define _GNU_SOURCE
#include <asm/prctl.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <ucontext.h>
#include <unistd.h>

static int level; /* 1: no AVX-512; 2: no AVX either */

static long arch_prctl(int code, unsigned long arg) { return syscall(SYS_arch_prctl, code, arg); }

static void real_cpuid(uint32_t leaf, uint32_t sub, uint32_t r[4]) {
    __asm__ volatile("cpuid" : "=a"(r[0]), "=b"(r[1]), "=c"(r[2]), "=d"(r[3]) : "a"(leaf), "c"(sub));
}

static void mask(uint32_t leaf, uint32_t sub, uint32_t r[4]) {
    if (leaf == 7 && sub == 0) {
        /* EBX: avx512f 16, dq 17, ifma 21, pf 26, er 27, cd 28, bw 30, vl 31 */
        r[1] &= ~((1u << 16) | (1u << 17) | (1u << 21) | (1u << 26) | (1u << 27) | (1u << 28) |
                  (1u << 30) | (1u << 31));
        /* ECX: vbmi 1, vbmi2 6, gfni-evex stays, vnni 11, bitalg 12, vpopcntdq 14 */
        r[2] &= ~((1u << 1) | (1u << 6) | (1u << 11) | (1u << 12) | (1u << 14));
        /* EDX: 4vnniw 2, 4fmaps 3, vp2intersect 8, fp16 23 */
        r[3] &= ~((1u << 2) | (1u << 3) | (1u << 8) | (1u << 23));
        if (level >= 2)
            r[1] &= ~(1u << 5); /* avx2 */
    }
    if (leaf == 7 && sub == 1)
        r[0] &= ~(1u << 5); /* avx512_bf16 */
    if (leaf == 1 && level >= 2)
        r[2] &= ~((1u << 28) | (1u << 12) | (1u << 29)); /* avx, fma, f16c */
}

static void on_segv(int sig, siginfo_t *info, void *ctx) {
    ucontext_t *uc = ctx;
    greg_t *g = uc->uc_mcontext.gregs;
    const unsigned char *ip = (const unsigned char *)g[REG_RIP];
    (void)info;
    if (ip[0] != 0x0f || ip[1] != 0xa2) {
        signal(sig, SIG_DFL); /* a real fault: fault again, unhandled */
        return;
    }
    uint32_t r[4], leaf = (uint32_t)g[REG_RAX], sub = (uint32_t)g[REG_RCX];
    arch_prctl(ARCH_SET_CPUID, 1);
    real_cpuid(leaf, sub, r);
    arch_prctl(ARCH_SET_CPUID, 0);
    mask(leaf, sub, r);
    g[REG_RAX] = r[0];
    g[REG_RBX] = r[1];
    g[REG_RCX] = r[2];
    g[REG_RDX] = r[3];
    g[REG_RIP] += 2;
}

__attribute__((constructor)) static void isa_mask_init(void) {
    const char *want = getenv("ISA_MASK");
    if (!want || !*want)
        want = "avx2";
    if (!strcmp(want, "avx2"))
        level = 1;
    else if (!strcmp(want, "sse4.1"))
        level = 2;
    else {
        fprintf(stderr, "isa_mask: ISA_MASK=%s: expected avx2 or sse4.1\n", want);
        exit(2);
    }
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_segv;
    sa.sa_flags = SA_SIGINFO | SA_NODEFER;
    sigaction(SIGSEGV, &sa, NULL);
    if (arch_prctl(ARCH_SET_CPUID, 0) != 0) {
        perror("isa_mask: arch_prctl(ARCH_SET_CPUID) (no cpuid_fault on this CPU?)");
        exit(2);
    }
}
