// What the PostgreSQL event store decodes from the server, without a server:
// the fence row version text of a hinted append, and a read group's rows in
// a PGresult built in memory (fuzz/text_result.h). Also keeps the seed corpus
// of store_postgres_rows_fuzz current.

#include <gtest/gtest.h>

#include <map>

#include "append_hints.h"
#include "once/fuzz_corpus/seeds.h"
#include "packed_rows.h"
#include "read_group.h"
#include "text_result.h"

namespace once::store::pg {
namespace {

TEST(FenceVersionTextTest, ParsesWhatPostgresWritesAndNothingElse) {
  EXPECT_EQ(ParseFenceVersion("748 (0,3)"), (FenceVersion{748, 0, 3}));
  EXPECT_EQ(ParseFenceVersion("4294967295 (4294967295,65535)"),
            (FenceVersion{4294967295u, 4294967295u, 65535}));
  for (const char* bad :
       {"", "748", "748 ", "748 (0,3", "748 (0,3) ", "748(0,3)", "748 (0;3)", "4294967296 (0,3)",
        "1 (4294967296,1)", "1 (1,65536)", "-1 (0,3)", "1 (,3)", "1 (0,)", " 1 (0,3)"}) {
    EXPECT_FALSE(ParseFenceVersion(bad)) << bad;
  }
}

using Rows = std::vector<std::vector<std::string_view>>;

// Every decoded row of the group, by range.
std::map<size_t, std::vector<Result<Envelope>>> Decode(const Ranges& ranges, const Rows& rows,
                                                       Status* status) {
  auto res = MakeTextResult(rows, 1 + kRowColumnCount);
  EXPECT_TRUE(res);
  std::map<size_t, std::vector<Result<Envelope>>> out;
  *status = DecodeRanges(res.get(), ranges,
                         [&](size_t i, Result<Envelope> e) { out[i].push_back(std::move(e)); });
  return out;
}

TEST(ReadRowsTest, RowsGoToTheirReadsAndABadRowFailsOnlyItsEvent) {
  Ranges ranges;
  ranges.Add("exec-a", 1, 10, 10);
  ranges.Add("exec-b", 1, 10, 10);
  const Rows rows = {
      {"1", "1", "STEP_COMPLETED", R"({"result": 1})", R"({"fence": 3, "kernel": true})", "17"},
      {"2", "4", "app.kind", R"("text")", "{}", "18"},
      {"2", "5", "app.kind", "{not json", "{}", "19"},
  };
  Status status;
  auto out = Decode(ranges, rows, &status);
  ASSERT_TRUE(status) << status.error().ToString();
  ASSERT_EQ(out[0].size(), 1u);
  ASSERT_TRUE(out[0][0]);
  EXPECT_EQ(out[0][0]->execution_id, "exec-a");
  EXPECT_EQ(out[0][0]->sequence, 1);
  EXPECT_EQ(out[0][0]->metadata.fence, 3);
  EXPECT_TRUE(out[0][0]->metadata.kernel);
  EXPECT_EQ(out[0][0]->payload["result"], 1);
  EXPECT_EQ(out[0][0]->time_ms, 17);
  ASSERT_EQ(out[1].size(), 2u);
  EXPECT_EQ(out[1][0]->payload, "text");
  ASSERT_FALSE(out[1][1]);
  EXPECT_EQ(out[1][1].error().code, ErrorCode::kCorruption);
}

TEST(ReadRowsTest, APackedRowGivesItsEventsWithinTheRange) {
  Ranges ranges;
  ranges.Add("exec-a", 3, 4, 10);  // starts inside the row 2-5
  ranges.Add("exec-b", 1, 10, 1);  // one event of the row 1-3
  const Rows rows = {
      {"1", "2", "EXECUTION_RESUMED", "{}", R"({"kernel":true})", "17", "5", "EXECUTION_COMPLETED",
       R"({"value":1})", R"({"kernel":true})", "20",
       R"([["STEP_COMPLETED",{"name":"a"},{"kernel":true},18],["app.k",[1],{},19]])"},
      {"2", "1", "EXECUTION_STARTED", "{}", R"({"kernel":true})", "1", "3", "EXECUTION_SUSPENDED",
       "{}", R"({"kernel":true})", "2", R"([["x",1,{},1]])"},
  };
  Status status;
  auto out = Decode(ranges, rows, &status);
  ASSERT_TRUE(status) << status.error().ToString();
  ASSERT_EQ(out[0].size(), 2u);
  EXPECT_EQ(out[0][0]->sequence, 3);
  EXPECT_EQ(out[0][0]->kind, "STEP_COMPLETED");
  EXPECT_EQ(out[0][0]->time_ms, 18);
  EXPECT_EQ(out[0][1]->sequence, 4);
  EXPECT_EQ(out[0][1]->payload, nlohmann::json::array({1}));
  ASSERT_EQ(out[1].size(), 1u);
  EXPECT_EQ(out[1][0]->sequence, 1);
}

TEST(ReadRowsTest, AMalformedPackedRowIsCorruptionAndAddsNoEvent) {
  Ranges ranges;
  ranges.Add("exec-a", 1, 100, 100);
  const std::vector<std::vector<std::string_view>> bad = {
      {"1", "2", "k", "{}", "{}", "1", "5", "e", "{}", "{}", "1", "[]"},   // 2 between
      {"1", "2", "k", "{}", "{}", "1", "1", "e", "{}", "{}", "1", "\\N"},  // ends first
      {"1", "2", "k", "{}", "{}", "1", "3", "e", "{}", "{}", "1", "[[\"k\",{},{},1]]"},
      {"1", "2", "k", "{}", "{}", "1", "\\N", "\\N", "\\N", "\\N", "\\N", "[]"},
      {"1", "2", "k", "{}", "{}", "1", "4", "e", "{}", "{}", "1", "[[\"k\",{},[],1]]"},
      {"1", "2", "k", "{}", "{}", "1", "4", "e", "{}", "{}", "1", "[[\"\",{},{},1]]"},
      {"1", "2", "k", "{}", "{}", "1", "4", "e", "{}", "{}", "1", "[[\"k\",{},{},1.5]]"},
      {"1", "2", "k", "{}", "{}", "1", "4", "e", "{", "{}", "1", "[[\"k\",{},{},1]]"},
      {"1", "2", "k", "{}", "{}", "1", "4", "e", "{}", "{}", "1", "[[\"k\",{},{},1]"},
      // Sequences start at 1; the first of these made `last - first`
      // overflow (found by store_postgres_rows_fuzz).
      {"1", "-9223372036854775807", "k", "{}", "{}", "1", "5", "e", "{}", "{}", "1", "\\N"},
      {"1", "0", "k", "{}", "{}", "1", "\\N", "\\N", "\\N", "\\N", "\\N", "\\N"},
  };
  for (const auto& row : bad) {
    Status status;
    auto out = Decode(ranges, {row}, &status);
    ASSERT_TRUE(status);
    ASSERT_EQ(out[0].size(), 1u) << row[11];
    ASSERT_FALSE(out[0][0]) << row[11];
    EXPECT_EQ(out[0][0].error().code, ErrorCode::kCorruption) << row[11];
  }
}

TEST(PackedRowsSplitTest, MarkedEventsAreFirstOrLastAndReleasingEventsEndTheirRow) {
  auto event = [](std::string kind, bool answering = false) {
    return EncodedEvent{.kind = std::move(kind), .answering = answering};
  };
  auto rows = [](const std::vector<EncodedEvent>& events) {
    std::string out;
    ForEachRow(events, [&](std::span<const EncodedEvent> row) {
      out += (out.empty() ? "" : " ") + std::to_string(row.data() - events.data()) + "+" +
             std::to_string(row.size());
    });
    return out;
  };
  const EncodedEvent started = event("EXECUTION_STARTED"), step = event("STEP_COMPLETED");
  const EncodedEvent parked = event("EXECUTION_SUSPENDED", true);
  const EncodedEvent resumed = event("EXECUTION_RESUMED", true);
  const EncodedEvent done = event("EXECUTION_COMPLETED", true);
  const EncodedEvent newer = event("NEWER_KIND", true);  // kernel-stamped, unknown
  EXPECT_EQ(rows({started, step, done}), "0+3");
  EXPECT_EQ(rows({started, step, step, parked}), "0+4");
  EXPECT_EQ(rows({resumed, step, done}), "0+3");
  EXPECT_EQ(rows({done}), "0+1");
  EXPECT_EQ(rows({parked, step, step}), "0+1 1+2");    // a park ends its row
  EXPECT_EQ(rows({started, newer, step}), "0+2 2+1");  // an answer ends it too
  EXPECT_EQ(rows({step, started, step, done}), "0+2 2+2");
  EXPECT_EQ(rows({started, parked, resumed, step, parked, step}), "0+2 2+3 5+1");
  EXPECT_EQ(rows({}), "");
  // The rest column holds the events between, none for a row of two.
  std::vector<EncodedEvent> row = {started, step, done};
  row[1].payload_json = R"({"name":"a"})";
  row[1].metadata_json = R"({"kernel":true})";
  row[1].time_ms = 7;
  EXPECT_EQ(EncodeRest(row), R"([["STEP_COMPLETED",{"name":"a"},{"kernel":true},7]])");
  EXPECT_EQ(EncodeRest(std::span(row).first(2)), std::nullopt);
}

TEST(ReadRowsTest, ARowOfNoRangeFailsTheGroup) {
  Ranges ranges;
  ranges.Add("exec-a", 1, 10, 10);
  for (const char* ord : {"0", "2", "-1", "x"}) {
    Status status;
    Decode(ranges, {{ord, "1", "k", "{}", "{}", "1"}}, &status);
    ASSERT_FALSE(status) << ord;
    EXPECT_EQ(status.error().code, ErrorCode::kInternal) << ord;
  }
}

// The seed corpus of store_postgres_rows_fuzz: a read group's answer as the
// fuzzer reads it (first line the ranges' ids, then one row a line: ord and
// a stored row's columns, packed_rows.h, tab-separated, \N for NULL, a
// short line's missing columns NULL), with kernel and application events,
// the metadata texts every schema version holds and rows of several events;
// fence row versions; and lines of ids for the array encoders.
TEST(ReadRowsTest, FuzzSeedsAreCurrentAnswers) {
  std::map<std::string, std::string> seeds;
  seeds["group"] =
      "wf-order-17\twf-order-18\n"
      "1\t1\tEXECUTION_STARTED\t{\"input\":{\"order\":17}}\t{\"kernel\":true}\t1700000000000\n"
      "1\t2\tSTEP_COMPLETED\t{\"result\":\"ok\"}\t{\"fence\":3,\"kernel\":true}\t1700000000004\n"
      "2\t1\tapp.note\t[1,2.5,null]\t{\"fence\":2,\"trace\":\"ab-1\"}\t1700000000009\n";
  seeds["group-jsonb-metadata"] =
      "wf-1\n"
      "1\t7\tSTEP_COMPLETED\t{\"result\": 1}\t{\"fence\": 3, \"kernel\": true}\t17\n";
  seeds["group-packed"] =
      "wf-1\twf-2\n"
      "1\t1\tEXECUTION_STARTED\t{}\t{\"kernel\":true}\t5\t3\tEXECUTION_COMPLETED\t"
      "{\"value\":1}\t{\"kernel\":true}\t7\t[[\"STEP_COMPLETED\",{\"name\":\"a\"},"
      "{\"kernel\":true},6]]\n"
      "2\t4\tEXECUTION_RESUMED\tnull\t{\"fence\":2,\"kernel\":true}\t9\t5\t"
      "EXECUTION_SUSPENDED\t{}\t{\"fence\":2,\"kernel\":true}\t9\t\\N\n";
  seeds["fence-version"] = "748 (0,3)";
  seeds["fence-version-max"] = "4294967295 (4294967295,65535)";
  seeds["ids"] = "exec-1\nexec-\"quoted\"\nexec-\\back\n{braces}\nNULL\n";
  for (const auto& [name, text] : seeds) {
    if (!name.starts_with("group")) continue;
    Ranges ranges;
    std::vector<std::string_view> lines;
    std::string_view rest = text;
    while (!rest.empty()) {
      const size_t nl = rest.find('\n');
      lines.push_back(rest.substr(0, nl));
      rest = nl == std::string_view::npos ? "" : rest.substr(nl + 1);
    }
    size_t tab = 0;
    for (std::string_view ids = lines[0];; ids = ids.substr(tab + 1)) {
      tab = ids.find('\t');
      ranges.Add(ids.substr(0, tab), 1, 100, 100);
      if (tab == std::string_view::npos) break;
    }
    Rows rows;
    for (size_t l = 1; l < lines.size(); ++l) {
      std::vector<std::string_view> fields;
      std::string_view line = lines[l];
      for (size_t t = 0;; line = line.substr(t + 1)) {
        t = line.find('\t');
        fields.push_back(line.substr(0, t));
        if (t == std::string_view::npos) break;
      }
      rows.push_back(fields);
    }
    Status status;
    auto out = Decode(ranges, rows, &status);
    ASSERT_TRUE(status) << name;
    for (const auto& [i, events] : out) {
      for (const auto& e : events) EXPECT_TRUE(e) << name << ": " << e.error().ToString();
    }
  }
  fuzz_corpus::ExpectSeeds(std::string(ONCE_FUZZ_CORPUS_DIR) + "/store_postgres_rows_fuzz", seeds);
}

}  // namespace
}  // namespace once::store::pg
