// The operator's commands (cli.cc, seed.cc); main.cc parses their flags.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "once/base/clock.h"
#include "once/base/result.h"
#include "once/inbox/inbox_store.h"
#include "once/nodes/node_registry.h"
#include "once/queues/queue_store.h"
#include "once/store/event_store.h"
#include "once/timers/timer_store.h"
#include "once/visibility/visibility.h"
#include "ops.h"

namespace once::loom_app {

// Which store: --db FILE, or --url URL [--schema S], or $LOOM_URL.
struct StoreFlags {
  std::string db;
  std::string url;
  std::string schema = "public";
  bool json = false;
  Result<visibility::Target> ToTarget() const;
};

struct ListFlags {
  std::string status, workflow, parked_on, id_prefix, cursor;
  std::string started_after, started_before, updated_after, updated_before;
  size_t limit = 50;
};

// Unix ms, or a UTC date (2024-05-01) or time (2024-05-01T12:00:00[Z]); "" = 0.
Result<int64_t> ParseTimeArg(const std::string& text);

int RunList(const StoreFlags& flags, const ListFlags& list);
int RunShow(const StoreFlags& flags, const std::string& id, size_t events_max);
int RunCancel(const StoreFlags& flags, const std::string& id, const std::string& reason);
int RunResume(const StoreFlags& flags, const std::string& id);
int RunSend(const StoreFlags& flags, const std::string& id, const std::string& topic,
            const std::string& message);
int RunFork(const StoreFlags& flags, const std::string& id, int64_t from_step,
            const std::string& new_id);
int RunTimers(const StoreFlags& flags, int64_t due_within_ms, size_t limit,
              const std::string& cursor);
int RunNodes(const StoreFlags& flags);
int RunQueues(const StoreFlags& flags);
int RunRetention(const StoreFlags& flags, int64_t age_ms, bool dry_run, RetentionPace pace);
// Real executions for demos, tests and benchmarks (seed.cc).
// With `node` non-empty the seeding App is that Loom node (docs/nodes.md).
// The stores of a Loom process on one database (seed.cc): events, timers,
// inbox; with as_node also the node registry and the queue store.
struct NodeStores {
  std::unique_ptr<store::EventStore> events;
  std::unique_ptr<timers::TimerStore> timers;
  std::unique_ptr<inbox::InboxStore> inbox;
  std::unique_ptr<nodes::NodeRegistry> nodes;  // as_node only
  std::unique_ptr<queues::QueueStore> queues;  // as_node only
};
Result<NodeStores> OpenNodeStores(const visibility::Target& target, const Clock& clock,
                                  bool as_node);

int RunSeed(const StoreFlags& flags, int64_t executions, int workers, const std::string& node);

}  // namespace once::loom_app
