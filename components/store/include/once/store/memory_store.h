// File: memory_store.h
//
// MemoryEventStore: the reference EventStore, in process memory. Payloads
// are kept packed (one block of bytes a log) and read back with their
// types, as appended. It offers every optional capability; AcquireFenceIf is one synchronous step
// under the execution's lock (compare the token, binary-search the log to park_seq + 1, scan the
// tail with events::IsAnswering). Nothing survives the process.
//
// Locking: executions are spread over kShards shards by a hash of their id,
// each with its own lock; a call on one execution takes that one lock.
// AppendBatch takes every shard it touches before applying any request (one
// transaction: no reader sees part of a batch); ListExecutions takes them all.
// ListEnded keeps no index: each page walks every log, shard by shard (a
// pass over N executions costs N * N / page: for tests, not for millions).
// DeleteEnded takes one shard at a time: atomic per execution only.
//
//   MemoryEventStore store;                         // system clock
//   MemoryEventStore test_store(limits, manual_clock);

#pragma once

#include <array>
#include <atomic>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "once/base/clock.h"
#include "once/store/event_store.h"
#include "once/store/id_table.h"
#include "once/store/validate.h"

namespace once::store {

class MemoryEventStore final : public EventStore {
 public:
  MemoryEventStore();
  // `clock` must outlive the store.
  MemoryEventStore(Limits limits, const Clock& clock);
  ~MemoryEventStore() override;

  Result<int64_t> Append(const AppendRequest& req) override;
  // The same append, moving what the log keeps of the request (a new log's
  // id, the events' metadata beyond fence and kernel) instead of copying
  // it, whether or not the append lands; payloads are packed either way, and
  // left in req as they were (the runtime's path when it runs on a
  // MemoryEventStore).
  Result<int64_t> Append(AppendRequest&& req);
  Result<std::vector<Result<int64_t>>> AppendBatch(
      std::span<const AppendRequest> requests) override;
  Result<std::vector<Envelope>> ReadRange(std::string_view id, int64_t first,
                                          int64_t last) override;
  Result<int64_t> Head(std::string_view id) override;
  Result<ExecutionPage> ListExecutions(std::string_view after, size_t limit) override;
  Status DeleteExecution(std::string_view id) override;
  Result<EndedPage> ListEnded(int64_t ended_ms_max, const EndedCursor& after,
                              size_t limit) override;
  Result<std::vector<Status>> DeleteEnded(std::span<const std::string> execution_ids,
                                          int64_t ended_ms_max) override;
  const Limits& limits() const override { return limits_; }

  // Everything but kTransaction: there is no database to run SQL on.
  bool Supports(Capability c) const override { return c != Capability::kTransaction; }
  bool GroupCommitUseful() const override { return false; }  // no durable write to share
  Result<int64_t> AcquireFence(std::string_view id) override;
  Result<int64_t> ReadFence(std::string_view id) override;
  Result<ConditionalAcquire> AcquireFenceIf(std::string_view id, FenceExpectation expect) override;
  Result<AcquireWithTail> AcquireFenceIfReadTail(std::string_view id, FenceExpectation expect,
                                                 int64_t read_after) override;
  Result<int64_t> AppendIfUnchanged(const AppendRequest& req, int64_t observed) override;
  Status CopyPrefix(std::string_view from, std::string_view to, int64_t through) override;
  Status TruncatePrefixKeeping(std::string_view id, int64_t first_kept) override;
  Result<std::optional<RunOwner>> RunOwnerOf(std::string_view id) override;
  Result<int64_t> AppendInTransaction(std::string_view, TransactionWorkRef) override {
    return Unsupported(Capability::kTransaction, "memory store");
  }

  // Every run row, by execution id (the memory node registry reads them).
  std::vector<std::pair<std::string, RunOwner>> RunRows();
  // Deletes the run row of `id` if it still names `owner`.
  Status ForgetRun(std::string_view id, std::string_view owner);

