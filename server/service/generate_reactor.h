// The server-streaming Generate call: one write in flight, the next from OnWriteDone
// (the engine never starts a write itself: a thread of this file does when none is in flight),
// a bounded buffer of unsent tokens (a slow reader pauses only its own turn), OnCancel
// pushed into the scheduler, Finish always called, and the reactor deletes itself in
// OnDone.
#pragma once

#include <memory>

#include "attnserve/v1/attnserve.grpc.pb.h"
#include "server/service/attnserve_service.h"

namespace attnserve::service {

// Unsent token messages one stream may hold before its turn pauses.
inline constexpr int kMaxBufferedTokens = 32;

class GenerateReactor;

// Creates the reactor for one call and starts it (validation, session, submission).
grpc::ServerWriteReactor<v1::GenerateResponse>* StartGenerate(
    AttnServeService* service, const catalogue::ModelCatalogue* models, session::SessionStore* store,
    scheduler::Scheduler* scheduler, const RequestLimits& limits,
    grpc::CallbackServerContext* context, const v1::GenerateRequest* request);

}  // namespace attnserve::service
