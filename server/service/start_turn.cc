#include "server/service/start_turn.h"

namespace attnserve::service {

absl::StatusOr<std::shared_ptr<scheduler::TurnControl>> StartTurn(
    const Caller& caller, const catalogue::ModelCatalogue& models, session::SessionStore& store,
    scheduler::Scheduler& scheduler, const RequestLimits& limits,
    const v1::GenerateRequest& request, absl::Time arrival, absl::Time deadline,
    const SinkFactory& make_sink) {
  auto parsed = ParseGenerate(request, models, limits);
  if (!parsed.ok()) return parsed.status();
  // A one-turn session (no session id) is closed when its claim is released.
  auto begun = parsed->session_id.empty() ? store.BeginOneTurn(caller.tenant, parsed->model)
                                          : store.BeginTurn(caller.tenant, parsed->session_id);
  if (!begun.ok()) return begun.status();
  session::TurnClaim claim = *std::move(begun);
  // The claim is released on return if the turn does not fit.
  if (absl::Status fits = CheckTurnFits(*parsed, claim.session()); !fits.ok()) return fits;
  parsed->turn.arrival = arrival;  // time to first token includes loading the session
  parsed->turn.deadline = deadline;
  std::shared_ptr<scheduler::TurnSink> sink = make_sink(claim.shared());
  return scheduler.Submit(std::move(claim), std::move(parsed->turn), std::move(sink));
}

}  // namespace attnserve::service
