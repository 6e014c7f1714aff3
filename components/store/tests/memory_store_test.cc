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

}  // namespace
}  // namespace once::store
