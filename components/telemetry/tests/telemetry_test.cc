// Metrics from a real runtime on a real SQLite file, through ObservedStore,
// read back from the Prometheus text; the JSON-lines log format.
#include <gtest/gtest.h>
#include <prometheus/registry.h>

#include <filesystem>
#include <fstream>

#include "once/runtime/runtime.h"
#include "once/store/memory_store.h"
#include "once/store_decorators/observed_store.h"
#include "once/store_sqlite/sqlite_event_store.h"
#include "once/telemetry/log.h"
#include "once/telemetry/metrics.h"

namespace once::telemetry {
namespace {

using runtime::Context;
using runtime::Json;

// The value of the first sample line starting with `series`.
double Sample(const std::string& text, const std::string& series) {
  size_t at = text.find("\n" + series + " ");
  if (at == std::string::npos) return -1;
  return std::stod(text.substr(at + series.size() + 2));
}

TEST(TelemetryTest, LoomMetricsCountWhatTheRuntimeDid) {
  auto path =
      std::filesystem::temp_directory_path() / ("telemetry-" + std::to_string(::getpid()) + ".db");
  std::filesystem::remove(path);
  ManualClock clock;
  auto store = store::SqliteEventStore::Open(path.string(), store::SqliteOptions{.clock = &clock});
  ASSERT_TRUE(store);
  prometheus::Registry registry;
  LoomMetrics metrics(registry, clock);
  store::ObservedStore observed(**store, metrics, clock);
  runtime::Runtime rt(observed, clock, {.group_commit = false});
  ASSERT_TRUE(rt.Register("pay", [](Context& ctx, const Json& in) -> Result<Json> {
    ONCE_ASSIGN_OR_RETURN(Json v, ctx.Step("charge", [&]() -> Result<Json> { return in; }));
    if (in.value("fail", false)) return MakeError(ErrorCode::kInvalidArgument, "declined");
    return v;
  }));
  ASSERT_TRUE(rt.Register("nap", [](Context& ctx, const Json&) -> Result<Json> {
    ONCE_RETURN_IF_ERROR(ctx.Sleep(std::chrono::seconds(10)));
    return Json("woke");
  }));
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(rt.Start("pay", "p" + std::to_string(i), Json{{"n", i}}));
  ASSERT_TRUE(rt.Start("pay", "f", Json{{"fail", true}}));
  auto parked = rt.Start("nap", "n", Json::object());
  ASSERT_TRUE(parked);
  clock.Advance(std::chrono::seconds(12));  // the timer is 2 s late
  ASSERT_TRUE(rt.Resume("n", {.fence_if_parked_at = parked->park_seq}));
  // A stale conditional acquire: the park was answered.
  ASSERT_TRUE(observed.AcquireFenceIf("n", {.fence = 0, .park_seq = *parked->park_seq}));

  std::string text = Text(registry);
  EXPECT_EQ(Sample(text, "loom_executions_started_total{workflow=\"pay\"}"), 4) << text;
  EXPECT_EQ(Sample(text, "loom_executions_completed_total{workflow=\"pay\"}"), 3);
  EXPECT_EQ(Sample(text, "loom_executions_failed_total{workflow=\"pay\"}"), 1);
  EXPECT_EQ(Sample(text, "loom_executions_completed_total{workflow=\"nap\"}"), 1);
  EXPECT_EQ(Sample(text, "loom_parks_total"), 1);
  EXPECT_EQ(Sample(text, "loom_resumes_total"), 1);
  EXPECT_EQ(Sample(text, "loom_conditional_acquires_total{outcome=\"won\"}"), 1);
  EXPECT_EQ(Sample(text, "loom_conditional_acquires_total{outcome=\"stale\"}"), 1);
  EXPECT_EQ(Sample(text, "loom_timer_lateness_seconds_count"), 1);
  // 2 s late: in the 2.5 s bucket, not in the 1 s one.
  EXPECT_EQ(Sample(text, "loom_timer_lateness_seconds_bucket{le=\"1\"}"), 0);
  EXPECT_EQ(Sample(text, "loom_timer_lateness_seconds_bucket{le=\"2.5\"}"), 1);
  EXPECT_GE(Sample(text, "loom_commit_batch_requests_count"), 6);
  std::filesystem::remove(path);
}

TEST(TelemetryTest, JsonLinesAreOneEscapedObjectALine) {
  auto path =
      std::filesystem::temp_directory_path() / ("telemetry-" + std::to_string(::getpid()) + ".log");
  std::filesystem::remove(path);
  {
    auto log = MakeLogger("loom.serve", {.format = "json", .level = "info", .path = path.string()});
    ASSERT_TRUE(log);
    (*log)->info("said \"hi\"\nand left");
    (*log)->debug("not at info");
    LogRefusal(**log, "POST", "/api/v1/executions/x/cancel", 401, "PermissionDenied", "no token");
    SinkTo (*log)({.level = LogLevel::kWarn,
                   .component = "runtime",
                   .message = "contended",
                   .subject = "order-7",
                   .code = "ResumeContended"});
  }
  std::ifstream in(path);
  std::vector<nlohmann::json> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(nlohmann::json::parse(line));
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_EQ(lines[0]["message"], "said \"hi\"\nand left");
  EXPECT_EQ(lines[0]["component"], "loom.serve");
  EXPECT_EQ(lines[0]["level"], "info");
  EXPECT_TRUE(lines[0]["time"].get<std::string>().ends_with("Z"));
  EXPECT_EQ(lines[1]["level"], "warning");
  EXPECT_NE(lines[1]["message"].get<std::string>().find("401 PermissionDenied"), std::string::npos);
  EXPECT_NE(
      lines[2]["message"].get<std::string>().find("runtime: contended (order-7) [ResumeContended]"),
      std::string::npos);
  EXPECT_FALSE(MakeLogger("x", {.format = "xml"}));
  EXPECT_FALSE(MakeLogger("x", {.level = "loud"}));
  std::filesystem::remove(path);
}

// The runtime writes no logs: it hands what it reports to its LogSink, which
// SinkTo turns into a log line.
TEST(TelemetryTest, TheRuntimeHandsItsErrorsToItsLogSink) {
  ManualClock clock;
  store::MemoryEventStore store(store::Limits{}, clock);
  auto ask = [](Context& ctx, const Json&) -> Result<Json> { return ctx.Receive("approve"); };
  {
    runtime::Runtime full(store, clock);
    ASSERT_TRUE(full.Register("ask", ask));
    ASSERT_TRUE(full.Register("parent", [](Context& ctx, const Json&) -> Result<Json> {
      ONCE_RETURN_IF_ERROR(ctx.StartChild("ask", "kid", Json::object()));
      return ctx.AwaitChild("kid");
    }));
    ASSERT_TRUE(full.Start("parent", "p", Json::object()));
  }
  // A runtime that knows the child's workflow and not the parent's: the
  // child ends, the parent's notification fails in the background.
  std::vector<std::string> lines;
  std::mutex mu;
  runtime::RuntimeOptions options;
  options.log = [&](const LogEvent& e) {
    std::lock_guard lock(mu);
    lines.push_back(std::string(e.component) + "|" + std::string(e.code) + "|" +
                    std::string(e.subject));
  };
  runtime::Runtime partial(store, clock, options);
  ASSERT_TRUE(partial.Register("ask", ask));
  ASSERT_TRUE(partial.Deliver(runtime::ChildExecutionId("p", "kid"), "approve", Json("yes")));
  partial.WaitIdle();
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_EQ(lines[0], "runtime|NotFound|p") << lines[0];
}

}  // namespace
}  // namespace once::telemetry
