// Properties of the metadata struct over random JSON objects: the struct and
// the object map one to one, and the text is dump() of the object.
#include <gtest/gtest.h>
#include <rapidcheck.h>
#include <rapidcheck/gtest.h>

#include <limits>

#include "once/events/metadata.h"

namespace once::events {
namespace {

// Keys at and around the two the fields own, so sorted positions vary.
rc::Gen<std::string> Keys() {
  return rc::gen::element<std::string>("fence", "kernel", "", "a", "emit", "fencf", "kerne", "z",
                                       "f", "kernel2");
}

rc::Gen<Json> Values() {
  return rc::gen::oneOf(
      rc::gen::map(rc::gen::arbitrary<int64_t>(), [](int64_t v) { return Json(v); }),
      rc::gen::map(rc::gen::inRange<int64_t>(-2, 4), [](int64_t v) { return Json(v); }),
      rc::gen::just(Json(std::numeric_limits<uint64_t>::max())),
      rc::gen::map(rc::gen::arbitrary<bool>(), [](bool v) { return Json(v); }),
      rc::gen::map(rc::gen::container<std::string>(rc::gen::inRange<char>(0x20, 0x7f)),
                   [](std::string s) { return Json(std::move(s)); }),
      rc::gen::just(Json("true")), rc::gen::just(Json(2.5)), rc::gen::just(Json(nullptr)),
      rc::gen::just(Json::array({1, "x"})));
}

rc::Gen<Json> Objects() {
  return rc::gen::map(rc::gen::container<std::vector<std::pair<std::string, Json>>>(
                          rc::gen::pair(Keys(), Values())),
                      [](std::vector<std::pair<std::string, Json>> members) {
                        Json object = Json::object();
                        for (auto& [k, v] : members) object[k] = std::move(v);
                        return object;
                      });
}

RC_GTEST_PROP(MetadataProperty, ObjectAndStructMapOneToOne, ()) {
  Json object = *Objects();
  Metadata m = Metadata::FromJson(object);
  RC_ASSERT(!m.Problem());
  RC_ASSERT(m.ToJson() == object);
  std::string text;
  RC_ASSERT(AppendMetadataText(m, text));
  RC_ASSERT(text == object.dump());
  Result<Metadata> back = ParseMetadataText(text);
  RC_ASSERT(back.has_value());
  RC_ASSERT(*back == m);
  RC_ASSERT(Metadata::FromJson(m.ToJson()) == m);
}

RC_GTEST_PROP(MetadataProperty, FieldsAloneNeedNoTree, ()) {
  Metadata m{.fence = *rc::gen::inRange<int64_t>(0, std::numeric_limits<int64_t>::max()),
             .kernel = *rc::gen::arbitrary<bool>()};
  std::string text;
  RC_ASSERT(AppendMetadataText(m, text));
  RC_ASSERT(text == m.ToJson().dump());
  RC_ASSERT(*ParseMetadataText(text) == m);
}

}  // namespace
}  // namespace once::events
