// FUZZ_CHECK: a crash-with-message check that works in a libFuzzer binary (no GoogleTest
// runner), for the fuzz targets' invariants.
#pragma once

#include <cstdio>
#include <cstdlib>

// A violated invariant: print it and abort, which libFuzzer reports as a crash and
// saves the input.
#define FUZZ_CHECK(cond, ...)                                              \
  do {                                                                     \
    if (!(cond)) {                                                         \
      std::fprintf(stderr, "%s:%d: FUZZ_CHECK(%s) failed: ", __FILE__,     \
                   __LINE__, #cond);                                       \
      std::fprintf(stderr, __VA_ARGS__);                                   \
      std::fprintf(stderr, "\n");                                          \
      std::abort();                                                        \
    }                                                                      \
  } while (0)
