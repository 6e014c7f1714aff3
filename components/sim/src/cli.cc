#include "once/sim/cli.h"

#include <charconv>
#include <fstream>
#include <sstream>

#include "once/base/hex.h"
#include "once/sim/explore.h"

namespace once::sim {
namespace {

constexpr char kUsage[] =
    "usage: sush sim run FILE [--seed S] [--flaw NAME]... [--quiet]\n"
    "       sush sim explore [--sleds N|MIN-MAX] [--seed S] [--schedules K] [--threads T]\n"
    "                        [--flaw NAME]... [--out FILE] [--expect-breach] [--no-shrink]\n";

bool ParseNumber(const std::string& text, uint64_t& out) {
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), out);
  return ec == std::errc() && end == text.data() + text.size();
}

int Usage(std::ostream& err, const std::string& why) {
  err << "sush sim: " << why << "\n" << kUsage;
  return 2;
}

Status AddFlaw(rack::BoundaryFlaws& flaws, const std::string& name) {
  ONCE_ASSIGN_OR_RETURN(rack::BoundaryFlaws one, FlawByName(name));
  flaws.single_session_version |= one.single_session_version;
  flaws.no_filter_insert_on_hit |= one.no_filter_insert_on_hit;
  flaws.lazy_entry_marker |= one.lazy_entry_marker;
  flaws.unpersisted_entry_marker |= one.unpersisted_entry_marker;
  flaws.zombies_by_join_frontier |= one.zombies_by_join_frontier;
  flaws.record_after_start |= one.record_after_start;
  flaws.position_unchecked |= one.position_unchecked;
  return Ok();
}

// A `# seed S` comment in the file gives the default seed (explore writes one).
uint64_t SeedIn(const std::string& text, uint64_t fallback) {
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    const std::string tag = "# seed ";
    if (line.rfind(tag, 0) == 0) {
      uint64_t seed = 0;
      if (ParseNumber(line.substr(tag.size()), seed)) return seed;
    }
  }
  return fallback;
}

int Run(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  std::string file;
  WorldOptions options;
  bool seed_given = false, quiet = false;
  for (size_t i = 1; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "--seed" && i + 1 < args.size()) {
      if (!ParseNumber(args[++i], options.seed)) return Usage(err, "--seed takes a number");
      seed_given = true;
    } else if (a == "--flaw" && i + 1 < args.size()) {
      if (auto ok = AddFlaw(options.flaws, args[++i]); !ok) return Usage(err, ok.error().message);
    } else if (a == "--quiet") {
      quiet = true;
    } else if (file.empty() && !a.starts_with("--")) {
      file = a;
    } else {
      return Usage(err, "unexpected argument '" + a + "'");
    }
  }
  if (file.empty()) return Usage(err, "run needs a scenario FILE");
  std::ifstream in(file, std::ios::binary);
  if (!in) {
    err << "sush sim: cannot read " << file << "\n";
    return 2;
  }
  std::stringstream text;
  text << in.rdbuf();
  if (text.str().size() > kScenarioBytesMax) {
    err << "sush sim: " << file << " is over scenario_bytes_max (" << kScenarioBytesMax << ")\n";
    return 2;
  }
  auto scenario = ParseScenario(text.str());
  if (!scenario) {
    err << "sush sim: " << file << ": " << scenario.error().message << "\n";
    return 2;
  }
  if (!seed_given) options.seed = SeedIn(text.str(), options.seed);
  auto world = RunScenario(*scenario, options);
  if (!quiet) out << world->Report();
  for (const Breach& b : world->breaches()) out << "BREACH " << b.kind << ": " << b.detail << "\n";
  for (const std::string& f : world->failures()) out << "FAILED " << f << "\n";
  const WorldStats& s = world->stats();
  out << file << ": steps=" << s.steps << " jobs_run=" << s.jobs_run << " skipped=" << s.skipped
      << " interrupted=" << s.interrupted << " breaches=" << world->breaches().size()
      << " failed_expects=" << world->failures().size() << " seed=" << options.seed
      << " trace=" << HexEncode(world->TraceHash()).substr(0, 16) << "\n";
  return world->breaches().empty() && world->failures().empty() ? 0 : 1;
}

