// File: wrapper.h
//
// EventStoreWrapper: the base for decorators (tenant, sharded, profiling,
// crypto, fault injection). It forwards every core method to the wrapped
// store; a decorator overrides only what it changes.
//
// Optional capabilities must be DECIDED by every decorator, at compile time,
// in a Decisions struct that names each one:
//
//   struct ProfilingDecisions {
//     static constexpr Decide kAcquireFence = Decide::kForward;
//     static constexpr Decide kAcquireFenceIf = Decide::kForward;
//     static constexpr Decide kAppendIfUnchanged = Decide::kForward;
//     static constexpr Decide kCopyPrefix = Decide::kRefuse;
//     static constexpr Decide kTruncatePrefixKeeping = Decide::kCustom;
//     static constexpr Decide kAcquireFenceIfReadTail = Decide::kCustom;
//     static constexpr Decide kOwnership = Decide::kForward;
//     static constexpr Decide kTransaction = Decide::kCustom;
//   };
//   class ProfilingStore final
//       : public EventStoreWrapper<ProfilingStore, ProfilingDecisions> { ... };
//
// A Decisions struct that misses a capability does not compile (the concept
// DecidesEveryCapability). kForward passes the call through (and Supports()
// answers what the wrapped store answers); kRefuse answers kUnsupported;
// kCustom calls the decorator's own method, which must exist with the name
// Custom<Method> (e.g. CustomTruncatePrefixKeeping) or the decorator does not
// compile; Supports() then answers the wrapped store's support.
//
// kOwnership covers RunOwnerOf and the owner fields of appends and acquires.
// A decorator that refuses it must not pass owners on (the wrapped store
// would record them); the ones in this repository forward or scope it.
//
// kTransaction covers AppendInTransaction. Its work returns an append, so a
// decorator that changes appends (ids, payloads) must customize it (kCustom,
// changing the returned request as its Append would) or refuse it.
//
// kAcquireFenceIfReadTail is the conditional acquire plus a read, so it
// follows kAcquireFenceIf: a decorator that refuses the acquire refuses it
// too, and one that customizes the acquire must customize or refuse it (a
// forward would go around the customization). Both rules are checked at
// compile time.

#pragma once

#include <concepts>
#include <memory>
#include <string_view>

#include "once/store/event_store.h"

namespace once::store {

enum class Decide { kForward, kRefuse, kCustom };

template <class D>
concept NamesEveryCapability = requires {
  { D::kAcquireFence } -> std::convertible_to<Decide>;
  { D::kAcquireFenceIf } -> std::convertible_to<Decide>;
  { D::kAppendIfUnchanged } -> std::convertible_to<Decide>;
  { D::kCopyPrefix } -> std::convertible_to<Decide>;
  { D::kTruncatePrefixKeeping } -> std::convertible_to<Decide>;
  { D::kAcquireFenceIfReadTail } -> std::convertible_to<Decide>;
  { D::kOwnership } -> std::convertible_to<Decide>;
  { D::kTransaction } -> std::convertible_to<Decide>;
};

// The combined acquire follows the conditional one (see above).
template <class D>
constexpr bool TailFollowsAcquire() {
  if (D::kAcquireFenceIf == Decide::kRefuse) return D::kAcquireFenceIfReadTail == Decide::kRefuse;
  if (D::kAcquireFenceIf == Decide::kCustom) return D::kAcquireFenceIfReadTail != Decide::kForward;
  return true;
}

template <class D>
concept DecidesEveryCapability = NamesEveryCapability<D> && TailFollowsAcquire<D>();

// Forwards every capability; for decorators that add nothing to them.
struct ForwardEverything {
  static constexpr Decide kAcquireFence = Decide::kForward;
  static constexpr Decide kAcquireFenceIf = Decide::kForward;
  static constexpr Decide kAppendIfUnchanged = Decide::kForward;
  static constexpr Decide kCopyPrefix = Decide::kForward;
  static constexpr Decide kTruncatePrefixKeeping = Decide::kForward;
  static constexpr Decide kAcquireFenceIfReadTail = Decide::kForward;
  static constexpr Decide kOwnership = Decide::kForward;
  static constexpr Decide kTransaction = Decide::kForward;
};

template <class Self, DecidesEveryCapability D>
class EventStoreWrapper : public EventStore {
 public:
  // `target` must outlive the wrapper.
  explicit EventStoreWrapper(EventStore& target) : target_(&target) {}

  Result<int64_t> Append(const AppendRequest& req) override { return target_->Append(req); }
  Result<std::vector<Result<int64_t>>> AppendBatch(
      std::span<const AppendRequest> requests) override {
    return target_->AppendBatch(requests);
  }
  Result<std::vector<Envelope>> ReadRange(std::string_view id, int64_t first,
                                          int64_t last) override {
    return target_->ReadRange(id, first, last);
  }
  Result<int64_t> Head(std::string_view id) override { return target_->Head(id); }
  Result<ExecutionPage> ListExecutions(std::string_view after, size_t limit) override {
    return target_->ListExecutions(after, limit);
  }
  Status DeleteExecution(std::string_view id) override { return target_->DeleteExecution(id); }
  Result<EndedPage> ListEnded(int64_t ended_ms_max, const EndedCursor& after,
                              size_t limit) override {
    return target_->ListEnded(ended_ms_max, after, limit);
  }
  Result<std::vector<Status>> DeleteEnded(std::span<const std::string> ids,
                                          int64_t ended_ms_max) override {
    return target_->DeleteEnded(ids, ended_ms_max);
  }
  const Limits& limits() const override { return target_->limits(); }
  size_t AppendBatchesInFlightUseful() const override {
    return target_->AppendBatchesInFlightUseful();
  }
  bool GroupCommitUseful() const override { return target_->GroupCommitUseful(); }

