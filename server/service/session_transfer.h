// The snapshot RPCs that stream: ExportSession (server streaming, chunks of at most
// 1 MiB) and ImportSession (client streaming, bounded by the largest snapshot this
// server could hold). Same reactor rules as Generate: one operation in flight, Finish
// always called, the reactor deletes itself in OnDone.
#pragma once

#include "attnserve/v1/attnserve.grpc.pb.h"
#include "server/service/attnserve_service.h"

namespace attnserve::service {

// Largest chunk ExportSession writes.
inline constexpr size_t kSnapshotChunkBytes = 1 << 20;

grpc::ServerWriteReactor<v1::SnapshotChunk>* StartExport(
    AttnServeService* service, session::SessionStore* store,
    grpc::CallbackServerContext* context, const v1::ExportSessionRequest* request);

grpc::ServerReadReactor<v1::ImportSessionRequest>* StartImport(
    AttnServeService* service, session::SessionStore* store,
    grpc::CallbackServerContext* context, v1::Session* response);

}  // namespace attnserve::service
