// The snapshot RPCs that stream: ExportSession (server streaming, chunks of at most
// 1 MiB) and ImportSession (client streaming, bounded by the largest snapshot this
// server could hold). Same reactor rules as Generate: one operation in flight, Finish
// always called, the reactor deletes itself in OnDone.
#pragma once

#include <cstddef>
#include <utility>
#include <vector>

#include "attnserve/v1/attnserve.grpc.pb.h"
#include "server/service/attnserve_service.h"

namespace attnserve::service {

// Largest chunk ExportSession writes.
inline constexpr size_t kSnapshotChunkBytes = 1 << 20;

// The chunks ExportSession writes for a snapshot of `total` bytes, in order, as
// (offset, length): every byte once, each chunk 1 to kSnapshotChunkBytes long. None for
// an empty snapshot, which ExportSession refuses (INTERNAL) rather than write.
std::vector<std::pair<size_t, size_t>> SnapshotChunks(size_t total);

grpc::ServerWriteReactor<v1::SnapshotChunk>* StartExport(
    AttnServeService* service, session::SessionStore* store,
    grpc::CallbackServerContext* context, const v1::ExportSessionRequest* request);

grpc::ServerReadReactor<v1::ImportSessionRequest>* StartImport(
    AttnServeService* service, session::SessionStore* store,
    grpc::CallbackServerContext* context, v1::Session* response);

}  // namespace attnserve::service