 private:
  // What an event keeps at rest beyond its common shape: a kind that is not
  // a kernel kind, or metadata beyond its fence and kernel stamp. The
  // runtime's events have none; a log keeps the few there are beside it.
  struct RareParts {
    std::string kind;  // empty: the event's kind is its kernel_kind
    Json extra;        // metadata.extra
  };
  // An event at rest: its envelope without the execution id (the map's key
  // holds it once; reads fill it in), with its payload packed into its log's
  // `payloads` (packed_json.h: one block a log instead of a tree of blocks an
  // event; reads give back every value with its type), its kind as a kernel
  // kind and its metadata as its two fields (48 bytes an event, where an
  // events::Kind and events::Metadata took 72).
  struct StoredEvent {
    static constexpr uint32_t kNoRare = ~uint32_t{0};
    int64_t sequence = 0;
    int64_t time_ms = 0;
    int64_t fence = 0;      // metadata.fence
    size_t payload_at = 0;  // its payload is payloads[payload_at, payload_at + payload_bytes)
    size_t payload_bytes = 0;
    uint32_t rare = kNoRare;           // its RareParts in its log's `rare`, or kNoRare
    events::KernelKind kernel_kind{};  // its kind, unless its RareParts name one
    bool kernel = false;               // metadata.kernel
  };
  static_assert(sizeof(StoredEvent) <= 48, "an event at rest stays within 48 bytes");
  struct Log {
    std::vector<StoredEvent> events;  // events[i].sequence == first + i
    std::string payloads;             // the events' packed payloads, in order
    std::vector<RareParts> rare;      // what StoredEvent::rare indexes
    int64_t head = 0;

    const RareParts* RareOf(const StoredEvent& e) const {
      return e.rare == StoredEvent::kNoRare ? nullptr : &rare[e.rare];
    }
    // The kind's name when it is not a kernel kind (StageEvents interns
    // those), or null.
    const std::string* NamedKind(const StoredEvent& e) const {
      const RareParts* parts = RareOf(e);
      return parts && !parts->kind.empty() ? &parts->kind : nullptr;
    }
    std::string_view KindOf(const StoredEvent& e) const;
    bool Answering(const StoredEvent& e) const;
  };
  enum class GuardKind { kFence, kIfUnchanged };
  template <class V>
  using ById = internal::IdTable<V>;
  // An execution id with its hash (IdTable::HashOf), hashed once a call: the
  // hash's high bits pick the shard, its low bits the slot in each of the
  // shard's tables.
  struct Key {
    explicit Key(std::string_view id) : id(id), hash(ById<int64_t>::HashOf(id)) {}
    Key(std::string_view id, uint64_t hash) : id(id), hash(hash) {}
    std::string_view id;
    uint64_t hash;
  };

  // The executions whose ids hash to one shard, under that shard's lock.
  // Calls on different executions rarely share a lock: with many threads on
  // few cores, one store-wide lock was taken over by whoever the scheduler
  // preempted inside it (64 client threads: ~20% of CPU in futex calls).
  // A cache line of its own: appends on different cores lock different
  // shards without moving each other's lines.
  struct alignas(64) Shard {
    std::mutex mu;
    ById<Log> logs;        // GUARDED_BY(mu)
    ById<int64_t> fences;  // GUARDED_BY(mu)
    ById<RunOwner> runs;   // GUARDED_BY(mu)
  };
  static constexpr size_t kShards = 16;
  Shard& ShardOf(const Key& key) { return shards_[ShardIndex(key)]; }
  static size_t ShardIndex(const Key& key);

