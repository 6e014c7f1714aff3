#include "once/visibility/visibility.h"

namespace once::visibility {

Json ToJson(const ExecutionRow& r) {
  Json parked_on = Json::array();
  for (const auto& w : r.parked_on) parked_on.push_back(w);
  return Json{{"execution_id", r.execution_id},
              {"workflow", r.workflow},
              {"status", r.status},
              {"started_ms", r.started_ms},
              {"updated_ms", r.updated_ms},
              {"head", r.head},
              {"fence", r.fence},
              {"park_seq", r.park_seq ? Json(*r.park_seq) : Json()},
              {"parked_on", std::move(parked_on)},
              {"parent_id", r.parent_id.empty() ? Json() : Json(r.parent_id)},
              {"result", r.result}};
}

Json ToJson(const StatusCounts& c) {
  return Json{{"total", c.total},         {"running", c.running},
              {"suspended", c.suspended}, {"completed", c.completed},
              {"failed", c.failed},       {"cancelled", c.cancelled},
              {"continued", c.continued}, {"inbox_pending", c.inbox_pending}};
}

Json ToJson(const TimerInfo& t) {
  return Json{{"execution_id", t.execution_id},
              {"wake_at_ms", t.wake_at_ms},
              {"redrive_attempt", t.redrive_attempt ? Json(*t.redrive_attempt) : Json()},
              {"lease_owner", t.lease_owner},
              {"lease_until_ms", t.lease_until_ms}};
}

Json ToJson(const PendingMessage& m) {
  return Json{{"topic", m.topic}, {"seq", m.seq}, {"message", m.message}};
}

Json ToJson(const QueueRow& q) {
  return Json{{"name", q.name},
              {"concurrency_max", q.concurrency_max},
              {"per_node_concurrency_max", q.per_node_concurrency_max},
              {"rate_max", q.rate_max},
              {"rate_period_ms", q.rate_period_ms},
              {"pending", q.pending},
              {"claimed", q.claimed}};
}

Json ToJson(const NodeRow& n) {
  return Json{{"node_id", n.node_id},
              {"host", n.host},
              {"pid", n.pid},
              {"version", n.version},
              {"started_at_ms", n.started_at_ms},
              {"heartbeat_at_ms", n.heartbeat_at_ms},
              {"lease_ms", n.lease_ms},
              {"stopped", n.stopped},
              {"alive", n.alive},
              {"runs_owned", n.runs_owned}};
}

}  // namespace once::visibility