int Explore(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  ExploreOptions options;
  options.threads = 2;
  std::string out_file;
  bool expect_breach = false;
  for (size_t i = 1; i < args.size(); ++i) {
    const std::string& a = args[i];
    const bool has_value = i + 1 < args.size();
    if (a == "--sleds" && has_value) {
      const std::string v = args[++i];
      const size_t dash = v.find('-');
      uint64_t lo = 0, hi = 0;
      if (dash == std::string::npos
              ? !ParseNumber(v, lo) || !ParseNumber(v, hi)
              : !ParseNumber(v.substr(0, dash), lo) || !ParseNumber(v.substr(dash + 1), hi)) {
        return Usage(err, "--sleds takes N or MIN-MAX");
      }
      if (lo < 1 || hi > kSledsMax || lo > hi) return Usage(err, "--sleds is within 1-32");
      options.sleds_min = static_cast<int>(lo);
      options.sleds_max = static_cast<int>(hi);
    } else if (a == "--seed" && has_value) {
      if (!ParseNumber(args[++i], options.seed)) return Usage(err, "--seed takes a number");
    } else if (a == "--schedules" && has_value) {
      if (!ParseNumber(args[++i], options.schedules))
        return Usage(err, "--schedules takes a number");
    } else if (a == "--threads" && has_value) {
      uint64_t t = 0;
      if (!ParseNumber(args[++i], t) || t < 1 || t > 64) return Usage(err, "--threads is 1-64");
      options.threads = static_cast<int>(t);
    } else if (a == "--flaw" && has_value) {
      if (auto ok = AddFlaw(options.flaws, args[++i]); !ok) return Usage(err, ok.error().message);
    } else if (a == "--out" && has_value) {
      out_file = args[++i];
    } else if (a == "--expect-breach") {
      expect_breach = true;
    } else if (a == "--no-shrink") {
      options.shrink = false;
    } else {
      return Usage(err, "unexpected argument '" + a + "'");
    }
  }
  const ExploreResult r = sim::Explore(options);
  out << "schedules=" << r.schedules << " breaches=" << r.breaches << " jobs_run=" << r.jobs_run
      << " skipped=" << r.skipped << " interrupted=" << r.interrupted << " seconds=" << r.seconds
      << " schedules_per_second="
      << (r.seconds > 0 ? static_cast<double>(r.schedules) / r.seconds : 0) << "\n";
  if (r.first_breach) {
    const FoundBreach& b = *r.first_breach;
    const Scenario& shown = options.shrink ? b.shrunk : b.schedule;
    if (out_file.empty()) out_file = "sim-breach-" + std::to_string(b.seed) + ".sush";
    std::ofstream file(out_file, std::ios::trunc);
    file << "# " << (options.shrink ? "shrunk from" : "") << " schedule " << b.index
         << " of sush sim explore --seed " << options.seed << "\n# breach: " << b.breach.kind
         << ": " << b.breach.detail << "\n# seed " << b.seed << "\n"
         << FormatScenario(shown);
    out << "breach in schedule " << b.index << " (seed " << b.seed << "): " << b.breach.kind << ": "
        << b.breach.detail << "\n"
        << "steps=" << b.schedule.steps.size() << " shrunk=" << b.shrunk.steps.size()
        << " written to " << out_file << " (replay: sush sim run " << out_file << ")\n";
  }
  if (expect_breach) return r.first_breach ? 0 : 1;
  return r.breaches == 0 ? 0 : 1;
}

}  // namespace

int SimCommand(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  if (args.empty() || args[0] == "help" || args[0] == "--help") {
    out << kUsage;
    return args.empty() ? 2 : 0;
  }
  if (args[0] == "run") return Run(args, out, err);
  if (args[0] == "explore") return Explore(args, out, err);
  return Usage(err, "unknown sim command '" + args[0] + "'");
}

}  // namespace once::sim
