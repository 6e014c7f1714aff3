#include <gtest/gtest.h>

#include "once/store/memory_store.h"
#include "once/store_decorators/profiling_store.h"
#include "once/store_decorators/sharded_store.h"
#include "once/store_decorators/tenant_store.h"

namespace once::store {
namespace {

using events::KernelEvent;
using events::KernelKind;

AppendRequest Start(std::string id) {
  return {.execution_id = std::move(id),
          .expected_next = 1,
          .events = {KernelEvent(KernelKind::kExecutionStarted, nlohmann::json::object())}};
}

TEST(TenantStoreTest, TenantsCannotSeeOrFenceEachOther) {
  MemoryEventStore shared;
  auto acme = TenantStore::Create(shared, "acme").value();
  auto umbrella = TenantStore::Create(shared, "umbrella").value();
  ASSERT_TRUE(acme->Append(Start("order-7")));
  EXPECT_EQ(umbrella->Head("order-7").value(), 0);
  EXPECT_EQ(acme->Head("order-7").value(), 1);
  EXPECT_EQ(shared.Head("acme:order-7").value(), 1);
  // Fencing through one tenant does not touch the other's execution of the same name.
  ASSERT_TRUE(umbrella->Append(Start("order-7")));
  EXPECT_EQ(umbrella->AcquireFence("order-7").value(), 1);
  EXPECT_EQ(acme->ReadFence("order-7").value(), 0);
  auto events = acme->ReadRange("order-7", 1, kToEnd).value();
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].execution_id, "order-7");
  auto page = acme->ListExecutions("", 10).value();
  EXPECT_EQ(page.execution_ids, std::vector<std::string>{"order-7"});
}

TEST(TenantStoreTest, RejectsBadTenantsAndShrinksIdLimit) {
  MemoryEventStore shared;
  EXPECT_FALSE(TenantStore::Create(shared, ""));
  EXPECT_FALSE(TenantStore::Create(shared, "a:b"));
  EXPECT_FALSE(TenantStore::Create(shared, std::string(65, 'a')));
  auto t = TenantStore::Create(shared, "abc").value();
  EXPECT_EQ(t->limits().execution_id_bytes_max, shared.limits().execution_id_bytes_max - 4);
  auto r = t->Append(Start(std::string(252, 'x')));
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, ErrorCode::kInvalidArgument);
  EXPECT_TRUE(t->Append(Start(std::string(251, 'x'))));
}

TEST(ShardedStoreTest, RoutesAndMergesListings) {
  MemoryEventStore a, b, c;
  ShardedStore store({&a, &b, &c});
  std::vector<AppendRequest> batch;
  for (int i = 0; i < 30; ++i) batch.push_back(Start("e" + std::to_string(100 + i)));
  auto results = store.AppendBatch(batch).value();
  for (auto& r : results) ASSERT_TRUE(r);
  EXPECT_GT(a.ListExecutions("", 100)->execution_ids.size(), 0u);
  EXPECT_GT(b.ListExecutions("", 100)->execution_ids.size(), 0u);
  std::vector<std::string> all;
  std::string after;
  do {
    auto page = store.ListExecutions(after, 7).value();
    all.insert(all.end(), page.execution_ids.begin(), page.execution_ids.end());
    after = page.next_after;
  } while (!after.empty());
  ASSERT_EQ(all.size(), 30u);
  EXPECT_TRUE(std::is_sorted(all.begin(), all.end()));
  EXPECT_EQ(all.front(), "e100");
}

// Says its appends are durable writes, whatever it wraps (as SQLite's and
// PostgreSQL's are).
class DurableLikeStore final : public EventStoreWrapper<DurableLikeStore, ForwardEverything> {
 public:
  using EventStoreWrapper::EventStoreWrapper;
  bool GroupCommitUseful() const override { return true; }
};

