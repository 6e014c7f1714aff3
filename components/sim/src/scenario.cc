#include "once/sim/scenario.h"

#include <algorithm>
#include <sstream>

#include "once/base/decimal.h"
#include "once/base/overloaded.h"

namespace once::sim {
namespace {

std::vector<std::string_view> Words(std::string_view line) {
  std::vector<std::string_view> out;
  size_t i = 0;
  while (i < line.size()) {
    while (i < line.size() && (line[i] == ' ' || line[i] == '\t')) ++i;
    size_t j = i;
    while (j < line.size() && line[j] != ' ' && line[j] != '\t') ++j;
    if (j > i) out.push_back(line.substr(i, j - i));
    i = j;
  }
  return out;
}

// A byte a step's text may not hold: control bytes but the tab. (A line's
// one trailing CR, of a CRLF file, is dropped before.) A command ending in a
// second CR would format to a line that parses to a different command.
bool IsControl(char c) {
  const auto b = static_cast<unsigned char>(c);
  return (b < 0x20 && b != '\t') || b == 0x7f;
}

std::string HexByte(char c) {
  static constexpr char kDigits[] = "0123456789abcdef";
  const auto b = static_cast<unsigned char>(c);
  return std::string("0x") + kDigits[b >> 4] + kDigits[b & 0xf];
}

class LineParser {
 public:
  LineParser(std::vector<std::string_view> words, int line) : w_(std::move(words)), line_(line) {}

  std::unexpected<Error> Fail(const std::string& why) const {
    return MakeError(ErrorCode::kInvalidArgument,
                     "scenario line " + std::to_string(line_) + ": " + why);
  }
  bool Done() const { return i_ >= w_.size(); }
  Result<std::string_view> Word(const char* what) {
    if (Done()) return Fail(std::string("expected ") + what);
    return w_[i_++];
  }
  Status Keyword(std::string_view keyword) {
    ONCE_ASSIGN_OR_RETURN(std::string_view w, Word(std::string(keyword).c_str()));
    if (w != keyword)
      return Fail("expected '" + std::string(keyword) + "', got '" + std::string(w) + "'");
    return Ok();
  }
  bool Peek(std::string_view keyword) const { return !Done() && w_[i_] == keyword; }
  Status End() const {
    if (!Done()) return Fail("unexpected '" + std::string(w_[i_]) + "'");
    return Ok();
  }
  Result<int64_t> Number(std::string_view text, int64_t max) const {
    std::optional<int64_t> v = ParseDecimal<int64_t>(text);
    if (!v || *v < 0) return Fail("not a number: '" + std::string(text) + "'");
    if (*v > max) return LimitError("scenario_number_max", *v, max);
    return *v;
  }
  Result<int> Sled(std::string_view text) const {
    if (text.size() < 2 || text[0] != 's') return Fail("not a sled: '" + std::string(text) + "'");
    ONCE_ASSIGN_OR_RETURN(int64_t n, Number(text.substr(1), kSledsMax - 1));
    return static_cast<int>(n);
  }
  Result<int> SledWord() {
    ONCE_ASSIGN_OR_RETURN(std::string_view w, Word("a sled"));
    return Sled(w);
  }
  Result<SledSet> Set(std::string_view text) const {
    SledSet out;
    size_t i = 0;
    while (i <= text.size()) {
      size_t j = text.find(',', i);
      if (j == std::string_view::npos) j = text.size();
      ONCE_ASSIGN_OR_RETURN(int sled, Sled(text.substr(i, j - i)));
      out.push_back(sled);
      i = j + 1;
    }
    std::sort(out.begin(), out.end());
    if (std::adjacent_find(out.begin(), out.end()) != out.end()) {
      return Fail("a sled listed twice in '" + std::string(text) + "'");
    }
    return out;
  }
  // "s0,s1 | s2,s3" (the groups may also touch the bar: "s0,s1|s2").
  Result<std::vector<SledSet>> Groups() {
    std::string joined;
    while (!Done()) joined += std::string(w_[i_++]);
    std::vector<SledSet> groups;
    size_t i = 0;
    while (i <= joined.size()) {
      size_t j = joined.find('|', i);
      if (j == std::string::npos) j = joined.size();
      ONCE_ASSIGN_OR_RETURN(SledSet set, Set(std::string_view(joined).substr(i, j - i)));
      groups.push_back(std::move(set));
      i = j + 1;
    }
    std::vector<int> all;
    for (const SledSet& g : groups) all.insert(all.end(), g.begin(), g.end());
    std::sort(all.begin(), all.end());
    if (std::adjacent_find(all.begin(), all.end()) != all.end()) {
      return Fail("a sled in two groups");
    }
    return groups;
  }
  Result<std::string> Label() {
    ONCE_ASSIGN_OR_RETURN(std::string_view w, Word("a label"));
    if (w.size() > kLabelBytesMax) {
      return LimitError("label_bytes_max", static_cast<int64_t>(w.size()), kLabelBytesMax);
    }
    for (char c : w) {
      if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_' && c != '-' && c != '.') {
        return Fail("a label is letters, digits, '_', '-' and '.': '" + std::string(w) + "'");
      }
    }
    return std::string(w);
  }
  Result<int> Via() {
    ONCE_RETURN_IF_ERROR(Keyword("via"));
    return SledWord();
  }
  // The rest of the line, joined by single spaces.
  std::string Rest() {
    std::string out;
    while (!Done()) {
      if (!out.empty()) out += ' ';
      out += std::string(w_[i_++]);
    }
    return out;
  }

