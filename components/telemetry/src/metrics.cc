#include "once/telemetry/metrics.h"

#include <prometheus/text_serializer.h>

namespace once::telemetry {

using prometheus::BuildCounter;
using prometheus::BuildGauge;
using prometheus::BuildHistogram;
using prometheus::Histogram;

std::string Text(prometheus::Registry& registry) {
  prometheus::TextSerializer serializer;
  return serializer.Serialize(registry.Collect());
}

namespace {

Histogram::BucketBoundaries Seconds() {
  return {0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60};
}

}  // namespace

LoomMetrics::LoomMetrics(prometheus::Registry& r, const Clock& clock, size_t executions_tracked_max)
    : clock_(clock),
      executions_tracked_max_(executions_tracked_max),
      started_(BuildCounter()
                   .Name("loom_executions_started_total")
                   .Help("Executions started (EXECUTION_STARTED appended), by workflow")
                   .Register(r)),
      completed_(BuildCounter()
                     .Name("loom_executions_completed_total")
                     .Help("Executions completed, by workflow")
                     .Register(r)),
      failed_(BuildCounter()
                  .Name("loom_executions_failed_total")
                  .Help("Executions failed, by workflow")
                  .Register(r)),
      cancelled_(BuildCounter()
                     .Name("loom_executions_cancelled_total")
                     .Help("Executions cancelled, by workflow")
                     .Register(r)),
      parks_(BuildCounter()
                 .Name("loom_parks_total")
                 .Help("Parks appended (EXECUTION_SUSPENDED)")
                 .Register(r)
                 .Add({})),
      resumes_(BuildCounter()
                   .Name("loom_resumes_total")
                   .Help("Resumes appended (EXECUTION_RESUMED)")
                   .Register(r)
                   .Add({})),
      won_(BuildCounter()
               .Name("loom_conditional_acquires_total")
               .Help("Conditional fence acquires by outcome")
               .Register(r)
               .Add({{"outcome", "won"}})),
      stale_(BuildCounter()
                 .Name("loom_conditional_acquires_total")
                 .Help("Conditional fence acquires by outcome")
                 .Register(r)
                 .Add({{"outcome", "stale"}})),
      contended_(BuildCounter()
                     .Name("loom_conditional_acquires_total")
                     .Help("Conditional fence acquires by outcome")
                     .Register(r)
                     .Add({{"outcome", "contended"}})),
      lateness_(BuildHistogram()
                    .Name("loom_timer_lateness_seconds")
                    .Help("A timer's resume time past its wake_at_ms")
                    .Register(r)
                    .Add({}, Seconds())),
      batch_(
          BuildHistogram()
              .Name("loom_commit_batch_requests")
              .Help("Append requests one commit held (group commit)")
              .Register(r)
              .Add({}, Histogram::BucketBoundaries{1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024})),
      commit_latency_(BuildHistogram()
                          .Name("loom_commit_latency_seconds")
                          .Help("The store's time for one commit (Append or AppendBatch)")
                          .Register(r)
                          .Add({}, Seconds())),
      refused_(BuildCounter()
                   .Name("loom_commit_requests_refused_total")
                   .Help("Append requests a commit refused (stale fence, sequence conflict)")
                   .Register(r)
                   .Add({})) {}

prometheus::Counter& LoomMetrics::Labelled(prometheus::Family<prometheus::Counter>& family,
                                           const std::string& workflow) {
  return family.Add({{"workflow", workflow}});
}

std::string LoomMetrics::WorkflowOf(const std::string& id, bool forget) {
  std::lock_guard lock(mu_);
  auto it = workflows_.find(id);
  if (it == workflows_.end()) return "other";
  std::string name = it->second;
  if (forget) workflows_.erase(it);
  return name;
}

void LoomMetrics::OnAppended(const store::AppendRequest& request) {
  using events::KernelKind;
  for (const events::Envelope& e : request.events) {
    if (e.Is(KernelKind::kExecutionStarted)) {
      std::string workflow = "other";
      if (e.payload.is_object() && e.payload.contains("workflow") &&
          e.payload["workflow"].is_string()) {
        workflow = e.payload["workflow"].get<std::string>();
      }
      Labelled(started_, workflow).Increment();
      std::lock_guard lock(mu_);
      if (workflows_.size() < executions_tracked_max_) workflows_[request.execution_id] = workflow;
    } else if (e.Is(KernelKind::kExecutionSuspended)) {
      parks_.Increment();
    } else if (e.Is(KernelKind::kExecutionResumed)) {
      resumes_.Increment();
      const events::Json* wait =
          e.payload.is_object() && e.payload.contains("wait") ? &e.payload["wait"] : nullptr;
      if (wait && wait->is_object() && wait->value("type", "") == "timer" &&
          (*wait)["wake_at_ms"].is_number_integer()) {
        int64_t late_ms = clock_.NowUnixMillis() - (*wait)["wake_at_ms"].get<int64_t>();
        lateness_.Observe(std::max<int64_t>(0, late_ms) / 1000.0);
      }
    } else if (e.Is(KernelKind::kExecutionCompleted)) {
      Labelled(completed_, WorkflowOf(request.execution_id, true)).Increment();
    } else if (e.Is(KernelKind::kExecutionFailed)) {
      Labelled(failed_, WorkflowOf(request.execution_id, true)).Increment();
    } else if (e.Is(KernelKind::kExecutionCancelled)) {
      Labelled(cancelled_, WorkflowOf(request.execution_id, true)).Increment();
    } else if (e.Is(KernelKind::kExecutionContinued)) {
      WorkflowOf(request.execution_id, true);
    }
  }
}

void LoomMetrics::OnCommit(size_t requests, size_t landed, int64_t latency_us) {
  batch_.Observe(static_cast<double>(requests));
  commit_latency_.Observe(latency_us / 1e6);
  if (landed < requests) refused_.Increment(static_cast<double>(requests - landed));
}

void LoomMetrics::OnConditionalAcquire(store::AcquireOutcome outcome) {
  switch (outcome) {
    case store::AcquireOutcome::kWon:
      won_.Increment();
      break;
    case store::AcquireOutcome::kStale:
      stale_.Increment();
      break;
    case store::AcquireOutcome::kContended:
      contended_.Increment();
      break;
  }
}

ServeMetrics::ServeMetrics()
    : executions_(BuildGauge()
                      .Name("loom_store_executions")
                      .Help("Executions in the store by status (the counts query)")
                      .Register(registry_)),
      inbox_depth_(BuildGauge()
                       .Name("loom_store_inbox_pending_messages")
                       .Help("Inbox messages stored and not yet deleted")
                       .Register(registry_)
                       .Add({})),
      counts_seconds_(BuildGauge()
                          .Name("loom_store_counts_query_seconds")
                          .Help("How long the last counts query took")
                          .Register(registry_)
                          .Add({})),
      requests_(BuildCounter()
                    .Name("loom_serve_requests_total")
                    .Help("HTTP requests answered, by method, route and status")
                    .Register(registry_)),
      refusals_(BuildCounter()
                    .Name("loom_serve_refusals_total")
                    .Help("Requests refused, by error code")
                    .Register(registry_)),
      actions_(BuildCounter()
                   .Name("loom_serve_actions_total")
                   .Help("Actions done (cancel, resume, send, fork)")
                   .Register(registry_)) {}

void ServeMetrics::SetCounts(const visibility::StatusCounts& c, int64_t query_ms) {
  for (auto [status, n] :
       {std::pair{"running", c.running}, std::pair{"suspended", c.suspended},
        std::pair{"completed", c.completed}, std::pair{"failed", c.failed},
        std::pair{"cancelled", c.cancelled}, std::pair{"continued", c.continued}}) {
    executions_.Add({{"status", status}}).Set(static_cast<double>(n));
  }
  inbox_depth_.Set(static_cast<double>(c.inbox_pending));
  counts_seconds_.Set(query_ms / 1000.0);
}

void ServeMetrics::Request(const std::string& method, const std::string& route, int status) {
  requests_.Add({{"method", method}, {"route", route}, {"status", std::to_string(status)}})
      .Increment();
}

void ServeMetrics::Refusal(const std::string& code) { refusals_.Add({{"code", code}}).Increment(); }

void ServeMetrics::Action(const std::string& verb) { actions_.Add({{"verb", verb}}).Increment(); }

std::string ServeMetrics::Text() { return telemetry::Text(registry_); }

}  // namespace once::telemetry
