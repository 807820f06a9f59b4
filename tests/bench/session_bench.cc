// session_bench: what moving a session costs on this machine, end to end over gRPC on loopback
// against an in-process AttnServer. Prints tables; asserts nothing; not a ctest test. Usage:
// tests/bench/run.sh session [build-dir] [--flag=value ...] (flags: --help).
//
//   1. ExportSession, ImportSession and ForkSession: time and bytes per session for each
//      attention module at contexts 1k and 16k, then the snapshot codec's pieces timed in
//      process on the same snapshots (session_bench_transfer.cc).
//   2. Time to first token of a one-token turn on a session in memory vs one loaded from a
//      dir: or redis:// store, after a restart and evicted under a full budget.
//   3. Drain: AttnServer::Shutdown(0) writing 256 sessions to each store (2 and 3:
//      session_bench_stores.cc).
//
// Every model is built here with untrained weights (the figures do not depend on them).
#include "tests/bench/session_bench.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <functional>
#include <map>

#include "absl/strings/str_join.h"

namespace attnserve::bench {
namespace {

constexpr const char* kUsage =
    "usage: session_bench [--reps=15] [--ttft_reps=20] [--sections=123] [--kv16k_layers=N]\n"
    "                     [--drain_sessions=256] [--redis_server=/usr/bin/redis-server]\n"
    "                     [--tmp=DIR] [--modules=SUBSTRING] [--context=1024|16384]\n"
    "                     [--codec_reps=N]\n";

// --name=value flags (see Flags); anything else prints the usage and exits.
Flags ParseFlags(int argc, char** argv) {
  Flags f;
  using Setter = std::function<void(const std::string&)>;
  const std::map<std::string, Setter> setters = {
      {"--reps", [&](const std::string& v) { f.reps = std::stoi(v); }},
      {"--ttft_reps", [&](const std::string& v) { f.ttft_reps = std::stoi(v); }},
      {"--sections", [&](const std::string& v) { f.sections = v; }},
      {"--kv16k_layers", [&](const std::string& v) { f.kv16k_layers = std::stoi(v); }},
      {"--drain_sessions", [&](const std::string& v) { f.drain_sessions = std::stoi(v); }},
      {"--redis_server", [&](const std::string& v) { f.redis_server = v; }},
      {"--tmp", [&](const std::string& v) { f.tmp = v; }},
      {"--modules", [&](const std::string& v) { f.modules = v; }},
      {"--context", [&](const std::string& v) { f.context = std::stoll(v); }},
      {"--codec_reps", [&](const std::string& v) { f.codec_reps = std::stoi(v); }},
  };
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    const size_t eq = arg.find('=');
    auto setter = setters.find(arg.substr(0, eq));
    if (setter == setters.end() || eq == arg.npos) {
      std::fprintf(stderr, "%s", kUsage);
      std::exit(arg == "--help" || arg == "-h" ? 0 : 2);
    }
    setter->second(arg.substr(eq + 1));
  }
  return f;
}

std::string Now() {
  char text[64];
  const std::time_t now = std::time(nullptr);
  std::strftime(text, sizeof text, "%Y-%m-%d %H:%M:%S %Z", std::localtime(&now));
  return text;
}

std::string CpuModel() {
  FILE* f = std::fopen("/proc/cpuinfo", "r");
  if (f == nullptr) return "unknown CPU";
  char line[512];
  std::string model = "unknown CPU";
  while (std::fgets(line, sizeof line, f)) {
    std::string s = line;
    if (s.rfind("model name", 0) == 0) {
      model = s.substr(s.find(':') + 2);
      model.pop_back();
      break;
    }
  }
  std::fclose(f);
  return model;
}

// The 1, 5 and 15 minute load averages: other work on a shared machine shows up here.
std::string LoadAverage() {
  double load[3] = {0, 0, 0};
  if (getloadavg(load, 3) != 3) return "unknown";
  return Format("%.2f %.2f %.2f", load[0], load[1], load[2]);
}

int Main(int argc, char** argv) {
  const Flags flags = ParseFlags(argc, argv);
  const auto start = Clock::now();
  std::vector<std::string> args(argv, argv + argc);
  std::printf("# session_bench\n\n");
  std::printf("command: %s\ndate: %s\nmachine: %s, %ld CPUs online; build %s\nload average: %s\n",
              absl::StrJoin(args, " ").c_str(), Now().c_str(), CpuModel().c_str(),
              sysconf(_SC_NPROCESSORS_ONLN), ATTNSERVE_BUILD_TYPE, LoadAverage().c_str());
  const double bandwidth = MemcpyBytesPerSecond(size_t{64} << 20, 15);
  std::printf(
      "memcpy bandwidth: %.2f GB/s (median of 15 copies of 64 MiB, both buffers touched first)\n",
      bandwidth / 1e9);
  std::fflush(stdout);

  std::string tmp = flags.tmp;
  if (tmp.empty()) {
    char templ[] = "/tmp/session_bench.XXXXXX";
    if (mkdtemp(templ) == nullptr) CheckOk(absl::UnavailableError("mkdtemp"), "scratch dir");
    tmp = templ;
  }
  const bool needs_redis = flags.sections.find_first_of("23") != std::string::npos;
  std::unique_ptr<RedisServer> redis;
  if (needs_redis) redis = Must(RedisServer::Start(flags.redis_server), "starting redis");

  if (flags.sections.find('1') != std::string::npos) RunTransfer(flags, bandwidth);
  if (flags.sections.find('2') != std::string::npos) RunTtft(flags, tmp, *redis);
  if (flags.sections.find('3') != std::string::npos) RunDrain(flags, tmp, *redis);

  redis.reset();
  if (flags.tmp.empty()) std::filesystem::remove_all(tmp);
  std::printf("\ntotal run time: %.0f s; load average at the end: %s\n", MsSince(start) / 1e3,
              LoadAverage().c_str());
  return 0;
}

}  // namespace
}  // namespace attnserve::bench

int main(int argc, char** argv) { return attnserve::bench::Main(argc, argv); }
