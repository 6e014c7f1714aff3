// sush-server's /metrics (docs/operations.md, "Metrics"): the sled's jobs
// (run, skipped, interrupted, from its boundary record's counts), its
// boundary writes and their latency (TimedBoundaryStore times each write to
// both drives), its gossip sessions and links. Prometheus text through
// prometheus-cpp; the rack libraries know nothing of it.
#pragma once

#include <prometheus/counter.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>

#include <string>

#include "once/gossip/node.h"
#include "once/rack/boundary.h"
#include "once/rack/sled_core.h"

namespace once::sush {

class SledMetrics {
 public:
  SledMetrics();
  // A boundary write (Record or Reset) that took `seconds`; ok or not.
  void BoundaryWrite(double seconds, bool ok);
  // The registry as text, after reading the core's counts and the node's
  // stats (call under the server's lock).
  std::string Text(const rack::SledCore* core, const gossip::Node* node);

 private:
  prometheus::Registry registry_;
  prometheus::Gauge& jobs_run_;
  prometheus::Gauge& jobs_skipped_;
  prometheus::Gauge& jobs_interrupted_;
  prometheus::Gauge& jobs_running_;
  prometheus::Counter& boundary_writes_;
  prometheus::Counter& boundary_write_errors_;
  prometheus::Histogram& boundary_write_seconds_;
  prometheus::Gauge& sessions_ok_;
  prometheus::Gauge& sessions_failed_;
  prometheus::Gauge& rounds_;
  prometheus::Gauge& links_opened_;
  prometheus::Gauge& connects_failed_;
  prometheus::Gauge& bytes_sent_;
  prometheus::Gauge& bytes_received_;
};

// Times every write of the boundary store it wraps into `metrics`.
class TimedBoundaryStore final : public rack::BoundaryStore {
 public:
  TimedBoundaryStore(rack::BoundaryStore& target, SledMetrics& metrics)
      : target_(target), metrics_(metrics) {}
  const rack::BoundaryLoad& loaded() const override { return target_.loaded(); }
  Status Record(const rack::BoundaryRecord& record) override;
  Status Reset(const rack::BoundaryRecord& record) override;
  std::vector<rack::DriveStatus> Drives() const override { return target_.Drives(); }

 private:
  rack::BoundaryStore& target_;
  SledMetrics& metrics_;
};

}  // namespace once::sush
