// File: log_sink.h
//
// LogSink: how a library hands an event worth a log line to the program that
// embeds it. Libraries never write logs themselves; a component that has
// something to say (a takeover, a contended resume, a quarantined log, an
// exhausted re-drive) calls its optional sink, and the program routes it into
// its own logger (once::telemetry::SinkTo adapts spdlog).
//
//   LogSink sink = [](const LogEvent& e) { my_logger.Log(e.level, e.component, e.message); };
//   runtime::RuntimeOptions options{.log = sink};
//
// Threads: a sink may be called from any thread, concurrently.
#pragma once

#include <functional>
#include <string>
#include <string_view>

namespace once {

enum class LogLevel { kDebug, kInfo, kWarn, kError };

struct LogEvent {
  LogLevel level = LogLevel::kInfo;
  std::string_view component;  // "runtime", "orchestration.inbox", ...
  std::string_view message;
  std::string_view subject;  // usually an execution id; may be empty
  std::string_view code;     // an ErrorCodeName when the event is an error; may be empty
};

using LogSink = std::function<void(const LogEvent&)>;

inline std::string_view LogLevelName(LogLevel level) {
  switch (level) {
    case LogLevel::kDebug:
      return "debug";
    case LogLevel::kInfo:
      return "info";
    case LogLevel::kWarn:
      return "warn";
    case LogLevel::kError:
      return "error";
  }
  return "info";
}

}  // namespace once
