#include "server/service/tls_credentials.h"

#include <grpcpp/security/server_credentials.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace attnserve::service {
namespace {

// "--flag file PATH", the subject of every error below.
std::string FileOf(const char* flag, const std::string& path) {
  return absl::StrCat("--", flag, " file ", path);
}

absl::StatusOr<std::string> ReadFile(const char* flag, const std::string& path) {
  std::FILE* file = std::fopen(path.c_str(), "rb");
  if (file == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot read ", FileOf(flag, path), ": ", std::strerror(errno)));
  }
  std::string text;
  char buffer[4096];
  size_t n;
  while ((n = std::fread(buffer, 1, sizeof(buffer), file)) > 0) text.append(buffer, n);
  const bool failed = std::ferror(file) != 0;
  const int error = errno;
  std::fclose(file);
  if (failed) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot read ", FileOf(flag, path), ": ", std::strerror(error)));
  }
  return text;
}

// OpenSSL's own reason for the last failure, and its error queue cleared.
std::string OpenSslReason() {
  const unsigned long code = ERR_peek_last_error();
  ERR_clear_error();
  if (code == 0) return "";
  char buffer[256];
  ERR_error_string_n(code, buffer, sizeof(buffer));
  return absl::StrCat(" (", buffer, ")");
}

struct BioFree {
  void operator()(BIO* b) const { BIO_free(b); }
};
struct X509Free {
  void operator()(X509* x) const { X509_free(x); }
};
struct KeyFree {
  void operator()(EVP_PKEY* k) const { EVP_PKEY_free(k); }
};
using Bio = std::unique_ptr<BIO, BioFree>;
using Cert = std::unique_ptr<X509, X509Free>;
using Key = std::unique_ptr<EVP_PKEY, KeyFree>;

Bio BioOf(const std::string& pem) {
  return Bio(BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())));
}

// A key with a passphrase must fail here, never prompt on the terminal.
int NoPassphrase(char*, int, int, void*) { return 0; }

// The first certificate of `pem`, or InvalidArgument naming the file.
absl::StatusOr<Cert> FirstCertificate(const char* flag, const std::string& path,
                                      const std::string& pem) {
  Bio bio = BioOf(pem);
  Cert cert(PEM_read_bio_X509(bio.get(), nullptr, NoPassphrase, nullptr));
  if (cert == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat(FileOf(flag, path), " holds no PEM certificate (-----BEGIN CERTIFICATE-----)",
                     OpenSslReason()));
  }
  return cert;
}

}  // namespace

absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> ServerCredentialsFor(
    const config::ServerOptions& options) {
  if (options.tls_cert.empty()) return grpc::InsecureServerCredentials();
  auto cert_pem = ReadFile("tls_cert", options.tls_cert);
  if (!cert_pem.ok()) return cert_pem.status();
  auto key_pem = ReadFile("tls_key", options.tls_key);
  if (!key_pem.ok()) return key_pem.status();
  auto cert = FirstCertificate("tls_cert", options.tls_cert, *cert_pem);
  if (!cert.ok()) return cert.status();
  Bio key_bio = BioOf(*key_pem);
  Key key(PEM_read_bio_PrivateKey(key_bio.get(), nullptr, NoPassphrase, nullptr));
  if (key == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(
        FileOf("tls_key", options.tls_key),
        " holds no unencrypted PEM private key", OpenSslReason()));
  }
  if (X509_check_private_key(cert->get(), key.get()) != 1) {
    return absl::InvalidArgumentError(
        absl::StrCat(FileOf("tls_key", options.tls_key), " is not the private key of ",
                     FileOf("tls_cert", options.tls_cert), OpenSslReason()));
  }
  grpc::SslServerCredentialsOptions ssl(GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE);
  ssl.pem_key_cert_pairs.push_back({*key_pem, *cert_pem});
  if (!options.tls_client_ca.empty()) {
    auto ca_pem = ReadFile("tls_client_ca", options.tls_client_ca);
    if (!ca_pem.ok()) return ca_pem.status();
    auto ca = FirstCertificate("tls_client_ca", options.tls_client_ca, *ca_pem);
    if (!ca.ok()) return ca.status();
    ssl.pem_root_certs = *ca_pem;
    ssl.client_certificate_request = GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY;
  }
  return grpc::SslServerCredentials(ssl);
}

}  // namespace attnserve::service