 private:
  std::vector<std::string_view> w_;
  size_t i_ = 0;
  int line_;
};

Result<std::string> ParseTarget(LineParser& p, std::string_view text) {
  if (text == "*") return std::string("*");
  std::string out;
  size_t i = 0;
  while (i <= text.size()) {
    size_t j = text.find(',', i);
    if (j == std::string_view::npos) j = text.size();
    std::string_view item = text.substr(i, j - i);
    if (item.empty()) return p.Fail("an empty target item");
    if (item[0] == 's') {
      ONCE_RETURN_IF_ERROR(p.Sled(item));
    } else {
      ONCE_RETURN_IF_ERROR(p.Number(item, 31));
    }
    if (!out.empty()) out += ',';
    out += std::string(item);
    i = j + 1;
  }
  return out;
}

Result<Step> ParseSession(LineParser& p) {
  ONCE_ASSIGN_OR_RETURN(std::string_view verb, p.Word("start or stop"));
  ONCE_ASSIGN_OR_RETURN(std::string label, p.Label());
  ONCE_ASSIGN_OR_RETURN(int via, p.Via());
  ONCE_RETURN_IF_ERROR(p.End());
  if (verb == "start") return SessionStart{label, via};
  if (verb == "stop") return SessionStop{label, via};
  return p.Fail("session start or session stop");
}

Result<Step> ParseJob(LineParser& p) {
  if (p.Peek("stop")) {
    ONCE_RETURN_IF_ERROR(p.Keyword("stop"));
    ONCE_ASSIGN_OR_RETURN(std::string label, p.Label());
    ONCE_ASSIGN_OR_RETURN(int via, p.Via());
    ONCE_RETURN_IF_ERROR(p.End());
    return JobStop{label, via};
  }
  JobStart job;
  ONCE_ASSIGN_OR_RETURN(job.label, p.Label());
  ONCE_RETURN_IF_ERROR(p.Keyword("in"));
  ONCE_ASSIGN_OR_RETURN(job.session, p.Label());
  ONCE_ASSIGN_OR_RETURN(job.via, p.Via());
  if (p.Peek("target")) {
    ONCE_RETURN_IF_ERROR(p.Keyword("target"));
    ONCE_ASSIGN_OR_RETURN(std::string_view target, p.Word("a target"));
    ONCE_ASSIGN_OR_RETURN(job.target, ParseTarget(p, target));
  }
  if (p.Peek("cmd")) {
    ONCE_RETURN_IF_ERROR(p.Keyword("cmd"));
    job.command = p.Rest();
    if (job.command.empty()) return p.Fail("an empty command");
  }
  ONCE_RETURN_IF_ERROR(p.End());
  return job;
}

Result<DriveFault> ParseFault(LineParser& p, std::string_view w) {
  static constexpr std::pair<std::string_view, DriveFault> kFaults[] = {
      {"fail", DriveFault::kFail},      {"corrupt", DriveFault::kCorrupt},
      {"wipe", DriveFault::kWipe},      {"tear", DriveFault::kTear},
      {"heal", DriveFault::kHeal},      {"enospc", DriveFault::kNoSpace},
      {"missing", DriveFault::kMissing}};
  for (const auto& [name, fault] : kFaults) {
    if (w == name) return fault;
  }
  return p.Fail("a drive fault is fail, corrupt, wipe, tear, heal, enospc or missing");
}

Result<Step> ParseExpect(LineParser& p) {
  ONCE_ASSIGN_OR_RETURN(std::string_view what, p.Word("ran, status, refused or trusted"));
  if (what == "refused" || what == "trusted") {
    ONCE_ASSIGN_OR_RETURN(int sled, p.SledWord());
    ONCE_RETURN_IF_ERROR(p.End());
    return ExpectTrust{sled, what == "trusted"};
  }
  ONCE_ASSIGN_OR_RETURN(std::string job, p.Label());
  ONCE_RETURN_IF_ERROR(p.Keyword("on"));
  ONCE_ASSIGN_OR_RETURN(int sled, p.SledWord());
  ONCE_ASSIGN_OR_RETURN(std::string_view value, p.Word("a value"));
  ONCE_RETURN_IF_ERROR(p.End());
  if (what == "ran") {
    if (value == "never") return ExpectRan{job, sled, RanCount::kNever};
    if (value == "once") return ExpectRan{job, sled, RanCount::kOnce};
    if (value == "twice") return ExpectRan{job, sled, RanCount::kTwice};
    return p.Fail("expect ran ... once, never or twice");
  }
  if (what == "status") {
    static constexpr std::string_view kStates[] = {"queued", "started", "stopped",     "cancelled",
                                                   "error",  "skipped", "interrupted", "none"};
    if (std::find(std::begin(kStates), std::end(kStates), value) == std::end(kStates)) {
      return p.Fail("unknown status '" + std::string(value) + "'");
    }
    return ExpectStatus{job, sled, std::string(value)};
  }
  return p.Fail("expect ran, status, refused or trusted");
}

Result<Step> ParseLine(LineParser& p) {
  ONCE_ASSIGN_OR_RETURN(std::string_view verb, p.Word("a step"));
  if (verb == "sleds") {
    ONCE_ASSIGN_OR_RETURN(std::string_view count, p.Word("a count"));
    ONCE_ASSIGN_OR_RETURN(int64_t n, p.Number(count, kSledsMax));
    if (n < 1) return p.Fail("a rack has 1-32 sleds");
    Sleds sleds{static_cast<int>(n), {}};
    if (p.Peek("split")) {
      ONCE_RETURN_IF_ERROR(p.Keyword("split"));
      ONCE_ASSIGN_OR_RETURN(sleds.split, p.Groups());
    }
    ONCE_RETURN_IF_ERROR(p.End());
    return sleds;
  }
  if (verb == "partition") {
    ONCE_ASSIGN_OR_RETURN(auto groups, p.Groups());
    return Partition{std::move(groups)};
  }
  if (verb == "heal" || verb == "settle") {
    ONCE_RETURN_IF_ERROR(p.End());
    if (verb == "heal") return Heal{};
    return Settle{};
  }
  if (verb == "crash" || verb == "boot" || verb == "wipe") {
    ONCE_ASSIGN_OR_RETURN(int sled, p.SledWord());
    ONCE_RETURN_IF_ERROR(p.End());
    if (verb == "crash") return Crash{sled};
    if (verb == "boot") return Boot{sled};
    return WipeData{sled};
  }
  if (verb == "move") {
    ONCE_ASSIGN_OR_RETURN(int sled, p.SledWord());
    ONCE_RETURN_IF_ERROR(p.Keyword("to"));
    ONCE_ASSIGN_OR_RETURN(std::string_view to, p.Word("sleds"));
    ONCE_ASSIGN_OR_RETURN(SledSet set, p.Set(to));
    ONCE_RETURN_IF_ERROR(p.End());
    if (std::find(set.begin(), set.end(), sled) != set.end())
      return p.Fail("a sled moved to itself");
    return Move{sled, std::move(set)};
  }
  if (verb == "link" || verb == "unlink") {
    ONCE_ASSIGN_OR_RETURN(int a, p.SledWord());
    ONCE_ASSIGN_OR_RETURN(int b, p.SledWord());
    ONCE_RETURN_IF_ERROR(p.End());
    if (a == b) return p.Fail("a link needs two sleds");
    return Link{a, b, verb == "link"};
  }
  if (verb == "session") return ParseSession(p);
  if (verb == "job") return ParseJob(p);
  if (verb == "reset") {  // submitted to the sled itself, as `sush sled reset -T` does
    ONCE_ASSIGN_OR_RETURN(int sled, p.SledWord());
    ONCE_RETURN_IF_ERROR(p.End());
    return Reset{sled};
  }
  if (verb == "wait") {
    ONCE_ASSIGN_OR_RETURN(std::string_view d, p.Word("a duration"));
    ONCE_RETURN_IF_ERROR(p.End());
    int64_t scale = 1;
    std::string_view digits = d;
    if (d.ends_with("ms")) {
      digits = d.substr(0, d.size() - 2);
    } else if (d.ends_with("s")) {
      digits = d.substr(0, d.size() - 1);
      scale = 1000;
    } else {
      return p.Fail("a duration ends in ms or s");
    }
    ONCE_ASSIGN_OR_RETURN(int64_t n, p.Number(digits, kWaitMsMax / scale));
    return Wait{n * scale};
  }
  if (verb == "drive") {
    ONCE_ASSIGN_OR_RETURN(int sled, p.SledWord());
    ONCE_ASSIGN_OR_RETURN(std::string_view d, p.Word("0 or 1"));
    ONCE_ASSIGN_OR_RETURN(int64_t drive, p.Number(d, 1));
    ONCE_ASSIGN_OR_RETURN(std::string_view f, p.Word("a fault"));
    ONCE_ASSIGN_OR_RETURN(DriveFault fault, ParseFault(p, f));
    int point = 0;
    if (fault == DriveFault::kTear && !p.Done()) {
      ONCE_ASSIGN_OR_RETURN(std::string_view w, p.Word("a tear point"));
      ONCE_ASSIGN_OR_RETURN(int64_t n, p.Number(w, drive == 0 ? 3 : 2));
      if (n < 1) return p.Fail("a tear point is 1 or more");
      point = static_cast<int>(n);
    }
    ONCE_RETURN_IF_ERROR(p.End());
    return Drive{sled, static_cast<int>(drive), fault, point};
  }
  if (verb == "left-cap" || verb == "session-cap") {
    ONCE_ASSIGN_OR_RETURN(std::string_view n, p.Word("a cap"));
    ONCE_ASSIGN_OR_RETURN(int64_t cap, p.Number(n, 1024));
    ONCE_RETURN_IF_ERROR(p.End());
    return LeftCap{static_cast<int>(cap), verb == "session-cap"};
  }
  if (verb == "expect") return ParseExpect(p);
  return p.Fail("unknown step '" + std::string(verb) + "'");
}

std::string Set(const SledSet& set) {
  std::string out;
  for (int s : set) out += (out.empty() ? "" : ",") + SledName(s);
  return out;
}

std::string Groups(const std::vector<SledSet>& groups) {
  std::string out;
  for (const SledSet& g : groups) out += (out.empty() ? "" : " | ") + Set(g);
  return out;
}

}  // namespace

