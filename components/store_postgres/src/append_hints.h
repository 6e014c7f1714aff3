// Private: what committed appends taught a store about each execution's log,
// so that the next lean append can skip its predecessor probe.
//
// The fact kept per execution: "while the fence row version V is visible,
// the log holds the row at `head`". It is learned from an append statement
// that inserted rows up to `head` and read V from the same snapshot, and it
// stays true for as long as V is visible: events leave a log only through
// DeleteExecution, which renews the execution's fence row (a new version, so
// V is no longer visible once it commits), and TruncatePrefixKeeping, which
// keeps the newest row. An append at head + 1 sends V; the statement skips
// the probe of the row at head only if the fence row it reads is still V
// (same xmin and ctid), and probes as before otherwise. A stale or missing
// entry therefore costs a probe, never a wrong verdict. Executions without a
// fence row always probe.

#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>

namespace once::store::pg {

// The fewest requests of a lean append that use hints. The hinted statement
// costs more per statement (two more arrays, the fence-row version read for
// first appends: single-event appends went ~166 -> ~175 us of CPU each,
// paired) and saves about 1 us a request (the probe), so lone appends and
// small batches run the plain statement and leave hints as they are.
inline constexpr size_t kHintedRequestsMin = 8;

// A version of a fence row: the transaction that wrote it (xmin) and where
// it is (ctid). Both are compared: mistaking a later version for this one
// would take the transaction with the same 32-bit id, 2^32 transactions
// later, rewriting this execution's fence row into the same slot while the
// entry is still remembered.
struct FenceVersion {
  uint32_t xmin = 0;
  uint32_t block = 0;
  uint16_t offset = 0;

  bool operator==(const FenceVersion&) const = default;
};

// Parses the text "<xmin> (<block>,<offset>)" of `xmin::text || ' ' ||
// ctid::text`; nullopt when malformed.
std::optional<FenceVersion> ParseFenceVersion(std::string_view text);

struct AppendHintCounts {
  uint64_t hinted = 0;   // requests sent with a fence row version
  uint64_t learned = 0;  // versions learned from append statements
  uint64_t entries = 0;  // executions known now (at most executions_max)
  uint64_t clears = 0;   // times the table was full and cleared
  // Lone appends (CountLone): landed by the bare insert, or refused by it.
  uint64_t lone_landed = 0;
  uint64_t lone_refused = 0;
};

// Thread-safe. executions_max bounds the executions known; inserting into a
// full table clears it first (the next appends of those executions probe
// and learn again). executions_max = 0 turns hints off.
class AppendHints {
 public:
  explicit AppendHints(size_t executions_max) : executions_max_(executions_max) {}

  // What to send with an append of `id` at `expected_next`.
  struct Ask {
    std::optional<FenceVersion> version;  // row expected_next - 1 exists while it is visible
    bool learn = false;                   // ask the statement for the fence row's version
  };
  Ask Before(std::string_view id, int64_t expected_next);

  // After the append of `id` committed up to `head`. `learned` is the
  // version the statement read (when Ask::learn), or nullopt to keep the
  // known one; a statement that learned "no fence row" passes a zero version.
  void Landed(std::string_view id, int64_t head, std::optional<FenceVersion> learned);

  // The execution's append was refused, or its outcome is not committed
  // knowledge (a replay in an explicit transaction): learn again next time.
  void Forget(std::string_view id);

  // How a lone append went (one lean request of one event: it uses no
  // hints, sql::LoneInsertSql): landed by the bare insert, or refused by it
  // and answered by the statement with a verdict. Diagnostics only.
  void CountLone(bool landed);

  AppendHintCounts counts() const;

 private:
  struct Entry {
    FenceVersion version;
    int64_t head = 0;
  };
  struct Hash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };

  const size_t executions_max_;
  mutable std::mutex mu_;
  std::unordered_map<std::string, Entry, Hash, std::equal_to<>> entries_;  // guarded by mu_
  AppendHintCounts counts_;                                                // guarded by mu_
  std::atomic<uint64_t> lone_landed_{0};
  std::atomic<uint64_t> lone_refused_{0};
};

}  // namespace once::store::pg
