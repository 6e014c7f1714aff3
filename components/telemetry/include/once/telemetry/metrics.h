// File: metrics.h
//
// Prometheus metrics for the apps, through prometheus-cpp (the text format
// version 0.0.4). The libraries expose hooks (store::StoreObserver, the
// counters of sush_net); the classes here turn them into metric families on
// one prometheus::Registry that /metrics serializes.
//
//   auto registry = std::make_shared<prometheus::Registry>();
//   telemetry::LoomMetrics loom(*registry, clock);     // an App's store observer
//   store::ObservedStore observed(*store, loom, clock);
//   http.Get("/metrics", ... telemetry::Text(*registry) ...);
//
// docs/operations.md, "Metrics", names every family and what it means.
#pragma once

#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>

#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

#include "once/base/clock.h"
#include "once/store_decorators/observed_store.h"
#include "once/visibility/visibility.h"

namespace once::telemetry {

// The registry's metrics in the Prometheus text format.
std::string Text(prometheus::Registry& registry);

// What a process running workflows sees at its store (via ObservedStore):
//   loom_executions_started_total{workflow}, loom_executions_completed_total{workflow},
//   loom_executions_failed_total{workflow}, loom_executions_cancelled_total{workflow},
//   loom_parks_total, loom_resumes_total,
//   loom_conditional_acquires_total{outcome="won|stale|contended"},
//   loom_timer_lateness_seconds (histogram: a timer resume's time past its wake_at_ms),
//   loom_commit_batch_requests (histogram), loom_commit_latency_seconds (histogram),
//   loom_commit_requests_refused_total.
// Ends are labelled with the workflow the process saw start (up to
// workflows_tracked_max executions in flight); others are "other".
class LoomMetrics final : public store::StoreObserver {
 public:
  LoomMetrics(prometheus::Registry& registry, const Clock& clock,
              size_t executions_tracked_max = 100'000);
  void OnAppended(const store::AppendRequest& request) override;
  void OnCommit(size_t requests, size_t landed, int64_t latency_us) override;
  void OnConditionalAcquire(store::AcquireOutcome outcome) override;

 private:
  prometheus::Counter& Labelled(prometheus::Family<prometheus::Counter>& family,
                                const std::string& workflow);
  std::string WorkflowOf(const std::string& id, bool forget);

  const Clock& clock_;
  size_t executions_tracked_max_;
  prometheus::Family<prometheus::Counter>& started_;
  prometheus::Family<prometheus::Counter>& completed_;
  prometheus::Family<prometheus::Counter>& failed_;
  prometheus::Family<prometheus::Counter>& cancelled_;
  prometheus::Counter& parks_;
  prometheus::Counter& resumes_;
  prometheus::Counter& won_;
  prometheus::Counter& stale_;
  prometheus::Counter& contended_;
  prometheus::Histogram& lateness_;
  prometheus::Histogram& batch_;
  prometheus::Histogram& commit_latency_;
  prometheus::Counter& refused_;
  std::mutex mu_;
  std::unordered_map<std::string, std::string> workflows_;  // GUARDED_BY(mu_)
};

// What `loom serve` sees: the store's executions per status (from the
// counts query), its inbox depth, the counts query's cost, the requests it
// answered and the refusals and actions among them.
class ServeMetrics {
 public:
  ServeMetrics();
  void SetCounts(const visibility::StatusCounts& counts, int64_t query_ms);
  void Request(const std::string& method, const std::string& route, int status);
  void Refusal(const std::string& code);
  void Action(const std::string& verb);
  std::string Text();

 private:
  prometheus::Registry registry_;
  prometheus::Family<prometheus::Gauge>& executions_;
  prometheus::Gauge& inbox_depth_;
  prometheus::Gauge& counts_seconds_;
  prometheus::Family<prometheus::Counter>& requests_;
  prometheus::Family<prometheus::Counter>& refusals_;
  prometheus::Family<prometheus::Counter>& actions_;
};

}  // namespace once::telemetry
