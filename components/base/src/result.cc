#include "once/base/result.h"

namespace once {

std::string_view ErrorCodeName(ErrorCode code) {
  switch (code) {
    case ErrorCode::kInvalidArgument:
      return "InvalidArgument";
    case ErrorCode::kLimitExceeded:
      return "LimitExceeded";
    case ErrorCode::kNotFound:
      return "NotFound";
    case ErrorCode::kSequenceConflict:
      return "SequenceConflict";
    case ErrorCode::kStaleFence:
      return "StaleFence";
    case ErrorCode::kResumeRefused:
      return "ResumeRefused";
    case ErrorCode::kResumeContended:
      return "ResumeContended";
    case ErrorCode::kRedriveExhausted:
      return "RedriveExhausted";
    case ErrorCode::kNondeterminism:
      return "Nondeterminism";
    case ErrorCode::kPayloadShredded:
      return "PayloadShredded";
    case ErrorCode::kUnsupported:
      return "Unsupported";
    case ErrorCode::kCorruption:
      return "Corruption";
    case ErrorCode::kUnavailable:
      return "Unavailable";
    case ErrorCode::kTimeout:
      return "Timeout";
    case ErrorCode::kBusy:
      return "Busy";
    case ErrorCode::kCancelled:
      return "Cancelled";
    case ErrorCode::kPermissionDenied:
      return "PermissionDenied";
    case ErrorCode::kInternal:
      return "Internal";
    case ErrorCode::kAlreadyExists:
      return "AlreadyExists";
  }
  return "Unknown";
}

bool IsRetryable(ErrorCode code) {
  switch (code) {
    case ErrorCode::kResumeContended:
    case ErrorCode::kUnavailable:
    case ErrorCode::kTimeout:
    case ErrorCode::kBusy:
      return true;
    default:
      return false;
  }
}

std::string Error::ToString() const {
  std::string out(ErrorCodeName(code));
  out += ": ";
  out += message;
  if (!subject.empty()) {
    out += " (subject=";
    out += subject;
    out += ")";
  }
  return out;
}

void CheckFailed(const char* expr, const char* file, int line, const char* msg) {
  std::fprintf(stderr, "CHECK failed: %s at %s:%d%s%s\n", expr, file, line, msg ? ": " : "",
               msg ? msg : "");
  std::fflush(stderr);
  std::abort();
}

}  // namespace once
