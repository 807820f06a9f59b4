// Routing metadata and a bounded retry of refused calls, for several server
// replicas behind a load balancer that hashes x-session-id (server/DESIGN.md §7). A
// replica that drains refuses new turns and sessions with UNAVAILABLE ("the
// server is shutting down"), and a replica asked for a session whose lease
// another one holds answers UNAVAILABLE ("... leased by another writer; retry")
// until that turn ends; both pass within seconds. As its gRPC server stops, a
// drained replica cancels the calls that still reach it: CANCELLED, which the
// client never causes itself before a first response, so it is retried too.
// gRPC's own retry policy cannot say "only while no token has arrived" for a
// stream, hence this loop.
#pragma once

#include <grpcpp/grpcpp.h>

#include <string>

#include "absl/time/time.h"
#include "client/connection.h"

namespace attnserve::client {

// The request header the load balancer routes by; sent with every call that
// names an existing session, besides the id in the message.
inline constexpr char kSessionIdHeader[] = "x-session-id";

// How long and how often a refused call is sent again.
struct RetryPolicy {
  // Attempts at most, the first included.
  int max_attempts = 8;
  // The wait before retry n (1, 2, ...) is initial_backoff * 2^(n-1): 50, 100,
  // ..., 3200 ms, 6.35 s for all seven.
  absl::Duration initial_backoff = absl::Milliseconds(50);
  // Each wait is scaled by a uniform factor in [1 - jitter, 1 + jitter], so
  // that clients refused together do not come back together.
  double jitter = 0.2;
  // No retry starts later than this after the first attempt.
  absl::Duration budget = absl::Seconds(10);
};

// Adds `x-session-id: session_id` to `context`; nothing for an empty id (a
// one-turn Generate, CreateSession, ListSessions, ImportSession).
void AddSessionHeader(grpc::ClientContext* context,
                      const std::string& session_id);

// The attempts of one logical call. They share one deadline: --timeout (or
// `default_seconds` when it is 0) from the first attempt. Not thread-safe; one
// per call.
class RetryLoop {
 public:
  RetryLoop(const GlobalOptions& options, double default_seconds,
            const RetryClock& clock, RetryPolicy policy = RetryPolicy());

  // Readies a fresh `context` for the next attempt: the call's deadline and
  // AddSessionHeader(session_id).
  void Prepare(grpc::ClientContext* context,
               const std::string& session_id) const;

  // After an attempt that ended with `status`, and only when sending the same
  // request again is safe: if the status is UNAVAILABLE or CANCELLED and
  // another attempt fits within the policy and before the deadline, waits the
  // backoff and returns true. Otherwise returns false at once; the caller
  // reports `status`. Not for a call the caller cancelled itself.
  bool Retry(const grpc::Status& status);

  // Sends a request that is safe to send again whole: calls `attempt`
  // (grpc::Status(grpc::ClientContext*)) with a prepared context until Retry()
  // says no, and returns the last status.
  template <typename Attempt>
  grpc::Status Run(const std::string& session_id, Attempt&& attempt) {
    while (true) {
      grpc::ClientContext context;
      Prepare(&context, session_id);
      const grpc::Status status = attempt(&context);
      if (!Retry(status)) return status;
    }
  }

  // Attempts after the first so far.
  int retries() const { return attempts_ - 1; }

 private:
  RetryPolicy policy_;
  const RetryClock& clock_;
  absl::Time start_;
  absl::Time deadline_;
  int attempts_ = 1;
};

}  // namespace attnserve::client
