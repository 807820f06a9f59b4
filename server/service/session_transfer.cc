#include "server/service/session_transfer.h"

#include <algorithm>
#include <atomic>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "server/service/status_map.h"

namespace attnserve::service {
namespace {

class ExportReactor : public grpc::ServerWriteReactor<v1::SnapshotChunk> {
 public:
  ExportReactor(AttnServeService* service, session::SessionStore* store,
                grpc::CallbackServerContext* context, const v1::ExportSessionRequest& request)
      : service_(service) {
    // Exporting may load the session from a durable store: off gRPC's threads.
    auto start = [this, store, context, id = request.session_id()] {
      auto caller = service_->ResolveCaller(context, id);
      if (!caller.ok()) {
        Done(ToGrpcStatus(caller.status()));
        return;
      }
      auto bytes = store->Export(caller->tenant, id);
      if (!bytes.ok()) {
        Done(ToGrpcStatus(bytes.status()));
        return;
      }
      bytes_ = std::move(bytes).value();
      chunks_ = SnapshotChunks(bytes_->size());
      if (chunks_.empty()) {  // never a snapshot (it has a header): nothing to send
        Done(grpc::Status(grpc::StatusCode::INTERNAL, "the session's snapshot is empty"));
        return;
      }
      WriteNext();
    };
    if (!service_->RunBlocking(std::move(start))) {
      Done(grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED,
                        "server busy: too many requests are waiting for the session store"));
    }
  }

  void OnWriteDone(bool ok) override {
    if (!ok) {
      Done(grpc::Status(grpc::StatusCode::CANCELLED, "client went away"));
      return;
    }
    WriteNext();
  }
  void OnDone() override { delete this; }

 private:
  void WriteNext() {
    if (next_ == chunks_.size()) {
      Done(grpc::Status::OK);
      return;
    }
    const auto [offset, n] = chunks_[next_++];
    chunk_.Clear();
    chunk_.set_data(bytes_->data() + offset, n);
    if (offset == 0) chunk_.set_total_bytes(int64_t(bytes_->size()));
    StartWrite(&chunk_);
  }
  void Done(const grpc::Status& status) {
    service_->Record("ExportSession", status, nullptr);
    Finish(status);
  }

  AttnServeService* const service_;
  std::shared_ptr<const std::string> bytes_;
  std::vector<std::pair<size_t, size_t>> chunks_;  // SnapshotChunks(bytes_->size())
  size_t next_ = 0;                                // the next chunk to write
  v1::SnapshotChunk chunk_;
};

class ImportReactor : public grpc::ServerReadReactor<v1::ImportSessionRequest> {
 public:
  ImportReactor(AttnServeService* service, session::SessionStore* store,
                grpc::CallbackServerContext* context, v1::Session* response)
      : service_(service), store_(store), context_(context), response_(response) {
    // Before reading a byte: an unauthenticated caller does not get to upload.
    auto caller = service_->ResolveCaller(context, "");
    if (!caller.ok()) {
      Done(caller.status());
      return;
    }
    tenant_ = std::move(caller->tenant);
    StartRead(&request_);
  }

  void OnReadDone(bool ok) override {
    if (!ok) {
      // No more messages: the client closed its side (the snapshot is complete), or the
      // call was cancelled (what arrived is not an upload: nothing is imported).
      if (Cancelled()) {
        Done(absl::CancelledError("the import was cancelled; nothing was imported"));
        return;
      }
      // Admission may spill idle sessions to a durable store: off gRPC's threads.
      if (!service_->RunBlocking([this] { Import(); })) {
        Done(absl::ResourceExhaustedError(
            "server busy: too many requests are waiting for the session store"));
      }
      return;
    }
    if (first_) {
      first_ = false;
      ttl_ = absl::Seconds(request_.ttl_seconds());
      if (request_.ttl_seconds() < 0) {
        Done(absl::InvalidArgumentError("ttl_seconds must be >= 0 (0 = the snapshot's)"));
        return;
      }
    }
    bytes_ += request_.data();
    // Refuse an absurd snapshot as soon as its header says so, before buffering it.
    if (declared_ == 0 && bytes_.size() >= snapshot::kSnapshotFixedHeaderBytes) {
      auto total = snapshot::SnapshotTotalBytes(bytes_, store_->max_snapshot_bytes());
      if (!total.ok()) {
        Done(total.status());
        return;
      }
      declared_ = *total;
      bytes_.reserve(declared_);
    }
    const uint64_t limit = declared_ > 0 ? declared_ : snapshot::kSnapshotFixedHeaderBytes;
    if (bytes_.size() > limit && declared_ > 0) {
      Done(absl::DataLossError(absl::StrCat("snapshot: more bytes than the ", declared_,
                                            " it declares")));
      return;
    }
    if (declared_ == 0 && bytes_.size() > store_->max_snapshot_bytes()) {
      Done(absl::InvalidArgumentError("snapshot: over this server's limit"));
      return;
    }
    StartRead(&request_);
  }
  void OnCancel() override { cancelled_ = true; }
  void OnDone() override { delete this; }

 private:
  // gRPC may report a cancellation (OnCancel) just after the read it failed.
  bool Cancelled() const { return cancelled_.load() || context_->IsCancelled(); }

  void Import() {
    // The session is the importer's, whoever the snapshot names.
    auto session =
        store_->Import(tenant_, std::make_shared<const std::string>(std::move(bytes_)), ttl_);
    if (!session.ok()) {
      Done(session.status());
      return;
    }
    if (Cancelled()) {  // while importing: the client will never learn the session's id
      (void)store_->Close(tenant_, (*session)->id());
      Done(absl::CancelledError("the import was cancelled; nothing was imported"));
      return;
    }
    auto info = store_->Get(tenant_, (*session)->id());
    if (info.ok()) *response_ = ToProto(*info);
    Done(info.status(), &(*session)->served());
  }
  void Done(const absl::Status& status, const catalogue::ServedModel* model = nullptr) {
    const grpc::Status g = ToGrpcStatus(status);
    service_->Record("ImportSession", g, model);
    Finish(g);
  }

  AttnServeService* const service_;
  session::SessionStore* const store_;
  grpc::CallbackServerContext* const context_;
  v1::Session* const response_;
  v1::ImportSessionRequest request_;
  std::atomic<bool> cancelled_{false};  // OnCancel ran
  std::string tenant_;  // the caller's, set before the first read
  std::string bytes_;
  uint64_t declared_ = 0;
  bool first_ = true;
  absl::Duration ttl_ = absl::ZeroDuration();
};

}  // namespace

std::vector<std::pair<size_t, size_t>> SnapshotChunks(size_t total) {
  std::vector<std::pair<size_t, size_t>> chunks;
  for (size_t offset = 0; offset < total; offset += kSnapshotChunkBytes) {
    chunks.emplace_back(offset, std::min(kSnapshotChunkBytes, total - offset));
  }
  return chunks;
}

grpc::ServerWriteReactor<v1::SnapshotChunk>* StartExport(
    AttnServeService* service, session::SessionStore* store,
    grpc::CallbackServerContext* context, const v1::ExportSessionRequest* request) {
  return new ExportReactor(service, store, context, *request);
}

grpc::ServerReadReactor<v1::ImportSessionRequest>* StartImport(
    AttnServeService* service, session::SessionStore* store,
    grpc::CallbackServerContext* context, v1::Session* response) {
  return new ImportReactor(service, store, context, response);
}

}  // namespace attnserve::service
