// The gRPC server credentials that --tls_cert, --tls_key and --tls_client_ca describe.
#pragma once

#include <grpcpp/security/server_credentials.h>

#include <memory>

#include "absl/status/statusor.h"
#include "server/config/server_options.h"

namespace attnserve::service {

// Insecure credentials when options.tls_cert is empty; otherwise TLS with that
// certificate chain and key, and, when options.tls_client_ca is set, client certificates
// required and verified against those CAs (mutual TLS). Reads and checks the files
// first, so that a start-up error names the file: InvalidArgument when one cannot be
// read, holds no PEM certificate or key, or the key does not belong to the certificate.
absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> ServerCredentialsFor(
    const config::ServerOptions& options);

}  // namespace attnserve::service
