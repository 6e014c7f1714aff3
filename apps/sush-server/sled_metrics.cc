#include "sled_metrics.h"

#include <prometheus/text_serializer.h>

#include <chrono>

namespace once::sush {

using prometheus::BuildCounter;
using prometheus::BuildGauge;
using prometheus::BuildHistogram;

namespace {
prometheus::Gauge& Gauge(prometheus::Registry& r, const char* name, const char* help) {
  return BuildGauge().Name(name).Help(help).Register(r).Add({});
}
}  // namespace

SledMetrics::SledMetrics()
    : jobs_run_(Gauge(registry_, "sush_jobs_executed",
                      "Jobs this sled started, as its boundary record counts them")),
      jobs_skipped_(Gauge(registry_, "sush_jobs_skipped",
                          "Jobs this sled skipped (terminal Skipped), per its record")),
      jobs_interrupted_(Gauge(registry_, "sush_jobs_interrupted",
                              "Jobs found started by an earlier life with no known end")),
      jobs_running_(Gauge(registry_, "sush_jobs_running", "Jobs running now")),
      boundary_writes_(BuildCounter()
                           .Name("sush_boundary_writes_total")
                           .Help("Boundary record writes that reached both drives")
                           .Register(registry_)
                           .Add({})),
      boundary_write_errors_(BuildCounter()
                                 .Name("sush_boundary_write_errors_total")
                                 .Help("Boundary record writes that failed")
                                 .Register(registry_)
                                 .Add({})),
      boundary_write_seconds_(
          BuildHistogram()
              .Name("sush_boundary_write_seconds")
              .Help("One boundary record write to both drives (renames and fsyncs)")
              .Register(registry_)
              .Add({}, prometheus::Histogram::BucketBoundaries{0.0005, 0.001, 0.0025, 0.005, 0.01,
                                                               0.025, 0.05, 0.1, 0.25, 0.5, 1})),
      sessions_ok_(Gauge(registry_, "sush_gossip_sessions_ok", "Gossip sessions completed")),
      sessions_failed_(Gauge(registry_, "sush_gossip_sessions_failed", "Gossip sessions failed")),
      rounds_(Gauge(registry_, "sush_gossip_rounds", "Gossip rounds run")),
      links_opened_(Gauge(registry_, "sush_gossip_links_opened", "Gossip links opened")),
      connects_failed_(
          Gauge(registry_, "sush_gossip_connects_failed", "Outbound gossip connects that failed")),
      bytes_sent_(Gauge(registry_, "sush_gossip_bytes_sent",
                        "Bytes sent on gossip links, counted after each session")),
      bytes_received_(Gauge(registry_, "sush_gossip_bytes_received",
                            "Bytes received on gossip links, counted after each session")) {}

void SledMetrics::BoundaryWrite(double seconds, bool ok) {
  boundary_write_seconds_.Observe(seconds);
  (ok ? boundary_writes_ : boundary_write_errors_).Increment();
}

std::string SledMetrics::Text(const rack::SledCore* core, const gossip::Node* node) {
  if (core != nullptr) {
    jobs_run_.Set(static_cast<double>(core->executions()));
    jobs_skipped_.Set(static_cast<double>(core->skipped()));
    jobs_interrupted_.Set(static_cast<double>(core->interrupted()));
    jobs_running_.Set(static_cast<double>(core->running_jobs()));
  }
  if (node != nullptr) {
    gossip::NodeStats s = node->stats();
    sessions_ok_.Set(static_cast<double>(s.sessions_ok));
    sessions_failed_.Set(static_cast<double>(s.sessions_failed));
    rounds_.Set(static_cast<double>(s.rounds));
    links_opened_.Set(static_cast<double>(s.links_opened));
    connects_failed_.Set(static_cast<double>(s.connects_failed));
    bytes_sent_.Set(static_cast<double>(s.bytes_sent));
    bytes_received_.Set(static_cast<double>(s.bytes_received));
  }
  prometheus::TextSerializer serializer;
  return serializer.Serialize(registry_.Collect());
}

namespace {
template <class F>
Status Timed(SledMetrics& metrics, F&& write) {
  auto start = std::chrono::steady_clock::now();
  Status out = write();
  metrics.BoundaryWrite(
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(),
      out.has_value());
  return out;
}
}  // namespace

Status TimedBoundaryStore::Record(const rack::BoundaryRecord& record) {
  return Timed(metrics_, [&] { return target_.Record(record); });
}

Status TimedBoundaryStore::Reset(const rack::BoundaryRecord& record) {
  return Timed(metrics_, [&] { return target_.Reset(record); });
}

}  // namespace once::sush
