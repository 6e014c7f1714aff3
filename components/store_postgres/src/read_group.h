// Private: grouped ReadRange calls of one PostgresEventStore.
//
// Leader/follower (group_runner.h): a leader takes up to kReadGroupMax
// queued reads, checks out one pooled connection and answers them all with
// ONE statement (the "read_ranges" statement: an index range scan per read,
// under one snapshot taken after every read of the group was asked), so
// concurrent reads share a round trip instead of paying one each. Each read
// sees every append that committed before its call began, as a lone read
// would. A failed statement or a lost connection fails every read of the
// group with that error (reads change nothing: the callers may retry).

#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "group_runner.h"
#include "once/store/event_store.h"
#include "once/store_postgres/postgres_event_store.h"
#include "pg_conn.h"

namespace once::store::pg {

// One ReadRange: events first..last of `id`, at most `limit` of them.
struct ReadOp {
  std::string_view id;
  int64_t first = 1;
  int64_t last = 0;
  int64_t limit = 0;
  Result<std::vector<Envelope>> result = std::vector<Envelope>{};
};

class ReadGroup final : public GroupRunner<ReadOp> {
 public:
  ReadGroup(ConnectionPool& pool, size_t groups_in_flight_max)
      : GroupRunner(kReadGroupMax, groups_in_flight_max), pool_(pool) {}

  PostgresReadStats stats() const;

 private:
  void RunGroup(std::span<ReadOp* const> group) override;

  ConnectionPool& pool_;
  std::atomic<uint64_t> groups_{0};
  std::atomic<uint64_t> reads_{0};
  std::atomic<uint64_t> largest_{0};
};

// The statement the groups run: $1 ids (text[]), $2 firsts, $3 lasts, $4
// row limits (int8[]); rows (ordinal of the read, then a stored row's
// columns, packed_rows.h), ordered by read and sequence. The grouped
// conditional acquires read their tails with it too (acquire_group.cc).
const std::string& ReadRangesSql();

// The ranges of one ReadRangesSql call, range i at position i.
struct Ranges {
  std::vector<std::string_view> ids;
  std::vector<std::optional<int64_t>> firsts, lasts, limits;

  void Add(std::string_view id, int64_t first, int64_t last, int64_t limit);
  Params ToParams() const;
};

// Decodes the rows of ReadRangesSql for `ranges`, in order: add(i, event)
// for each event of range i within its first, last and limit (a row that
// failed to decode comes as its error).
// kInternal, and nothing more added, when a row names no range.
Status DecodeRanges(const PGresult* rows, const Ranges& ranges,
                    const std::function<void(size_t, Result<Envelope>)>& add);

}  // namespace once::store::pg