std::string SledName(int sled) { return "s" + std::to_string(sled); }

std::string_view DriveFaultName(DriveFault fault) {
  switch (fault) {
    case DriveFault::kFail:
      return "fail";
    case DriveFault::kCorrupt:
      return "corrupt";
    case DriveFault::kWipe:
      return "wipe";
    case DriveFault::kTear:
      return "tear";
    case DriveFault::kHeal:
      return "heal";
    case DriveFault::kNoSpace:
      return "enospc";
    case DriveFault::kMissing:
      return "missing";
  }
  return "?";
}

Result<Scenario> ParseScenario(std::string_view text) {
  if (text.size() > kScenarioBytesMax) {
    return LimitError("scenario_bytes_max", static_cast<int64_t>(text.size()), kScenarioBytesMax);
  }
  Scenario scenario;
  int line_number = 0;
  size_t pos = 0;
  while (pos <= text.size()) {
    size_t end = text.find('\n', pos);
    if (end == std::string_view::npos) end = text.size();
    std::string_view line = text.substr(pos, end - pos);
    pos = end + 1;
    ++line_number;
    if (line.size() > kLineBytesMax) {
      return LimitError("line_bytes_max", static_cast<int64_t>(line.size()), kLineBytesMax);
    }
    if (size_t hash = line.find('#'); hash != std::string_view::npos) line = line.substr(0, hash);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (auto bad = std::find_if(line.begin(), line.end(), IsControl); bad != line.end()) {
      return MakeError(ErrorCode::kInvalidArgument, "scenario line " + std::to_string(line_number) +
                                                        ": a control byte (" + HexByte(*bad) +
                                                        ") outside a comment");
    }
    std::vector<std::string_view> words = Words(line);
    if (words.empty()) continue;
    LineParser parser(std::move(words), line_number);
    ONCE_ASSIGN_OR_RETURN(Step step, ParseLine(parser));
    // Rack options (left-cap, session-cap) may come before `sleds`; everything
    // else after it.
    const bool sleds = std::holds_alternative<Sleds>(step);
    const bool option = std::holds_alternative<LeftCap>(step);
    const bool created =
        std::any_of(scenario.steps.begin(), scenario.steps.end(),
                    [](const Step& s) { return std::holds_alternative<Sleds>(s); });
    if (sleds && created) return parser.Fail("`sleds` comes once, first");
    if (!sleds && !option && !created) return parser.Fail("the first step is `sleds N`");
    if (scenario.steps.size() >= kScenarioStepsMax) {
      return LimitError("scenario_steps_max", static_cast<int64_t>(scenario.steps.size() + 1),
                        kScenarioStepsMax);
    }
    scenario.steps.push_back(std::move(step));
    scenario.lines.push_back(line_number);
  }
  auto first = std::find_if(scenario.steps.begin(), scenario.steps.end(),
                            [](const Step& s) { return std::holds_alternative<Sleds>(s); });
  if (first == scenario.steps.end()) {
    return MakeError(ErrorCode::kInvalidArgument, "scenario: no steps (the first is `sleds N`)");
  }
  const int count = std::get<Sleds>(*first).count;
  // Every sled a step names exists.
  for (size_t i = 0; i < scenario.steps.size(); ++i) {
    int highest = -1;
    auto see = [&](int s) { highest = std::max(highest, s); };
    auto see_set = [&](const SledSet& set) {
      for (int s : set) see(s);
    };
    std::visit(Overloaded{
                   [&](const Sleds& s) {
                     for (const auto& g : s.split) see_set(g);
                   },
                   [&](const Partition& s) {
                     for (const auto& g : s.groups) see_set(g);
                   },
                   [&](const Heal&) {},
                   [&](const Settle&) {},
                   [&](const Wait&) {},
                   [&](const LeftCap&) {},
                   [&](const Crash& s) { see(s.sled); },
                   [&](const Boot& s) { see(s.sled); },
                   [&](const WipeData& s) { see(s.sled); },
                   [&](const Move& s) {
                     see(s.sled);
                     see_set(s.to);
                   },
                   [&](const Link& s) {
                     see(s.a);
                     see(s.b);
                   },
                   [&](const SessionStart& s) { see(s.via); },
                   [&](const SessionStop& s) { see(s.via); },
                   [&](const JobStart& s) { see(s.via); },
                   [&](const JobStop& s) { see(s.via); },
                   [&](const Reset& s) { see(s.sled); },
                   [&](const Drive& s) { see(s.sled); },
                   [&](const ExpectRan& s) { see(s.sled); },
                   [&](const ExpectStatus& s) { see(s.sled); },
                   [&](const ExpectTrust& s) { see(s.sled); },
               },
               scenario.steps[i]);
    if (highest >= count) {
      return MakeError(ErrorCode::kInvalidArgument,
                       "scenario line " + std::to_string(scenario.lines[i]) + ": no sled " +
                           SledName(highest) + " in a rack of " + std::to_string(count));
    }
  }
  return scenario;
}

