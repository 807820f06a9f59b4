#include "server/common/sha256.h"

#include <openssl/evp.h>

#include <cstdio>
#include <cstdlib>

namespace attnserve {

struct Sha256::Impl {
  EVP_MD_CTX* ctx = nullptr;
};

Sha256::Sha256() : impl_(std::make_unique<Impl>()) {
  impl_->ctx = EVP_MD_CTX_new();
  // Out of memory, or an OpenSSL without SHA-256: nothing sensible to continue with.
  if (impl_->ctx == nullptr || EVP_DigestInit_ex(impl_->ctx, EVP_sha256(), nullptr) != 1) {
    std::fprintf(stderr, "attnserve: OpenSSL cannot start a SHA-256 digest\n");
    std::abort();
  }
}

Sha256::~Sha256() { EVP_MD_CTX_free(impl_->ctx); }

void Sha256::Update(const void* data, size_t size) {
  if (size > 0) EVP_DigestUpdate(impl_->ctx, data, size);
}

Sha256Digest Sha256::Finish() {
  Sha256Digest out{};
  unsigned int n = 0;
  EVP_DigestFinal_ex(impl_->ctx, out.data(), &n);
  return out;
}

std::string DigestHex(const Sha256Digest& digest, size_t bytes) {
  static const char kHex[] = "0123456789abcdef";
  std::string out;
  for (size_t i = 0; i < bytes && i < digest.size(); ++i) {
    out += kHex[digest[i] >> 4];
    out += kHex[digest[i] & 15];
  }
  return out;
}

}  // namespace attnserve
