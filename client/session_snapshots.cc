// sessions export|import|fork: portable sessions. export and import move a
// session's snapshot (proto/attnserve/v1/SNAPSHOT.md) between the server and a
// file in chunks; fork copies a session on the server.
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "attnserve/v1/attnserve.grpc.pb.h"
#include "client/commands.h"
#include "client/format.h"
#include "client/retry.h"
#include "client/snapshot_file.h"

namespace attnserve::client {
namespace {

namespace v1 = ::attnserve::v1;

// Import sends at most this many snapshot bytes per message; export receives
// chunks of at most this size from the server.
constexpr size_t kChunkBytes = size_t{1} << 20;

constexpr CommandHelp kExportHelp = {
    "sessions export", "ID FILE",
    "Writes the snapshot of session ID to FILE (- for stdout), then one line\n"
    "to stderr:\n"
    "  exported ID to FILE: SIZE (N bytes) in F ms\n"
    "FILE is written to a temporary file beside it (mode 0600) and renamed\n"
    "when the whole snapshot has arrived, so on an error FILE is untouched;\n"
    "on stdout the bytes already written stay. The session is unchanged.\n"};

constexpr CommandHelp kImportHelp = {
    "sessions import", "[flags] FILE",
    "Sends the snapshot in FILE (- for stdin) to the server in chunks of at\n"
    "most 1 MiB and prints the new session's id alone on stdout, then one\n"
    "line to stderr:\n"
    "  imported ID from FILE: SIZE (N bytes) in F ms, position N\n"};

constexpr CommandHelp kForkHelp = {
    "sessions fork", "[flags] ID",
    "Creates a session with a copy of session ID's state (ID is unchanged)\n"
    "and prints the new session's id alone on stdout.\n"};

double MillisSince(absl::Time start) {
  return absl::ToDoubleMilliseconds(absl::Now() - start);
}

int ReportLocalError(const Io& io, const absl::Status& status) {
  absl::FPrintF(io.err, "attnserve: %s\n", status.message());
  return kExitFailure;
}

// Calls ExportSession and writes the chunks to `out`, counting them in
// `*received`; a call refused (RetryLoop) before its first chunk is sent
// again. Returns kExitOk when all the bytes the server announced have arrived;
// otherwise reports why and returns the exit code.
int ReceiveSnapshot(v1::AttnServe::Stub& stub, const std::string& id,
                    const GlobalOptions& options, const Io& io,
                    SnapshotWriter& out, int64_t* received) {
  v1::ExportSessionRequest request;
  request.set_session_id(id);
  RetryLoop loop(options, kStreamingTimeoutSeconds, io.clock);
  int64_t total = -1;  // set by the first chunk
  absl::Status written = absl::OkStatus();
  grpc::Status status;
  do {
    grpc::ClientContext context;
    loop.Prepare(&context, id);
    std::unique_ptr<grpc::ClientReader<v1::SnapshotChunk>> reader =
        stub.ExportSession(&context, request);
    v1::SnapshotChunk chunk;
    while (reader->Read(&chunk)) {
      if (total < 0) total = chunk.total_bytes();
      written = out.Write(chunk.data());
      if (!written.ok()) {
        context.TryCancel();
        while (reader->Read(&chunk)) {
        }
        break;
      }
      *received += static_cast<int64_t>(chunk.data().size());
    }
    status = reader->Finish();
  } while (total < 0 && loop.Retry(status));  // nothing written yet
  if (!written.ok()) return ReportLocalError(io, written);
  if (!status.ok()) return ReportRpcError(io, status);
  if (total > 0 && *received != total) {
    absl::FPrintF(io.err,
                  "attnserve: the export of %s ended after %d of %d bytes\n",
                  id, *received, total);
    return kExitFailure;
  }
  return kExitOk;
}

// Calls ImportSession with the bytes of `in` in messages of at most
// kChunkBytes, `ttl_seconds` in the first, counting them in `*sent`. A call
// refused (RetryLoop) is sent again from the first byte when `in` can
// rewind (a file, not stdin); like CreateSession, a replica that imported and
// then failed leaves an orphan session, which its TTL closes. Returns kExitOk
// with the new session in `*session`; otherwise reports why and returns the
// exit code.
int SendSnapshot(v1::AttnServe::Stub& stub, int64_t ttl_seconds,
                 const GlobalOptions& options, const Io& io, SnapshotReader& in,
                 int64_t* sent, v1::Session* session) {
  RetryLoop loop(options, kStreamingTimeoutSeconds, io.clock);
  while (true) {
    *sent = 0;
    grpc::ClientContext context;
    loop.Prepare(&context, "");
    std::unique_ptr<grpc::ClientWriter<v1::ImportSessionRequest>> writer =
        stub.ImportSession(&context, session);
    v1::ImportSessionRequest request;
    request.set_ttl_seconds(ttl_seconds);
    int64_t messages = 0;
    absl::Status read;
    while (true) {
      read = in.Read(kChunkBytes, request.mutable_data());
      // An empty FILE still sends one message, so that the server judges it.
      if (!read.ok() || (request.data().empty() && messages > 0)) break;
      *sent += static_cast<int64_t>(request.data().size());
      ++messages;
      // false: the server has ended the call; Finish() says why.
      if (!writer->Write(request)) break;
      request.clear_ttl_seconds();
    }
    if (!read.ok()) context.TryCancel();
    writer->WritesDone();
    const grpc::Status status = writer->Finish();
    if (!read.ok()) return ReportLocalError(io, read);
    if (status.ok()) return kExitOk;
    if (!in.Rewind() || !loop.Retry(status)) return ReportRpcError(io, status);
  }
}

}  // namespace

int RunSessionsExport(const Args& args, GlobalOptions options, const Io& io) {
  FlagSet flags;
  Args positional;
  int code;
  if (!ParseCommandLine(kExportHelp, flags, &options, args, io, &positional,
                        &code) ||
      !CheckArgCount(positional, 2, 2, kExportHelp, io, &code)) {
    return code;
  }
  const std::string& id = positional[0];
  // Before connecting, so that an unwritable FILE fails at once.
  absl::StatusOr<std::unique_ptr<SnapshotWriter>> out =
      SnapshotWriter::Open(positional[1], io.out);
  if (!out.ok()) return ReportLocalError(io, out.status());
  std::unique_ptr<v1::AttnServe::Stub> stub = ConnectStub(options, io, &code);
  if (stub == nullptr) return code;
  const absl::Time start = absl::Now();
  int64_t bytes = 0;
  code = ReceiveSnapshot(*stub, id, options, io, **out, &bytes);
  if (code != kExitOk) return code;
  if (absl::Status status = (*out)->Commit(); !status.ok()) {
    return ReportLocalError(io, status);
  }
  absl::FPrintF(io.err, "exported %s to %s: %s (%d bytes) in %.1f ms\n", id,
                (*out)->name(), HumanBytes(bytes), bytes, MillisSince(start));
  return kExitOk;
}

int RunSessionsImport(const Args& args, GlobalOptions options, const Io& io) {
  FlagSet flags;
  int64_t ttl_seconds = 0;
  flags.Add("ttl_seconds", &ttl_seconds,
            "idle seconds before the new session is closed; 0 is the server's "
            "default");
  Args positional;
  int code;
  if (!ParseCommandLine(kImportHelp, flags, &options, args, io, &positional,
                        &code) ||
      !CheckArgCount(positional, 1, 1, kImportHelp, io, &code)) {
    return code;
  }
  absl::StatusOr<std::unique_ptr<SnapshotReader>> in =
      SnapshotReader::Open(positional[0], io.in);
  if (!in.ok()) return ReportLocalError(io, in.status());
  std::unique_ptr<v1::AttnServe::Stub> stub = ConnectStub(options, io, &code);
  if (stub == nullptr) return code;

  const absl::Time start = absl::Now();
  int64_t bytes = 0;
  v1::Session session;
  code = SendSnapshot(*stub, ttl_seconds, options, io, **in, &bytes, &session);
  if (code != kExitOk) return code;
  absl::FPrintF(io.out, "%s\n", session.id());
  absl::FPrintF(io.err,
                "imported %s from %s: %s (%d bytes) in %.1f ms, position %d\n",
                session.id(), (*in)->name(), HumanBytes(bytes), bytes,
                MillisSince(start), session.position());
  return kExitOk;
}

int RunSessionsFork(const Args& args, GlobalOptions options, const Io& io) {
  FlagSet flags;
  int64_t ttl_seconds = 0;
  flags.Add("ttl_seconds", &ttl_seconds,
            "idle seconds before the new session is closed; 0 is the "
            "original's");
  Args positional;
  int code;
  if (!ParseCommandLine(kForkHelp, flags, &options, args, io, &positional,
                        &code) ||
      !CheckArgCount(positional, 1, 1, kForkHelp, io, &code)) {
    return code;
  }
  std::unique_ptr<v1::AttnServe::Stub> stub = ConnectStub(options, io, &code);
  if (stub == nullptr) return code;
  v1::ForkSessionRequest request;
  request.set_session_id(positional[0]);
  request.set_ttl_seconds(ttl_seconds);
  v1::Session session;
  // Sent again when refused, like CreateSession: at worst an orphan copy.
  const grpc::Status status =
      RetryLoop(options, kUnaryTimeoutSeconds, io.clock)
          .Run(request.session_id(), [&](grpc::ClientContext* context) {
            return stub->ForkSession(context, request, &session);
          });
  if (!status.ok()) return ReportRpcError(io, status);
  absl::FPrintF(io.out, "%s\n", session.id());
  return kExitOk;
}

}  // namespace attnserve::client
