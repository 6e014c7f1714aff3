// File: memory_inbox_store.h
//
// MemoryInboxStore: the reference InboxStore, in process memory. Messages
// die with the process: for tests and the memory backend only.
//
//   MemoryInboxStore store;
//   store.Put("order-7", "approve", "yes");

#pragma once

#include <map>
#include <mutex>

#include "once/inbox/inbox_store.h"

namespace once::inbox {

class MemoryInboxStore final : public InboxStore {
 public:
  explicit MemoryInboxStore(InboxLimits limits = {}) : limits_(limits) {}

  Result<int64_t> Put(std::string_view execution_id, std::string_view topic,
                      const events::Json& message) override;
  Result<std::optional<InboxMessage>> Get(std::string_view execution_id, std::string_view topic,
                                          int64_t seq) override;
  Result<std::vector<InboxMessage>> Pending(std::string_view execution_id) override;
  Status Trim(std::string_view execution_id, std::string_view topic, int64_t through_seq) override;
  Status Forget(std::string_view execution_id) override;
  Result<bool> Holds(std::string_view execution_id) override;
  Result<std::vector<std::string>> Executions(std::string_view after, size_t limit) override;
  const InboxLimits& limits() const override { return limits_; }

 private:
  struct Topic {
    int64_t last_seq = 0;
    std::map<int64_t, events::Json> messages;  // by seq
  };
  struct Execution {
    std::map<std::string, Topic, std::less<>> topics;
    size_t pending = 0;
  };

  InboxLimits limits_;
  std::mutex mu_;
  std::map<std::string, Execution, std::less<>> executions_;  // GUARDED_BY(mu_)
};

}  // namespace once::inbox
