// The Fs error for an errno, shared by PosixFs and MemoryFs so that both
// answer alike: kNotFound for ENOENT/ENOTDIR, kPermissionDenied for
// EACCES/EPERM, kUnavailable for the rest; the message names the operation,
// the path, the errno text and its name ("write /d0/r.tmp: No space left on
// device (ENOSPC)"); the subject is the path.

#pragma once

#include <cerrno>
#include <cstring>
#include <string>
#include <system_error>

#include "once/base/result.h"

namespace once::locker {

inline std::unexpected<Error> ErrnoError(int err, const char* op, const std::string& path) {
  ErrorCode code = ErrorCode::kUnavailable;
  if (err == ENOENT || err == ENOTDIR) code = ErrorCode::kNotFound;
  if (err == EACCES || err == EPERM) code = ErrorCode::kPermissionDenied;
  const char* name = ::strerrorname_np(err);
  std::string message =
      std::string(op) + " " + path + ": " + std::error_code(err, std::generic_category()).message();
  if (name != nullptr) message += std::string(" (") + name + ")";
  return MakeError(code, std::move(message), path);
}

}  // namespace once::locker
