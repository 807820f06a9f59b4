// Starting one Generate turn for a caller: the part every edge (gRPC's GenerateReactor,
// the HTTP front) shares, so that validation, tenants, session claims and submission
// happen in one place.
#pragma once

#include <functional>
#include <memory>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "attnserve/v1/attnserve.pb.h"
#include "server/scheduler/scheduler.h"
#include "server/service/admission.h"
#include "server/service/attnserve_service.h"
#include "server/session/session_store.h"

namespace attnserve::service {

// Makes the turn's sink once its session is claimed (`session` is kept alive by the turn;
// a sink may hold it, e.g. to name the model in metrics). Called before submission, on
// the thread that runs StartTurn.
using SinkFactory = std::function<std::shared_ptr<scheduler::TurnSink>(
    const std::shared_ptr<session::Session>& session)>;

// Parses and validates `request` (ParseGenerate), claims its session for `caller`'s
// tenant (a one-turn session when it names none; BeginTurn may wait for the session's
// previous turn or the durable store, so call it from a thread whose job is waiting),
// checks the turn fits (CheckTurnFits), makes the sink and submits the turn with
// `arrival` (time to first token counts from it) and `deadline`. Returns the turn's
// control; on an error nothing was submitted and the claim is released.
absl::StatusOr<std::shared_ptr<scheduler::TurnControl>> StartTurn(
    const Caller& caller, const catalogue::ModelCatalogue& models, session::SessionStore& store,
    scheduler::Scheduler& scheduler, const RequestLimits& limits,
    const v1::GenerateRequest& request, absl::Time arrival, absl::Time deadline,
    const SinkFactory& make_sink);

}  // namespace attnserve::service