  bool Supports(Capability c) const override {
    Decide d = Decision(c);
    return d != Decide::kRefuse && target_->Supports(c);
  }

  Result<int64_t> AcquireFence(std::string_view id) override {
    if constexpr (D::kAcquireFence == Decide::kForward)
      return target_->AcquireFence(id);
    else if constexpr (D::kAcquireFence == Decide::kRefuse)
      return Unsupported(Capability::kAcquireFence, name());
    else
      return self().CustomAcquireFence(id);
  }
  Result<int64_t> ReadFence(std::string_view id) override {
    if constexpr (D::kAcquireFence == Decide::kForward)
      return target_->ReadFence(id);
    else if constexpr (D::kAcquireFence == Decide::kRefuse)
      return Unsupported(Capability::kAcquireFence, name());
    else
      return self().CustomReadFence(id);
  }
  Result<ConditionalAcquire> AcquireFenceIf(std::string_view id, FenceExpectation expect) override {
    if constexpr (D::kAcquireFenceIf == Decide::kForward)
      return target_->AcquireFenceIf(id, expect);
    else if constexpr (D::kAcquireFenceIf == Decide::kRefuse)
      return Unsupported(Capability::kAcquireFenceIf, name());
    else
      return self().CustomAcquireFenceIf(id, expect);
  }
  Result<AcquireWithTail> AcquireFenceIfReadTail(std::string_view id, FenceExpectation expect,
                                                 int64_t read_after) override {
    if constexpr (D::kAcquireFenceIfReadTail == Decide::kForward)
      return target_->AcquireFenceIfReadTail(id, expect, read_after);
    else if constexpr (D::kAcquireFenceIfReadTail == Decide::kRefuse)
      return Unsupported(Capability::kAcquireFenceIfReadTail, name());
    else
      return self().CustomAcquireFenceIfReadTail(id, expect, read_after);
  }
  // A forwarded combined acquire forwards its batches too (the wrapped
  // store may make them one round trip); otherwise the default's calls go
  // through this wrapper's AcquireFenceIfReadTail one at a time.
  std::vector<Result<AcquireWithTail>> AcquireFencesIfReadTail(
      std::span<const AcquireIfRead> requests) override {
    if constexpr (D::kAcquireFenceIfReadTail == Decide::kForward)
      return target_->AcquireFencesIfReadTail(requests);
    else
      return EventStore::AcquireFencesIfReadTail(requests);
  }
  Result<int64_t> AppendIfUnchanged(const AppendRequest& req, int64_t observed) override {
    if constexpr (D::kAppendIfUnchanged == Decide::kForward)
      return target_->AppendIfUnchanged(req, observed);
    else if constexpr (D::kAppendIfUnchanged == Decide::kRefuse)
      return Unsupported(Capability::kAppendIfUnchanged, name());
    else
      return self().CustomAppendIfUnchanged(req, observed);
  }
  Status CopyPrefix(std::string_view from, std::string_view to, int64_t through) override {
    if constexpr (D::kCopyPrefix == Decide::kForward)
      return target_->CopyPrefix(from, to, through);
    else if constexpr (D::kCopyPrefix == Decide::kRefuse)
      return Unsupported(Capability::kCopyPrefix, name());
    else
      return self().CustomCopyPrefix(from, to, through);
  }
  Status TruncatePrefixKeeping(std::string_view id, int64_t first_kept) override {
    if constexpr (D::kTruncatePrefixKeeping == Decide::kForward)
      return target_->TruncatePrefixKeeping(id, first_kept);
    else if constexpr (D::kTruncatePrefixKeeping == Decide::kRefuse)
      return Unsupported(Capability::kTruncatePrefixKeeping, name());
    else
      return self().CustomTruncatePrefixKeeping(id, first_kept);
  }

  Result<std::optional<RunOwner>> RunOwnerOf(std::string_view id) override {
    if constexpr (D::kOwnership == Decide::kForward)
      return target_->RunOwnerOf(id);
    else if constexpr (D::kOwnership == Decide::kRefuse)
      return Unsupported(Capability::kOwnership, name());
    else
      return self().CustomRunOwnerOf(id);
  }

  Result<int64_t> AppendInTransaction(std::string_view id, TransactionWorkRef work) override {
    if constexpr (D::kTransaction == Decide::kForward)
      return target_->AppendInTransaction(id, work);
    else if constexpr (D::kTransaction == Decide::kRefuse)
      return Unsupported(Capability::kTransaction, name());
    else
      return self().CustomAppendInTransaction(id, work);
  }

  static constexpr Decide Decision(Capability c) {
    switch (c) {
      case Capability::kAcquireFence:
        return D::kAcquireFence;
      case Capability::kAcquireFenceIf:
        return D::kAcquireFenceIf;
      case Capability::kAppendIfUnchanged:
        return D::kAppendIfUnchanged;
      case Capability::kCopyPrefix:
        return D::kCopyPrefix;
      case Capability::kTruncatePrefixKeeping:
        return D::kTruncatePrefixKeeping;
      case Capability::kAcquireFenceIfReadTail:
        return D::kAcquireFenceIfReadTail;
      case Capability::kOwnership:
        return D::kOwnership;
      case Capability::kTransaction:
        return D::kTransaction;
      case Capability::kCount:
        break;
    }
    return Decide::kRefuse;
  }

 protected:
  EventStore& target() const { return *target_; }
  // Used in kUnsupported messages; override to name the decorator.
  virtual std::string_view name() const { return "decorator"; }

 private:
  Self& self() { return static_cast<Self&>(*this); }
  EventStore* target_;
};

}  // namespace once::store
