// ATTNSERVE_CLONES: the build targets baseline x86-64 (SSE2) so binaries run anywhere; the
// hot loops marked with it are cloned for AVX2 and AVX-512 and the best clone is picked
// at load time (a GCC ifunc). Not under the sanitizers: an ifunc resolver runs while the
// dynamic loader relocates, before a sanitizer runtime is up, and instrumented it crashes.
#pragma once

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && \
    !defined(__SANITIZE_THREAD__) && !defined(__SANITIZE_ADDRESS__)
#define ATTNSERVE_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define ATTNSERVE_CLONES
#endif
