#include "once/events/metadata.h"

#include <gtest/gtest.h>

#include <limits>
#include <map>

#include "once/events/envelope.h"
#include "once/fuzz_corpus/seeds.h"

namespace once::events {
namespace {

// Metadata objects covering the field/extra boundary: keys sorting before,
// between and after "fence" and "kernel", values the fields do not own, and
// strings that need escaping.
std::vector<Json> Objects() {
  return {
      Json::object(),
      {{"kernel", true}},
      {{"fence", 7}, {"kernel", true}},
      {{"fence", 7}},
      {{"fence", std::numeric_limits<int64_t>::max()}, {"kernel", true}},
      {{"a", 1}, {"fence", 3}, {"g", "x"}, {"kernel", true}, {"z", {1, 2}}},
      {{"emit", true}, {"fence", 2}},
      {{"fence", 0}, {"kernel", false}},
      {{"fence", -4}, {"kernel", "true"}},
      {{"fence", "7"}, {"kernel", 1}},
      {{"fence", 2.5}},
      {{"fence", std::numeric_limits<uint64_t>::max()}},
      {{"kernel", true}, {"trace", "quote\" \\ \n \u00e9"}},
      {{"", 0}, {"fencf", 1}, {"kerne", 2}},
  };
}

TEST(MetadataTest, TextIsDumpOfTheObject) {
  for (const Json& object : Objects()) {
    SCOPED_TRACE(object.dump());
    Metadata m = Metadata::FromJson(object);
    EXPECT_FALSE(m.Problem());
    EXPECT_EQ(m.ToJson(), object);
    std::string text;
    ASSERT_TRUE(AppendMetadataText(m, text));
    EXPECT_EQ(text, object.dump());
    Result<Metadata> back = ParseMetadataText(text);
    ASSERT_TRUE(back) << back.error().ToString();
    EXPECT_EQ(*back, m);
    EXPECT_EQ(back->ToJson(), object);
  }
}

TEST(MetadataTest, FieldsHoldOnlyWhatTheyOwn) {
  Metadata kernel = Metadata::FromJson({{"fence", 7}, {"kernel", true}});
  EXPECT_EQ(kernel.fence, 7);
  EXPECT_TRUE(kernel.kernel);
  EXPECT_TRUE(kernel.extra.is_null());  // no tree for a kernel event's metadata
  Metadata other = Metadata::FromJson({{"fence", 0}, {"kernel", "true"}});
  EXPECT_EQ(other.fence, 0);
  EXPECT_FALSE(other.kernel);
  EXPECT_EQ(other.extra, (Json{{"fence", 0}, {"kernel", "true"}}));
  EXPECT_EQ(Metadata::FromJson(nullptr), Metadata{});
  EXPECT_EQ(Metadata{.extra = Json::object()}, Metadata{});  // no members either way
}

TEST(MetadataTest, ProblemsNameWhatCannotBeStored) {
  EXPECT_TRUE(Metadata::FromJson(Json::array({1})).Problem());
  EXPECT_TRUE(Metadata::FromJson(Json("kernel")).Problem());
  EXPECT_TRUE((Metadata{.fence = -1}).Problem());
  EXPECT_TRUE((Metadata{.extra = {{"fence", 4}}}).Problem());      // reads back as the field
  EXPECT_TRUE((Metadata{.extra = {{"kernel", true}}}).Problem());  // reads back as the field
  EXPECT_TRUE((Metadata{.fence = 2, .extra = {{"fence", "2"}}}).Problem());  // written twice
  EXPECT_TRUE((Metadata{.kernel = true, .extra = {{"kernel", 1}}}).Problem());
  EXPECT_FALSE((Metadata{.extra = {{"fence", "4"}, {"kernel", false}}}).Problem());
}

TEST(MetadataTest, ParseRefusesWhatIsNotAnObject) {
  for (std::string_view text : {"", "[]", "3", "{", R"({"fence":)", R"({"fence":1)", "null"}) {
    SCOPED_TRACE(text);
    Result<Metadata> m = ParseMetadataText(text);
    ASSERT_FALSE(m);
    EXPECT_EQ(m.error().code, ErrorCode::kInvalidArgument);
  }
  // Near misses of the fast forms go through the parser and keep their meaning.
  EXPECT_EQ(ParseMetadataText(R"({"fence":01})").has_value(), false);  // not JSON
  EXPECT_EQ(ParseMetadataText(R"({"fence":1 ,"kernel":true})")->fence, 1);
  EXPECT_EQ(ParseMetadataText(R"({"fence":99999999999999999999})")->fence, 0);  // too big
  EXPECT_EQ(ParseMetadataText(R"({ "kernel" : true })")->kernel, true);
}

// The seed corpus of events_metadata_fuzz (fuzz/corpus): the text the stores
// write for each object above, the same objects as PostgreSQL's jsonb::text
// shows them (a space after ':' and ','), and the fast forms' near misses.
TEST(MetadataTest, FuzzSeedsAreCurrentTexts) {
  std::map<std::string, std::string> seeds;
  const std::vector<Json> objects = Objects();
  for (size_t i = 0; i < objects.size(); ++i) {
    std::string text;
    ASSERT_TRUE(AppendMetadataText(Metadata::FromJson(objects[i]), text));
    seeds["written-" + std::to_string(i)] = text;
    std::string spaced;
    for (char c : objects[i].dump()) {
      spaced += c;
      if (c == ':' || c == ',') spaced += ' ';  // strings here hold neither
    }
    seeds["jsonb-" + std::to_string(i)] = spaced;
  }
  seeds["near-leading-zero"] = R"({"fence":01})";
  seeds["near-space"] = R"({"fence":1 ,"kernel":true})";
  seeds["near-too-big"] = R"({"fence":99999999999999999999})";
  seeds["near-kernel-false"] = R"({"fence":5,"kernel":false})";
  seeds["not-an-object"] = "[{}]";
  fuzz_corpus::ExpectSeeds(std::string(ONCE_FUZZ_CORPUS_DIR) + "/events_metadata_fuzz", seeds);
}

TEST(MetadataTest, AnsweringUsesTheField) {
  EXPECT_TRUE(IsAnswering("EXECUTION_FROM_THE_FUTURE", Metadata{.kernel = true}));
  EXPECT_FALSE(IsAnswering("EXECUTION_FROM_THE_FUTURE", Metadata::FromJson({{"kernel", "true"}})));
  EXPECT_TRUE(IsAnswering("EXECUTION_RESUMED", Metadata{}));
  EXPECT_FALSE(IsAnswering("STEP_COMPLETED", Metadata{.kernel = true}));
}

}  // namespace
}  // namespace once::events