std::string FormatStep(const Step& step) {
  return std::visit(
      Overloaded{
          [](const Sleds& s) {
            std::string out = "sleds " + std::to_string(s.count);
            if (!s.split.empty()) out += " split " + Groups(s.split);
            return out;
          },
          [](const Partition& s) { return "partition " + Groups(s.groups); },
          [](const Heal&) { return std::string("heal"); },
          [](const Crash& s) { return "crash " + SledName(s.sled); },
          [](const Boot& s) { return "boot " + SledName(s.sled); },
          [](const WipeData& s) { return "wipe " + SledName(s.sled); },
          [](const Move& s) { return "move " + SledName(s.sled) + " to " + Set(s.to); },
          [](const Link& s) {
            return std::string(s.up ? "link " : "unlink ") + SledName(s.a) + " " + SledName(s.b);
          },
          [](const SessionStart& s) {
            return "session start " + s.label + " via " + SledName(s.via);
          },
          [](const SessionStop& s) {
            return "session stop " + s.label + " via " + SledName(s.via);
          },
          [](const JobStart& s) {
            return "job " + s.label + " in " + s.session + " via " + SledName(s.via) + " target " +
                   s.target + " cmd " + s.command;
          },
          [](const JobStop& s) { return "job stop " + s.label + " via " + SledName(s.via); },
          [](const Reset& s) { return "reset " + SledName(s.sled); },
          [](const Settle&) { return std::string("settle"); },
          [](const Wait& s) { return "wait " + std::to_string(s.ms) + "ms"; },
          [](const Drive& s) {
            return "drive " + SledName(s.sled) + " " + std::to_string(s.drive) + " " +
                   std::string(DriveFaultName(s.fault)) +
                   (s.point > 0 ? " " + std::to_string(s.point) : std::string());
          },
          [](const LeftCap& s) {
            return (s.sessions ? "session-cap " : "left-cap ") + std::to_string(s.cap);
          },
          [](const ExpectRan& s) {
            static constexpr const char* kCounts[] = {"never", "once", "twice"};
            return "expect ran " + s.job + " on " + SledName(s.sled) + " " +
                   kCounts[static_cast<int>(s.count)];
          },
          [](const ExpectStatus& s) {
            return "expect status " + s.job + " on " + SledName(s.sled) + " " + s.state;
          },
          [](const ExpectTrust& s) {
            return std::string(s.trusted ? "expect trusted " : "expect refused ") +
                   SledName(s.sled);
          },
      },
      step);
}

std::string FormatScenario(const Scenario& scenario) {
  std::string out;
  for (const Step& step : scenario.steps) out += FormatStep(step) + "\n";
  return out;
}

}  // namespace once::sim
