// File: tenant_store.h
//
// TenantStore scopes every execution id to one tenant, so that a tenant can
// never read, list, fence or delete another tenant's execution: the id
// "order-7" of tenant "acme" is stored as "acme:order-7", and only ids that
// start with "acme:" are visible through the decorator (with the prefix
// stripped again on the way out).
//
//   SqliteEventStore& shared = ...;
//   auto acme = TenantStore::Create(shared, "acme");   // Result<unique_ptr<TenantStore>>
//   (*acme)->Append({.execution_id = "order-7", ...});
//
// Tenant names are 1..kTenantBytesMax bytes of [A-Za-z0-9_-], so the first
// ':' ends the tenant and no two (tenant, id) pairs share a stored id. The
// limits seen through the decorator shrink execution_id_bytes_max by the
// prefix. Every capability is scoped (decided kCustom). ListEnded reads the
// wrapped store's list of every tenant's ended executions and keeps this
// tenant's: a page of a small tenant may read many other tenants' entries.
// Thread-safe as the wrapped store.

#pragma once

#include <memory>
#include <optional>
#include <string>

#include "once/store/wrapper.h"

namespace once::store {

struct TenantDecisions {
  static constexpr Decide kAcquireFence = Decide::kCustom;
  static constexpr Decide kAcquireFenceIf = Decide::kCustom;
  static constexpr Decide kAppendIfUnchanged = Decide::kCustom;
  static constexpr Decide kCopyPrefix = Decide::kCustom;
  static constexpr Decide kTruncatePrefixKeeping = Decide::kCustom;
  static constexpr Decide kAcquireFenceIfReadTail = Decide::kCustom;
  static constexpr Decide kOwnership = Decide::kCustom;
  static constexpr Decide kTransaction = Decide::kCustom;  // scopes the returned append
};

class TenantStore final : public EventStoreWrapper<TenantStore, TenantDecisions> {
 public:
  static constexpr size_t kTenantBytesMax = 64;

  // kInvalidArgument for a tenant name outside the alphabet or length, or
  // explicit limits whose ids do not fit the wrapped store with the prefix.
  // `limits`: what callers see (default: the wrapped store's, ids shortened
  // by the prefix).
  static Result<std::unique_ptr<TenantStore>> Create(EventStore& target, std::string tenant,
                                                     std::optional<Limits> limits = std::nullopt);

  Result<int64_t> Append(const AppendRequest& req) override;
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

  Result<int64_t> CustomAcquireFence(std::string_view id);
  Result<int64_t> CustomReadFence(std::string_view id);
  Result<ConditionalAcquire> CustomAcquireFenceIf(std::string_view id, FenceExpectation e);
  Result<AcquireWithTail> CustomAcquireFenceIfReadTail(std::string_view id, FenceExpectation e,
                                                       int64_t read_after);
  Result<int64_t> CustomAppendIfUnchanged(const AppendRequest& req, int64_t observed);
  Status CustomCopyPrefix(std::string_view from, std::string_view to, int64_t through);
  Status CustomTruncatePrefixKeeping(std::string_view id, int64_t first_kept);
  Result<std::optional<RunOwner>> CustomRunOwnerOf(std::string_view id);
  Result<int64_t> CustomAppendInTransaction(std::string_view id, TransactionWorkRef work);

  const std::string& tenant() const { return tenant_; }

 protected:
  std::string_view name() const override { return "TenantStore"; }

 private:
  TenantStore(EventStore& target, std::string tenant, Limits limits);
  // Validates the unscoped id against the decorator's limits, then scopes it.
  Result<std::string> Scope(std::string_view id) const;
  Result<AppendRequest> ScopeRequest(const AppendRequest& req) const;
  Error Unscope(Error e) const;

  std::string tenant_;
  std::string prefix_;  // tenant_ + ':'
  Limits limits_;
};

}  // namespace once::store
