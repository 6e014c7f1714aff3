#include "once/store/memory_store.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <set>
#include <string>
#include <thread>
#include <vector>

namespace once::store {
namespace {

using events::KernelEvent;
using events::KernelKind;

AppendRequest FirstAppend(std::string id) {
  AppendRequest req{.execution_id = std::move(id), .expected_next = 1};
  req.events.push_back(KernelEvent(KernelKind::kExecutionStarted, nlohmann::json::object()));
  return req;
}

// The executions are spread over locks by id; a batch is still one
// transaction: a listing (which sees every execution at one instant) never
// holds part of a batch. 64 pairs of ids, most pairs in two different shards.
TEST(MemoryEventStoreTest, ListingNeverSeesPartOfABatch) {
  MemoryEventStore store;
  constexpr int kBatches = 64;
  std::atomic<bool> done{false};
  std::thread writer([&] {
    for (int i = 0; i < kBatches; ++i) {
      std::vector<AppendRequest> batch{FirstAppend("a-" + std::to_string(i)),
                                       FirstAppend("b-" + std::to_string(i))};
      auto r = store.AppendBatch(batch);
      ASSERT_TRUE(r && (*r)[0] && (*r)[1]);
    }
    done = true;
  });
  int listings = 0;
  while (!done || listings == 0) {
    Result<ExecutionPage> page = store.ListExecutions("", 1'000);
    ASSERT_TRUE(page);
    std::set<std::string> ids(page->execution_ids.begin(), page->execution_ids.end());
    for (int i = 0; i < kBatches; ++i) {
      EXPECT_EQ(ids.contains("a-" + std::to_string(i)), ids.contains("b-" + std::to_string(i)))
          << "listing " << listings << " holds half of batch " << i;
    }
    ++listings;
  }
  writer.join();
  EXPECT_EQ(store.ListExecutions("", 1'000)->execution_ids.size(), 2u * kBatches);
}

// Ids in many shards come back in one ascending order, page by page, and a
// listing after a delete or an add sees the change.
TEST(MemoryEventStoreTest, ListsEveryShardInOrder) {
  MemoryEventStore store;
  std::vector<std::string> ids;
  for (int i = 0; i < 100; ++i) ids.push_back("ex-" + std::to_string(i));
  for (const auto& id : ids) ASSERT_TRUE(store.Append(FirstAppend(id)));
  std::sort(ids.begin(), ids.end());
  std::vector<std::string> listed;
  std::string after;
  for (;;) {
    Result<ExecutionPage> page = store.ListExecutions(after, 7);
    ASSERT_TRUE(page);
    listed.insert(listed.end(), page->execution_ids.begin(), page->execution_ids.end());
    if (page->next_after.empty()) break;
    after = page->next_after;
  }
  EXPECT_EQ(listed, ids);
  ASSERT_TRUE(store.DeleteExecution("ex-50"));
  ASSERT_TRUE(store.Append(FirstAppend("ex-500")));
  std::vector<std::string> now = store.ListExecutions("ex-5", 3)->execution_ids;
  EXPECT_EQ(now, (std::vector<std::string>{"ex-500", "ex-51", "ex-52"}));
}

// A moved request's id becomes the log's key; reads still name it.
TEST(MemoryEventStoreTest, MovedAppendKeepsTheIdOnRead) {
  MemoryEventStore store;
  AppendRequest req = FirstAppend("an-execution-id-longer-than-sso");
  req.events.push_back(KernelEvent(KernelKind::kStepCompleted, {{"name", "s"}}));
  ASSERT_EQ(store.Append(std::move(req)).value(), 2);
  Result<std::vector<Envelope>> got = store.ReadRange("an-execution-id-longer-than-sso", 1, kToEnd);
  ASSERT_TRUE(got);
  ASSERT_EQ(got->size(), 2u);
  for (const Envelope& e : *got) EXPECT_EQ(e.execution_id, "an-execution-id-longer-than-sso");
  EXPECT_EQ((*got)[1].sequence, 2);
}

// A moved append leaves the payloads in the request (the runtime's path
// reads them after the append); and a thread's packing buffer, grown by a
// payload near event_bytes_max, serves small appends after it, on one log
// and on others, each read back as written.
TEST(MemoryEventStoreTest, PayloadsStayInAMovedRequestAndPackingBuffersAreReused) {
  MemoryEventStore store;
  AppendRequest req = FirstAppend("big");
  const nlohmann::json big = {{"name", "s"}, {"value", std::string((1 << 20) - 100, 'b')}};
  req.events.push_back(KernelEvent(KernelKind::kStepCompleted, big));
  ASSERT_EQ(store.Append(std::move(req)).value(), 2);
  EXPECT_EQ(req.events[1].payload, big);
  for (int i = 0; i < 3; ++i) {
    AppendRequest next{.execution_id = "big", .expected_next = 3 + i};
    next.events.push_back(KernelEvent(KernelKind::kStepCompleted, {{"name", std::to_string(i)}}));
    ASSERT_EQ(store.Append(next).value(), 3 + i);
    ASSERT_EQ(store.Append(FirstAppend("small-" + std::to_string(i))).value(), 1);
  }
  Result<std::vector<Envelope>> got = store.ReadRange("big", 1, kToEnd);
  ASSERT_TRUE(got);
  ASSERT_EQ(got->size(), 5u);
  EXPECT_EQ((*got)[0].payload, nlohmann::json::object());
  EXPECT_EQ((*got)[1].payload, big);
  for (int i = 0; i < 3; ++i) EXPECT_EQ((*got)[2 + i].payload["name"], std::to_string(i));
  Result<std::vector<Envelope>> small = store.ReadRange("small-2", 1, kToEnd);
  ASSERT_TRUE(small);
  ASSERT_EQ(small->size(), 1u);
  EXPECT_EQ((*small)[0].payload, nlohmann::json::object());
}

}  // namespace
}  // namespace once::store
