// libFuzzer target for the rack scenario parser (ParseScenario: the files
// `sush sim run` reads, docs in scenario.h). Every input is either refused
// with a typed error or parses to steps whose canonical text
// (FormatScenario) parses back to steps of the same text, one line a step.
// The parser accepts what the formatter never writes (comments, blank lines,
// runs of blanks, sled sets in any order, `s01` for `s1`, `2s` for
// `2000ms`), so the property on the input side is the weaker
// Format(Parse(Format(Parse(t)))) == Format(Parse(t)), not Format(Parse(t)) == t.
// Seeds: components/sim/fuzz/corpus/sim_scenario_fuzz (kept by sim_test).

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "once/sim/scenario.h"

namespace {

using namespace once;
using namespace once::sim;

void Check(bool ok) {
  if (!ok) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  auto scenario = ParseScenario(text);
  if (!scenario) {
    Check(scenario.error().code == ErrorCode::kInvalidArgument ||
          scenario.error().code == ErrorCode::kLimitExceeded);
    return 0;
  }
  Check(scenario->lines.size() == scenario->steps.size());
  const std::string canonical = FormatScenario(*scenario);
  auto again = ParseScenario(canonical);
  Check(again.has_value());
  Check(again->steps.size() == scenario->steps.size());
  for (size_t i = 0; i < again->steps.size(); ++i) {
    Check(again->lines[i] == static_cast<int>(i) + 1);
    Check(FormatStep(again->steps[i]) == FormatStep(scenario->steps[i]));
  }
  Check(FormatScenario(*again) == canonical);
  return 0;
}
