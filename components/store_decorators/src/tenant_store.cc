#include "once/store_decorators/tenant_store.h"

#include "once/store/validate.h"

namespace once::store {
namespace {

bool ValidTenant(std::string_view t) {
  if (t.empty() || t.size() > TenantStore::kTenantBytesMax) return false;
  for (char c : t) {
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '_' || c == '-';
    if (!ok) return false;
  }
  return true;
}

}  // namespace

Result<std::unique_ptr<TenantStore>> TenantStore::Create(EventStore& target, std::string tenant,
                                                         std::optional<Limits> limits) {
  if (!ValidTenant(tenant)) {
    return MakeError(ErrorCode::kInvalidArgument, "tenant names are 1..64 bytes of [A-Za-z0-9_-]",
                     tenant);
  }
  if (tenant.size() + 2 > target.limits().execution_id_bytes_max) {
    return MakeError(ErrorCode::kInvalidArgument, "tenant name leaves no room for ids", tenant);
  }
  size_t prefix_bytes = tenant.size() + 1;
  Limits seen = target.limits();
  seen.execution_id_bytes_max -= prefix_bytes;
  if (limits) {
    if (limits->execution_id_bytes_max > seen.execution_id_bytes_max) {
      return MakeError(ErrorCode::kInvalidArgument,
                       "ids of " + std::to_string(limits->execution_id_bytes_max) +
                           " bytes do not fit the wrapped store with the tenant prefix",
                       tenant);
    }
    seen = *limits;
  }
  return std::unique_ptr<TenantStore>(new TenantStore(target, std::move(tenant), seen));
}

TenantStore::TenantStore(EventStore& target, std::string tenant, Limits limits)
    : EventStoreWrapper(target),
      tenant_(std::move(tenant)),
      prefix_(tenant_ + ":"),
      limits_(limits) {}

Result<std::string> TenantStore::Scope(std::string_view id) const {
  ONCE_RETURN_IF_ERROR(ValidateExecutionId(id, limits_));
  std::string scoped = prefix_;
  scoped.append(id);
  return scoped;
}

Error TenantStore::Unscope(Error e) const {
  if (e.subject.starts_with(prefix_)) e.subject.erase(0, prefix_.size());
  return e;
}

Result<AppendRequest> TenantStore::ScopeRequest(const AppendRequest& req) const {
  ONCE_RETURN_IF_ERROR(CheckJsonDepth(req, limits_));  // before the copy: it recurses
  // An owner follows the id rules of the limits callers see.
  if (!req.owner.empty()) ONCE_RETURN_IF_ERROR(ValidateOwner(req.owner, limits_));
  AppendRequest scoped = req;
  ONCE_ASSIGN_OR_RETURN(scoped.execution_id, Scope(req.execution_id));
  for (auto& e : scoped.events) {
    if (!e.execution_id.empty()) {
      if (e.execution_id != req.execution_id) {
        return MakeError(ErrorCode::kInvalidArgument, "event names another execution",
                         req.execution_id);
      }
      e.execution_id = scoped.execution_id;
    }
  }
  return scoped;
}

Result<int64_t> TenantStore::Append(const AppendRequest& req) {
  ONCE_ASSIGN_OR_RETURN(AppendRequest scoped, ScopeRequest(req));
  auto r = target().Append(scoped);
  if (!r) return std::unexpected(Unscope(r.error()));
  return r;
}

Result<std::vector<Result<int64_t>>> TenantStore::AppendBatch(
    std::span<const AppendRequest> requests) {
  ONCE_RETURN_IF_ERROR(ValidateBatchShape(requests, limits_));
  // A request that cannot be scoped fails alone, like any refused request.
  std::vector<AppendRequest> scoped;
  std::vector<size_t> positions;
  std::vector<Result<int64_t>> out(requests.size(), 0);
  for (size_t i = 0; i < requests.size(); ++i) {
    Result<AppendRequest> s = ScopeRequest(requests[i]);
    if (!s) {
      out[i] = std::unexpected(s.error());
      continue;
    }
    scoped.push_back(std::move(*s));
    positions.push_back(i);
  }
  if (scoped.empty()) return out;
  ONCE_ASSIGN_OR_RETURN(auto results, target().AppendBatch(scoped));
  for (size_t k = 0; k < positions.size(); ++k) {
    Result<int64_t>& r = results[k];
    out[positions[k]] = r ? std::move(r) : std::unexpected(Unscope(r.error()));
  }
  return out;
}

Result<std::vector<Envelope>> TenantStore::ReadRange(std::string_view id, int64_t first,
                                                     int64_t last) {
  ONCE_ASSIGN_OR_RETURN(std::string scoped, Scope(id));
  ONCE_ASSIGN_OR_RETURN(auto events, target().ReadRange(scoped, first, last));
  for (auto& e : events) e.execution_id = std::string(id);
  return events;
}

Result<int64_t> TenantStore::Head(std::string_view id) {
  ONCE_ASSIGN_OR_RETURN(std::string scoped, Scope(id));
  return target().Head(scoped);
}

Result<ExecutionPage> TenantStore::ListExecutions(std::string_view after, size_t limit) {
  if (limit == 0) return MakeError(ErrorCode::kInvalidArgument, "ListExecutions limit must be > 0");
  limit = std::min(limit, limits_.list_page_executions_max);
  std::string cursor = prefix_ + std::string(after);
  ExecutionPage page;
  while (page.execution_ids.size() < limit) {
    ONCE_ASSIGN_OR_RETURN(ExecutionPage inner,
                          target().ListExecutions(cursor, limit - page.execution_ids.size()));
    for (auto& id : inner.execution_ids) {
      if (!std::string_view(id).starts_with(prefix_)) return page;  // past this tenant
      page.execution_ids.push_back(id.substr(prefix_.size()));
    }
    if (inner.next_after.empty()) return page;
    cursor = inner.next_after;
  }
  page.next_after = page.execution_ids.back();
  return page;
}

Status TenantStore::DeleteExecution(std::string_view id) {
  ONCE_ASSIGN_OR_RETURN(std::string scoped, Scope(id));
  return target().DeleteExecution(scoped);
}

// The wrapped store lists every tenant's executions in one order; this
// tenant's are those with its prefix (a page may read other tenants' rows).
Result<EndedPage> TenantStore::ListEnded(int64_t ended_ms_max, const EndedCursor& after,
                                         size_t limit) {
  ONCE_ASSIGN_OR_RETURN(limit, EndedPageLimit(limit, limits_));
  EndedCursor cursor = after;
  cursor.execution_id = prefix_ + after.execution_id;
  EndedPage page;
  for (;;) {
    ONCE_ASSIGN_OR_RETURN(EndedPage inner, target().ListEnded(ended_ms_max, cursor, limit));
    for (EndedExecution& e : inner.executions) {
      if (!std::string_view(e.execution_id).starts_with(prefix_)) continue;
      e.execution_id.erase(0, prefix_.size());
      page.executions.push_back(std::move(e));
      if (page.executions.size() == limit) {
        page.next_after = page.executions.back().Place();
        return page;
      }
    }
    if (!inner.next_after) return page;
    cursor = std::move(*inner.next_after);
  }
}

Result<std::vector<Status>> TenantStore::DeleteEnded(std::span<const std::string> ids,
                                                     int64_t ended_ms_max) {
  ONCE_RETURN_IF_ERROR(CheckDeleteEnded(ids, limits_));
  std::vector<Status> out(ids.size(), Ok());
  std::vector<std::string> scoped;
  std::vector<size_t> positions;
  for (size_t i = 0; i < ids.size(); ++i) {
    Result<std::string> one = Scope(ids[i]);
    if (!one) {
      out[i] = std::unexpected(one.error());
      continue;
    }
    scoped.push_back(std::move(*one));
    positions.push_back(i);
  }
  if (scoped.empty()) return out;
  auto inner = target().DeleteEnded(scoped, ended_ms_max);
  if (!inner) return std::unexpected(Unscope(inner.error()));
  for (size_t k = 0; k < positions.size(); ++k) {
    Status& one = (*inner)[k];
    out[positions[k]] = one ? Ok() : Status(std::unexpected(Unscope(one.error())));
  }
  return out;
}

Result<int64_t> TenantStore::CustomAcquireFence(std::string_view id) {
  ONCE_ASSIGN_OR_RETURN(std::string scoped, Scope(id));
  return target().AcquireFence(scoped);
}

Result<int64_t> TenantStore::CustomReadFence(std::string_view id) {
  ONCE_ASSIGN_OR_RETURN(std::string scoped, Scope(id));
  return target().ReadFence(scoped);
}

Result<ConditionalAcquire> TenantStore::CustomAcquireFenceIf(std::string_view id,
                                                             FenceExpectation e) {
  ONCE_RETURN_IF_ERROR(ValidateFenceIf(id, e, limits_));
  ONCE_ASSIGN_OR_RETURN(std::string scoped, Scope(id));
  return target().AcquireFenceIf(scoped, e);
}

Result<AcquireWithTail> TenantStore::CustomAcquireFenceIfReadTail(std::string_view id,
                                                                  FenceExpectation e,
                                                                  int64_t read_after) {
  ONCE_RETURN_IF_ERROR(ValidateFenceIf(id, e, limits_, read_after));
  ONCE_ASSIGN_OR_RETURN(std::string scoped, Scope(id));
  ONCE_ASSIGN_OR_RETURN(AcquireWithTail out,
                        target().AcquireFenceIfReadTail(scoped, e, read_after));
  for (auto& ev : out.tail) ev.execution_id = std::string(id);
  return out;
}

Result<int64_t> TenantStore::CustomAppendIfUnchanged(const AppendRequest& req, int64_t observed) {
  ONCE_ASSIGN_OR_RETURN(AppendRequest scoped, ScopeRequest(req));
  auto r = target().AppendIfUnchanged(scoped, observed);
  if (!r) return std::unexpected(Unscope(r.error()));
  return r;
}

// The SQL runs on the wrapped store's database as it is (tables are not
// scoped); the append is scoped as Append scopes it.
Result<int64_t> TenantStore::CustomAppendInTransaction(std::string_view id,
                                                       TransactionWorkRef work) {
  ONCE_ASSIGN_OR_RETURN(std::string scoped_id, Scope(id));
  auto scoped_work = [&](SqlTransaction& sql) -> Result<AppendRequest> {
    ONCE_ASSIGN_OR_RETURN(AppendRequest req, work(sql));
    return ScopeRequest(req);
  };
  auto r = target().AppendInTransaction(scoped_id, scoped_work);
  if (!r) return std::unexpected(Unscope(r.error()));
  return r;
}

Status TenantStore::CustomCopyPrefix(std::string_view from, std::string_view to, int64_t through) {
  ONCE_ASSIGN_OR_RETURN(std::string scoped_from, Scope(from));
  ONCE_ASSIGN_OR_RETURN(std::string scoped_to, Scope(to));
  return target().CopyPrefix(scoped_from, scoped_to, through);
}

Status TenantStore::CustomTruncatePrefixKeeping(std::string_view id, int64_t first_kept) {
  ONCE_ASSIGN_OR_RETURN(std::string scoped, Scope(id));
  return target().TruncatePrefixKeeping(scoped, first_kept);
}

Result<std::optional<RunOwner>> TenantStore::CustomRunOwnerOf(std::string_view id) {
  ONCE_ASSIGN_OR_RETURN(std::string scoped, Scope(id));
  return target().RunOwnerOf(scoped);
}

}  // namespace once::store
