// File: log.h
//
// The apps' logs (loom serve, sush-server): spdlog loggers on stderr with a
// level, a UTC timestamp and the component, as text or as JSON lines for log
// shippers. Libraries never log: they hand events to a LogSink
// (once/base/log_sink.h) that an app points here.
//
//   ONCE_ASSIGN_OR_RETURN(auto log, telemetry::MakeLogger("loom.serve", {.format = "json"}));
//   log->info("listening on {}", address);
//   // {"time":"2024-05-01T12:00:00.123Z","level":"info","component":"loom.serve",
//   //  "message":"listening on 127.0.0.1:8420"}
//   runtime_options.log = telemetry::SinkTo(log);
//
// Every refusal a client gets is one line (LogRefusal) with its HTTP status
// and error code, at warn.
#pragma once

#include <spdlog/logger.h>

#include <memory>
#include <string>
#include <string_view>

#include "once/base/log_sink.h"
#include "once/base/result.h"

namespace once::telemetry {

struct LogOptions {
  std::string format = "text";  // text | json
  std::string level = "info";   // trace | debug | info | warn | error | off
  // Where lines go: empty = stderr, else this file (appended).
  std::string path;
};

// kInvalidArgument for an unknown format or level.
Result<std::shared_ptr<spdlog::logger>> MakeLogger(std::string_view component,
                                                   const LogOptions& options);

// A LogSink writing to `logger`; the event's component overrides the
// logger's name in the line.
LogSink SinkTo(std::shared_ptr<spdlog::logger> logger);

// One line for a refused request: "refused POST /path: 401 PermissionDenied: message".
void LogRefusal(spdlog::logger& logger, std::string_view method, std::string_view path,
                int http_status, std::string_view code, std::string_view message);

}  // namespace once::telemetry
