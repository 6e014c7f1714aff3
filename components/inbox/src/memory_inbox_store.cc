#include "once/inbox/memory_inbox_store.h"

#include <algorithm>

namespace once::inbox {

using events::Json;

Result<int64_t> MemoryInboxStore::Put(std::string_view execution_id, std::string_view topic,
                                      const Json& message) {
  ONCE_RETURN_IF_ERROR(ValidatePut(execution_id, topic, message, limits_));
  std::lock_guard lock(mu_);
  auto it = executions_.find(execution_id);
  if (it != executions_.end() && it->second.pending >= limits_.pending_messages_per_execution_max) {
    return PendingLimitError(execution_id, it->second.pending, limits_);
  }
  if (it == executions_.end())
    it = executions_.emplace(std::string(execution_id), Execution{}).first;
  Execution& e = it->second;
  auto t = e.topics.find(topic);
  if (t == e.topics.end()) t = e.topics.emplace(std::string(topic), Topic{}).first;
  int64_t seq = ++t->second.last_seq;
  t->second.messages.emplace(seq, message);
  ++e.pending;
  return seq;
}

Result<std::optional<InboxMessage>> MemoryInboxStore::Get(std::string_view execution_id,
                                                          std::string_view topic, int64_t seq) {
  std::lock_guard lock(mu_);
  auto it = executions_.find(execution_id);
  if (it == executions_.end()) return std::nullopt;
  auto t = it->second.topics.find(topic);
  if (t == it->second.topics.end()) return std::nullopt;
  auto m = t->second.messages.find(seq);
  if (m == t->second.messages.end()) return std::nullopt;
  return InboxMessage{std::string(topic), seq, m->second};
}

Result<std::vector<InboxMessage>> MemoryInboxStore::Pending(std::string_view execution_id) {
  std::lock_guard lock(mu_);
  std::vector<InboxMessage> out;
  auto it = executions_.find(execution_id);
  if (it == executions_.end()) return out;
  for (const auto& [topic, t] : it->second.topics) {
    for (const auto& [seq, message] : t.messages) out.push_back({topic, seq, message});
  }
  return out;
}

Status MemoryInboxStore::Trim(std::string_view execution_id, std::string_view topic,
                              int64_t through_seq) {
  std::lock_guard lock(mu_);
  auto it = executions_.find(execution_id);
  if (it == executions_.end()) return Ok();
  auto t = it->second.topics.find(topic);
  if (t == it->second.topics.end()) return Ok();
  auto& messages = t->second.messages;
  auto end = messages.upper_bound(through_seq);
  it->second.pending -= static_cast<size_t>(std::distance(messages.begin(), end));
  messages.erase(messages.begin(), end);
  return Ok();
}

Status MemoryInboxStore::Forget(std::string_view execution_id) {
  std::lock_guard lock(mu_);
  if (auto it = executions_.find(execution_id); it != executions_.end()) executions_.erase(it);
  return Ok();
}

Result<bool> MemoryInboxStore::Holds(std::string_view execution_id) {
  std::lock_guard lock(mu_);
  return executions_.contains(execution_id);
}

Result<std::vector<std::string>> MemoryInboxStore::Executions(std::string_view after,
                                                              size_t limit) {
  limit = std::min(limit, limits_.executions_page_max);
  std::lock_guard lock(mu_);
  std::vector<std::string> out;
  for (auto it = executions_.upper_bound(after); it != executions_.end() && out.size() < limit;
       ++it) {
    out.push_back(it->first);
  }
  return out;
}

}  // namespace once::inbox
