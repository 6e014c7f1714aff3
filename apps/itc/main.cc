// itc: interval tree clocks on the command line, in the paper's text notation.
//
//   itc encode party|version TEXT     prints the canonical encoding in hex
//   itc decode party|version HEX      prints the text, or the typed error
//   itc join|meet A B                 versions: prints the result
//   itc leq|concurrent A B            versions: prints true or false
//   itc tick PARTY VERSION            prints the version after one event
//   itc min-ticks VERSION             prints the exact lower bound of events
//   itc rank VERSION                  prints the integral of the version
//   itc fork PARTY                    prints both halves, one per line
//
// Exit status: 0 on success, 1 on a typed error (printed to stderr), 2 on
// usage errors.

#include <cstdio>
#include <string>
#include <string_view>
#include <vector>

#include "once/base/hex.h"
#include "once/itc/text.h"
#include "once/itc/version.h"

namespace {

using namespace once;
using namespace once::itc;

constexpr const char* kUsage =
    "usage: itc encode party|version TEXT | decode party|version HEX |\n"
    "       join|meet|leq|concurrent VERSION VERSION | tick PARTY VERSION |\n"
    "       min-ticks VERSION | rank VERSION | fork PARTY\n";

int Usage() {
  std::fputs(kUsage, stderr);
  return 2;
}

int Fail(const Error& e) {
  std::fprintf(stderr, "error: %s\n", e.ToString().c_str());
  return 1;
}

int Print(const std::string& s) {
  std::printf("%s\n", s.c_str());
  return 0;
}

int Encode(std::string_view kind, std::string_view text) {
  if (kind == "party") {
    auto p = ParseParty(text);
    return p ? Print(HexEncode(p->Encode())) : Fail(p.error());
  }
  if (kind == "version") {
    auto v = ParseVersion(text);
    return v ? Print(HexEncode(v->Encode())) : Fail(v.error());
  }
  return Usage();
}

int Decode(std::string_view kind, std::string_view hex) {
  auto bytes = HexDecode(hex);
  if (!bytes) return Fail(bytes.error());
  if (kind == "party") {
    auto p = Party::Decode(*bytes);
    return p ? Print(FormatParty(*p)) : Fail(p.error());
  }
  if (kind == "version") {
    auto v = Version::Decode(*bytes);
    return v ? Print(FormatVersion(*v)) : Fail(v.error());
  }
  return Usage();
}

int TwoVersions(std::string_view cmd, std::string_view a_text, std::string_view b_text) {
  auto a = ParseVersion(a_text);
  if (!a) return Fail(a.error());
  auto b = ParseVersion(b_text);
  if (!b) return Fail(b.error());
  if (cmd == "join") return Print(FormatVersion(Join(*a, *b)));
  if (cmd == "meet") return Print(FormatVersion(Meet(*a, *b)));
  if (cmd == "leq") return Print(Leq(*a, *b) ? "true" : "false");
  return Print(Concurrent(*a, *b) ? "true" : "false");
}

int Run(const std::vector<std::string_view>& args) {
  if (args.empty()) return Usage();
  const std::string_view cmd = args[0];
  if ((cmd == "encode" || cmd == "decode") && args.size() == 3) {
    return cmd == "encode" ? Encode(args[1], args[2]) : Decode(args[1], args[2]);
  }
  if ((cmd == "join" || cmd == "meet" || cmd == "leq" || cmd == "concurrent") && args.size() == 3) {
    return TwoVersions(cmd, args[1], args[2]);
  }
  if (cmd == "tick" && args.size() == 3) {
    auto p = ParseParty(args[1]);
    if (!p) return Fail(p.error());
    auto v = ParseVersion(args[2]);
    if (!v) return Fail(v.error());
    auto t = Tick(*v, *p);
    return t ? Print(FormatVersion(*t)) : Fail(t.error());
  }
  if ((cmd == "min-ticks" || cmd == "rank") && args.size() == 2) {
    auto v = ParseVersion(args[1]);
    if (!v) return Fail(v.error());
    if (cmd == "rank") return Print(RankOf(*v).ToString());
    auto m = MinTicks(*v);
    return m ? Print(std::to_string(*m)) : Fail(m.error());
  }
  if (cmd == "fork" && args.size() == 2) {
    auto p = ParseParty(args[1]);
    if (!p) return Fail(p.error());
    auto right = p->Fork();
    if (!right) return Fail(right.error());
    return Print(FormatParty(*p) + "\n" + FormatParty(*right));
  }
  return Usage();
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string_view> args(argv + 1, argv + argc);
  return Run(args);
}