  // An append checked, its payloads packed and, for a first append, the
  // log it creates built, all before any lock is taken: what is left under
  // the shard's lock is the guard, the sequence, and moving the new log in
  // (or, on a log that exists, copying the packed bytes to its end). Done
  // under the lock, packing and building were most of the time a shard was
  // held, and a thread preempted there stalled every thread that wanted the
  // shard (BENCHMARKS.md, "Issue 20: the memory store's work outside its
  // locks").
  struct Prepared {
    CheckedAppend checked;
    std::string packed;               // every event's payload packed, in order
    std::vector<size_t> payload_end;  // event i's bytes end here in `packed`
    Log fresh;                        // a first append's log, when it creates it:
    bool has_fresh = false;           // then this is set
    // Its buffers serve the next append too (PrepareInScratch): a new log
    // copies the packed bytes instead of taking them.
    bool reused = false;
  };
  // Checks req (CheckAppend), packs its payloads into `into` (whose buffers
  // are reused) and, when req.expected_next is 1, builds its log in
  // into.fresh: copying what its events have beyond the common shape, or
  // moving it when `movable` (req's are then left moved-from, whether or not
  // it lands).
  Status Prepare(const AppendRequest& req, bool movable, Prepared& into) const;
  // Prepare into this thread's own Prepared (no allocation once warm but
  // the new log's own).
  Result<Prepared*> PrepareInScratch(const AppendRequest& req, bool movable) const;
  // Appends req's events to log.events as the log keeps them, each payload
  // at `base` + its place in prepared.packed, and what they have beyond the
  // common shape to log.rare. Moves metadata beyond the two fields when
  // `movable`.
  static void StageEvents(const AppendRequest& req, const Prepared& prepared, size_t base,
                          bool movable, Log& log);

  // Requires shard.mu. `prepared` is Prepare(req, movable); its log is
  // moved into the store. Moves the id of a new log when `movable`; req's
  // payloads are never moved from. `key` is Key(req.execution_id).
  Result<int64_t> AppendLocked(Shard& shard, const Key& key, const AppendRequest& req,
                               Prepared& prepared, GuardKind guard, int64_t token,
                               bool movable = false);
  // Require shard.mu.
  static bool EndedByLocked(const Shard& shard, const Key& key, int64_t ended_ms_max);
  static int64_t FenceLocked(const Shard& shard, const Key& key);
  void SetRunLocked(Shard& shard, const Key& key, std::string_view owner, RunRowChange change);
  static bool OwnerIsLocked(const Shard& shard, const Key& key, std::string_view expected);
  ConditionalAcquire AcquireIfLocked(Shard& shard, const Key& key, FenceExpectation expect);
  std::vector<Envelope> ReadLocked(const Shard& shard, const Key& key, int64_t first,
                                   int64_t last) const;
  // Erases what the log's deletion leaves of the execution: its run row, and
  // a fences row that holds no token.
  static void ForgetDeletedLocked(Shard& shard, const Key& key);
  // The envelope that `e` of `log` (execution `id`) stands for.
  Envelope EnvelopeOf(std::string_view id, const Log& log, const StoredEvent& e) const;
  void MarkIdsChanged() {
    if (!ids_changed_.load(std::memory_order_relaxed)) {
      ids_changed_.store(true, std::memory_order_relaxed);
    }
  }

  Limits limits_;
  std::unique_ptr<SystemClock> owned_clock_;
  const Clock& clock_;
  // Hashed, not ordered: an append finds its log in O(1) (an ordered map of
  // 30,000 ids was a cache miss per tree level on every append).
  std::array<Shard, kShards> shards_;
  // Set (under a shard's lock) when a log is added or removed; written only
  // when it changes, so appends on different cores do not move its line.
  alignas(64) std::atomic<bool> ids_changed_{false};
  // Every shard's ids in order, for ListExecutions (which holds every shard
  // lock and list_mu_); rebuilt there after ids_changed_ (listing is rare,
  // appends are not).
  std::mutex list_mu_;
  std::vector<std::string_view> sorted_ids_;  // GUARDED_BY(list_mu_ and every shard's mu)
};

}  // namespace once::store
