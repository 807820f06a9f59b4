// What session_bench's sections share: flags, model shapes and the section entry points (what each
// measures: session_bench.cc).
#pragma once

#include <cstdint>
#include <string>

#include "tests/bench/session_bench_util.h"

namespace attnserve::bench {

struct Flags {
  int reps = 15;       // section 1 repetitions
  int ttft_reps = 20;  // section 2 samples per row
  std::string sections = "123";
  int kv16k_layers = 0;  // layers of the 16k KV-cache rows; 0: the shape's own
  int drain_sessions = 256;
  std::string redis_server = "/usr/bin/redis-server";
  std::string tmp;      // scratch directory for dir: stores; empty: a new one under /tmp
  std::string modules;  // section 1: only modules whose name contains this
  int64_t context = 0;  // section 1: only this context (1024 or 16384); 0: both
  int codec_reps = -1;  // section 1b repetitions; -1: reps (0 skips 1b, e.g. to profile)
};

// The shape of section 1 and 2: taylor order 2 holds C(32+2, 2) = 561 features x 32 values (+1
// normaliser column) x 8 heads x 4 B x 6 layers = 3.55 MB per session.
inline constexpr Shape kBig = {
    "big: dim 256, 6 layers, 8 heads x 32", 256, 6, 8, 32, 768, 16384 + 1024};
inline constexpr Shape kMid = {"mid: dim 128, 4 layers, 4 heads x 32", 128, 4, 4, 32, 384, 4096};
inline constexpr Shape kTiny = {
    "shipped kjv-taylor2: dim 64, 2 layers, 4 heads x 16", 64, 2, 4, 16, 192, 65536};

// Section 1: ExportSession, ImportSession, ForkSession per module at 1k and 16k, then the codec's
// pieces in process. `memcpy_bytes_per_second` scales the "bytes/bw" column.
void RunTransfer(const Flags& flags, double memcpy_bytes_per_second);
// Section 2: TTFT on in-memory, imported, loaded and evicted sessions; dir: stores go under `tmp`.
void RunTtft(const Flags& flags, const std::string& tmp, RedisServer& redis);
// Section 3: Shutdown(0) draining flags.drain_sessions sessions to a dir: store and Redis.
void RunDrain(const Flags& flags, const std::string& tmp, RedisServer& redis);

}  // namespace attnserve::bench