// Whether group commit helps a store goes through every decorator: the
// memory store has no durable write to share, wrapped or not; a sharded
// store's answer is yes if any shard's is.
TEST(DecoratorsTest, GroupCommitUsefulIsTheWrappedStoresAnswer) {
  MemoryEventStore memory, other;
  EXPECT_FALSE(memory.GroupCommitUseful());
  auto tenant = TenantStore::Create(memory, "acme").value();
  EXPECT_FALSE(tenant->GroupCommitUseful());
  ManualClock clock;
  ProfilingStore profiled(*tenant, clock);
  EXPECT_FALSE(profiled.GroupCommitUseful());
  EXPECT_FALSE(ShardedStore({&memory, &other}).GroupCommitUseful());

  DurableLikeStore durable(other);
  EXPECT_TRUE(ProfilingStore(durable, clock).GroupCommitUseful());
  EXPECT_TRUE(ShardedStore({&memory, &durable}).GroupCommitUseful());
}

TEST(ProfilingStoreTest, CountsCallsAndErrors) {
  MemoryEventStore inner;
  ManualClock clock;
  ProfilingStore store(inner, clock);
  ASSERT_TRUE(store.Append(Start("x")));
  EXPECT_FALSE(store.Append(Start("x")));  // sequence conflict
  ASSERT_TRUE(store.AcquireFence("x"));
  auto stats = store.Snapshot();
  EXPECT_EQ(stats["Append"].calls, 2);
  EXPECT_EQ(stats["Append"].errors, 1);
  EXPECT_EQ(stats["AcquireFence"].calls, 1);
}

}  // namespace
}  // namespace once::store

#include "once/store_decorators/crypto_store.h"

namespace once::store {
namespace {

TEST(CryptoStoreTest, SealsPayloadsAndShreddingMakesThemUnreadable) {
  MemoryEventStore inner;
  MemoryKeyVault vault;
  CryptoStore store(inner, vault);
  AppendRequest req = Start("order-7");
  req.events[0].payload = {{"card", "4111"}};
  ASSERT_TRUE(store.Append(req));
  auto raw = inner.ReadRange("order-7", 1, kToEnd).value();
  EXPECT_EQ(raw[0].payload.dump().find("4111"), std::string::npos);
  EXPECT_TRUE(raw[0].payload.contains("$sealed"));
  EXPECT_TRUE(raw[0].is_kernel());  // metadata stays in the clear
  auto read = store.ReadRange("order-7", 1, kToEnd).value();
  EXPECT_EQ(read[0].payload["card"], "4111");

  ASSERT_TRUE(vault.Shred("order-7"));
  auto shredded = store.ReadRange("order-7", 1, kToEnd);
  ASSERT_FALSE(shredded);
  EXPECT_EQ(shredded.error().code, ErrorCode::kPayloadShredded);
  // The kernel still sees the log's shape: fences work on a shredded log.
  EXPECT_EQ(store.AcquireFence("order-7").value(), 1);
  EXPECT_EQ(store.Head("order-7").value(), 1);
}

TEST(CryptoStoreTest, MovedCiphertextDoesNotOpen) {
  MemoryEventStore inner;
  MemoryKeyVault vault;
  CryptoStore store(inner, vault);
  AppendRequest req = Start("x");
  req.events.push_back(events::AppEvent("a.b", {{"v", 1}}));
  ASSERT_TRUE(store.Append(req));
  auto raw = inner.ReadRange("x", 1, kToEnd).value();
  // Swap the two sealed payloads underneath the decorator.
  MemoryEventStore tampered;
  AppendRequest swapped{.execution_id = "x", .expected_next = 1, .events = raw};
  std::swap(swapped.events[0].payload, swapped.events[1].payload);
  ASSERT_TRUE(tampered.Append(swapped));
  CryptoStore reader(tampered, vault);
  auto r = reader.ReadRange("x", 1, kToEnd);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, ErrorCode::kCorruption);
}

}  // namespace
}  // namespace once::store
