// SHA-256 through OpenSSL's EVP interface, for model fingerprints.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

namespace attnserve {

using Sha256Digest = std::array<uint8_t, 32>;

// Incremental hashing: Update any number of times, then Finish once.
class Sha256 {
 public:
  Sha256();
  ~Sha256();
  Sha256(const Sha256&) = delete;
  Sha256& operator=(const Sha256&) = delete;

  void Update(const void* data, size_t size);
  void Update(std::string_view bytes) { Update(bytes.data(), bytes.size()); }
  Sha256Digest Finish();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Lowercase hex of a digest; `bytes` of them (e.g. 6 for a short tag in messages).
std::string DigestHex(const Sha256Digest& digest, size_t bytes = 32);

}  // namespace attnserve
