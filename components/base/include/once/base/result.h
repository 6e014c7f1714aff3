// File: result.h
//
// Errors are values. Every fallible function returns Result<T> (std::expected
// over Error) or Status (Result<void>). An Error carries a code from a small
// fixed set, a human message, and for the codes a caller reacts to, a typed
// detail (the current fence of a StaleFence, the attempts of a
// ResumeContended, ...). Exceptions never cross a component boundary;
// programmer errors assert (ONCE_CHECK) and crash.
//
//   Result<int64_t> r = store.AcquireFence(id);
//   if (!r) {
//     if (r.error().code == ErrorCode::kStaleFence) ...
//     return std::unexpected(r.error());
//   }
//   ONCE_ASSIGN_OR_RETURN(auto events, store.ReadRange(id, 1, 100));

#pragma once

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <expected>
#include <string>
#include <string_view>
#include <utility>
#include <variant>

namespace once {

// The codes. An error code exists only if some caller reacts to it.
enum class ErrorCode {
  kInvalidArgument,   // malformed input (id, JSON, encoding); permanent
  kLimitExceeded,     // a named limit was crossed (size, count); permanent
  kNotFound,          // the thing does not exist; permanent
  kSequenceConflict,  // append at a sequence that is not head + 1; permanent for that view
  kStaleFence,        // a writer presented a token older than the store's; permanent
  kResumeRefused,     // resume refused (reason in detail); permanent
  kResumeContended,   // conditional acquire lost every attempt; RETRYABLE
  kRedriveExhausted,  // a re-drive gave up after its attempts; permanent
  kNondeterminism,    // a workflow body diverged from its log on replay; permanent
  kPayloadShredded,   // the payload's key was destroyed; permanent by design
  kUnsupported,       // an optional capability this store refused; permanent
  kCorruption,        // stored data failed a check; permanent
  kUnavailable,       // I/O or connection trouble; RETRYABLE
  kTimeout,           // a deadline passed; RETRYABLE
  kBusy,              // the store or a lock is busy; RETRYABLE
  kCancelled,         // the operation was cancelled
  kPermissionDenied,  // signature, key or tenant refused; permanent
  kInternal,          // a bug or an unexpected backend answer
  // (Appended after kInternal: the codes' numbers travel in Sush messages.)
  kAlreadyExists,  // a unique key is taken (a queue's dedup key); detail names the holder
};

std::string_view ErrorCodeName(ErrorCode code);
bool IsRetryable(ErrorCode code);

// Typed details for the codes whose callers need more than the code.
struct StaleFenceDetail {
  int64_t presented = 0;  // the token the writer presented
  int64_t current = 0;    // the store's token
};
struct ResumeRefusedDetail {
  std::string reason;  // e.g. "not-suspended", "unknown-execution", "terminal"
};
struct ResumeContendedDetail {
  int attempts = 0;
};
struct LimitDetail {
  std::string limit;  // the limit's name, unit last (e.g. "event_payload_bytes_max")
  int64_t value = 0;  // what was asked
  int64_t max = 0;    // what is allowed
};
struct SequenceDetail {
  int64_t expected = 0;  // the sequence the store would accept (head + 1)
  int64_t given = 0;
};
struct AlreadyExistsDetail {
  std::string execution_id;  // the execution that holds the key
};

using ErrorDetail =
    std::variant<std::monostate, StaleFenceDetail, ResumeRefusedDetail, ResumeContendedDetail,
                 LimitDetail, SequenceDetail, AlreadyExistsDetail>;

struct Error {
  ErrorCode code = ErrorCode::kInternal;
  std::string message;
  std::string subject;  // what it is about, usually an execution id; may be empty
  ErrorDetail detail;

  bool retryable() const { return IsRetryable(code); }
  // "StaleFence: append refused (subject=ex-1)".
  std::string ToString() const;

  template <class D>
  const D* As() const {
    return std::get_if<D>(&detail);
  }
};

template <class T>
using Result = std::expected<T, Error>;
using Status = std::expected<void, Error>;

inline Status Ok() { return {}; }

inline std::unexpected<Error> MakeError(ErrorCode code, std::string message,
                                        std::string subject = {}, ErrorDetail detail = {}) {
  return std::unexpected<Error>(
      Error{code, std::move(message), std::move(subject), std::move(detail)});
}

inline std::unexpected<Error> LimitError(std::string limit, int64_t value, int64_t max,
                                         std::string subject = {}) {
  std::string msg = limit + " exceeded: " + std::to_string(value) + " > " + std::to_string(max);
  return MakeError(ErrorCode::kLimitExceeded, std::move(msg), std::move(subject),
                   LimitDetail{std::move(limit), value, max});
}

[[noreturn]] void CheckFailed(const char* expr, const char* file, int line, const char* msg);

}  // namespace once

// Programmer errors: the invariant is wrong, not the input.
#define ONCE_CHECK(cond)                                                  \
  do {                                                                    \
    if (!(cond)) ::once::CheckFailed(#cond, __FILE__, __LINE__, nullptr); \
  } while (0)
#define ONCE_CHECK_MSG(cond, msg)                                       \
  do {                                                                  \
    if (!(cond)) ::once::CheckFailed(#cond, __FILE__, __LINE__, (msg)); \
  } while (0)

#define ONCE_CONCAT_INNER(a, b) a##b
#define ONCE_CONCAT(a, b) ONCE_CONCAT_INNER(a, b)

// Returns the error of a Status/Result expression from the enclosing function.
#define ONCE_RETURN_IF_ERROR(expr)                                   \
  do {                                                               \
    auto&& once_status_ = (expr);                                    \
    if (!once_status_) return std::unexpected(once_status_.error()); \
  } while (0)

// ONCE_ASSIGN_OR_RETURN(auto x, Compute()); declares x from the value or
// returns the error.
#define ONCE_ASSIGN_OR_RETURN(lhs, expr) \
  ONCE_ASSIGN_OR_RETURN_IMPL(ONCE_CONCAT(once_result_, __LINE__), lhs, expr)
#define ONCE_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr)          \
  auto tmp = (expr);                                        \
  if (!tmp) return std::unexpected(std::move(tmp).error()); \
  lhs = std::move(tmp).value()
