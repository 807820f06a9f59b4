// Opens libattnserve_sentencepiece.so once (sentencepiece_backend.h says why).
#include "server/tokenizer/sentencepiece_backend.h"

#include <dlfcn.h>
#include <unistd.h>

#include <mutex>

namespace attnserve::tokenizer::internal {
namespace {

constexpr char kModuleName[] = "libattnserve_sentencepiece.so";

// The directory of the running executable, with a trailing '/'; empty if unknown.
std::string ExecutableDir() {
  char path[4096];
  const ssize_t n = readlink("/proc/self/exe", path, sizeof(path) - 1);
  if (n <= 0) return "";
  const std::string exe(path, size_t(n));
  return exe.substr(0, exe.rfind('/') + 1);
}

struct Module {
  SentencePieceLoadFn load = nullptr;
  std::string error;
};

const Module& OpenModule() {
  static const Module* module = [] {
    auto* m = new Module();
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
    m->error = "SentencePiece is not available in sanitizer builds: its module needs "
               "RTLD_DEEPBIND, which the sanitizer runtimes do not support";
    return m;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
    m->error = "SentencePiece is not available in sanitizer builds: its module needs "
               "RTLD_DEEPBIND, which the sanitizer runtimes do not support";
    return m;
#endif
#endif
    // The build tree's copy, then beside the executable, then ../lib/attnserve/ (an
    // installed layout such as the container's).
    const std::string dir = ExecutableDir();
    const std::string candidates[] = {ATTNSERVE_SENTENCEPIECE_MODULE, dir + kModuleName,
                                      dir + "../lib/attnserve/" + kModuleName};
    std::string tried;
    for (const std::string& path : candidates) {
      if (access(path.c_str(), R_OK) != 0) {
        tried += (tried.empty() ? "" : ", ") + path;
        continue;
      }
      void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL | RTLD_DEEPBIND);
      if (handle == nullptr) {
        m->error = std::string("cannot load ") + path + ": " + dlerror();
        return m;
      }
      m->load = reinterpret_cast<SentencePieceLoadFn>(dlsym(handle, kSentencePieceLoadSymbol));
      if (m->load == nullptr) m->error = path + ": no " + kSentencePieceLoadSymbol;
      return m;
    }
    m->error = std::string("cannot find ") + kModuleName + " (tried " + tried + ")";
    return m;
  }();
  return *module;
}

}  // namespace

bool SentencePieceBackend::Available(std::string* why) {
  const Module& module = OpenModule();
  if (module.load == nullptr) *why = module.error;
  return module.load != nullptr;
}

std::unique_ptr<SentencePieceBackend> SentencePieceBackend::Load(std::string_view serialized,
                                                                 std::string* error) {
  const Module& module = OpenModule();
  if (module.load == nullptr) {
    *error = module.error;
    return nullptr;
  }
  return std::unique_ptr<SentencePieceBackend>(
      module.load(serialized.data(), serialized.size(), error));
}

}  // namespace attnserve::tokenizer::internal
