#include "once/telemetry/log.h"

#include <spdlog/formatter.h>
#include <spdlog/pattern_formatter.h>
#include <spdlog/sinks/basic_file_sink.h>
#include <spdlog/sinks/stdout_sinks.h>

#include <chrono>
#include <ctime>
#include <nlohmann/json.hpp>

namespace once::telemetry {
namespace {

std::string Utc(spdlog::log_clock::time_point t) {
  auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(t.time_since_epoch()).count();
  std::time_t secs = ms / 1000;
  std::tm tm{};
  gmtime_r(&secs, &tm);
  char buf[40];
  size_t n = std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%S", &tm);
  std::snprintf(buf + n, sizeof buf - n, ".%03lldZ", static_cast<long long>(ms % 1000));
  return buf;
}

// One JSON object a line: time, level, component, message (escaped).
class JsonLines final : public spdlog::formatter {
 public:
  void format(const spdlog::details::log_msg& msg, spdlog::memory_buf_t& dest) override {
    nlohmann::json line{{"time", Utc(msg.time)},
                        {"level", std::string(spdlog::level::to_string_view(msg.level).data(),
                                              spdlog::level::to_string_view(msg.level).size())},
                        {"component", std::string(msg.logger_name.data(), msg.logger_name.size())},
                        {"message", std::string(msg.payload.data(), msg.payload.size())}};
    std::string text = line.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    text.push_back('\n');
    dest.append(text.data(), text.data() + text.size());
  }
  std::unique_ptr<spdlog::formatter> clone() const override {
    return std::make_unique<JsonLines>();
  }
};

spdlog::level::level_enum ToSpdlog(LogLevel level) {
  switch (level) {
    case LogLevel::kDebug:
      return spdlog::level::debug;
    case LogLevel::kInfo:
      return spdlog::level::info;
    case LogLevel::kWarn:
      return spdlog::level::warn;
    case LogLevel::kError:
      return spdlog::level::err;
  }
  return spdlog::level::info;
}

}  // namespace

Result<std::shared_ptr<spdlog::logger>> MakeLogger(std::string_view component,
                                                   const LogOptions& options) {
  if (options.format != "text" && options.format != "json") {
    return MakeError(ErrorCode::kInvalidArgument,
                     "log format must be text or json, not '" + options.format + "'");
  }
  auto level = spdlog::level::from_str(options.level);
  if (level == spdlog::level::off && options.level != "off") {
    return MakeError(
        ErrorCode::kInvalidArgument,
        "log level must be trace, debug, info, warn, error or off, not '" + options.level + "'");
  }
  spdlog::sink_ptr sink;
  try {
    if (options.path.empty()) {
      sink = std::make_shared<spdlog::sinks::stderr_sink_mt>();
    } else {
      sink = std::make_shared<spdlog::sinks::basic_file_sink_mt>(options.path);
    }
  } catch (const spdlog::spdlog_ex& e) {
    return MakeError(ErrorCode::kUnavailable, std::string("cannot open the log: ") + e.what());
  }
  auto logger = std::make_shared<spdlog::logger>(std::string(component), sink);
  if (options.format == "json") {
    logger->set_formatter(std::make_unique<JsonLines>());
  } else {
    // 2024-05-01T12:00:00.123Z info loom.serve: message
    logger->set_pattern("%Y-%m-%dT%H:%M:%S.%eZ %l %n: %v", spdlog::pattern_time_type::utc);
  }
  logger->set_level(level);
  logger->flush_on(spdlog::level::info);
  return logger;
}

LogSink SinkTo(std::shared_ptr<spdlog::logger> logger) {
  return [logger](const LogEvent& e) {
    std::string line = std::string(e.component) + ": " + std::string(e.message);
    if (!e.subject.empty()) line += " (" + std::string(e.subject) + ")";
    if (!e.code.empty()) line += " [" + std::string(e.code) + "]";
    logger->log(ToSpdlog(e.level), "{}", line);
  };
}

void LogRefusal(spdlog::logger& logger, std::string_view method, std::string_view path,
                int http_status, std::string_view code, std::string_view message) {
  logger.warn("refused {} {}: {} {}: {}", method, path, http_status, code, message);
}

}  // namespace once::telemetry
