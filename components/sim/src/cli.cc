#include "once/sim/cli.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "once/base/decimal.h"
#include "once/base/hex.h"
#include "once/sim/explore.h"

namespace once::sim {
namespace {

constexpr char kUsage[] =
    "usage: sush sim run FILE [--seed S] [--flaw NAME]... [--quiet]\n"
    "       sush sim explore [--sleds N|MIN-MAX] [--seed S] [--schedules K] [--threads T]\n"
    "                        [--flaw NAME]... [--out FILE] [--expect-breach] [--no-shrink]\n"
    "       sush sim check FILE|DIR...\n"
    "       sush sim flaws\n";

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
  flaws.rehop_past |= one.rehop_past;
  flaws.reused_heights |= one.reused_heights;
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
      if (ParseDecimal(line.substr(tag.size()), seed)) return seed;
    }
  }
  return fallback;
}

struct LoadedScenario {
  std::string text;
  Scenario scenario;
};

// Reads and parses a scenario file (at most kScenarioBytesMax).
Result<LoadedScenario> LoadScenario(const std::string& file) {
  std::ifstream in(file, std::ios::binary);
  if (!in) return MakeError(ErrorCode::kNotFound, "cannot read " + file);
  std::string text(kScenarioBytesMax + 1, '\0');
  in.read(text.data(), static_cast<std::streamsize>(text.size()));
  text.resize(static_cast<size_t>(in.gcount()));
  if (text.size() > kScenarioBytesMax) {
    return MakeError(ErrorCode::kLimitExceeded, file + " is over scenario_bytes_max (" +
                                                    std::to_string(kScenarioBytesMax) + ")");
  }
  auto scenario = ParseScenario(text);
  if (!scenario) return MakeError(scenario.error().code, file + ": " + scenario.error().message);
  return LoadedScenario{std::move(text), std::move(*scenario)};
}

// The flaws a scenario file says it catches: `# catches: NAME [NAME...]`
// lines (the negative controls `sush sim check` runs it under).
std::vector<std::string> CatchesIn(const std::string& text) {
  std::vector<std::string> names;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    const std::string tag = "# catches:";
    if (line.rfind(tag, 0) != 0) continue;
    std::istringstream words(line.substr(tag.size()));
    for (std::string w; words >> w;) names.push_back(w);
  }
  return names;
}

int Run(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  std::string file;
  WorldOptions options;
  bool seed_given = false, quiet = false;
  for (size_t i = 1; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "--seed" && i + 1 < args.size()) {
      if (!ParseDecimal(args[++i], options.seed)) return Usage(err, "--seed takes a number");
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
  auto loaded = LoadScenario(file);
  if (!loaded) {
    err << "sush sim: " << loaded.error().message << "\n";
    return 2;
  }
  if (!seed_given) options.seed = SeedIn(loaded->text, options.seed);
  auto world = RunScenario(loaded->scenario, options);
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
              ? !ParseDecimal(v, lo) || !ParseDecimal(v, hi)
              : !ParseDecimal(v.substr(0, dash), lo) || !ParseDecimal(v.substr(dash + 1), hi)) {
        return Usage(err, "--sleds takes N or MIN-MAX");
      }
      if (lo < 1 || hi > kSledsMax || lo > hi) return Usage(err, "--sleds is within 1-32");
      options.sleds_min = static_cast<int>(lo);
      options.sleds_max = static_cast<int>(hi);
    } else if (a == "--seed" && has_value) {
      if (!ParseDecimal(args[++i], options.seed)) return Usage(err, "--seed takes a number");
    } else if (a == "--schedules" && has_value) {
      if (!ParseDecimal(args[++i], options.schedules))
        return Usage(err, "--schedules takes a number");
    } else if (a == "--threads" && has_value) {
      uint64_t t = 0;
      if (!ParseDecimal(args[++i], t) || t < 1 || t > 64) return Usage(err, "--threads is 1-64");
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

// `sush sim check`: every scenario holds under the real rules, and fails
// (a breach or a failed expect) under each flaw it names in `# catches:`.
bool Holds(const Scenario& scenario, const WorldOptions& options) {
  auto world = RunScenario(scenario, options);
  return world->breaches().empty() && world->failures().empty();
}

int Check(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  std::vector<std::string> files;
  for (size_t i = 1; i < args.size(); ++i) {
    std::error_code ec;
    if (std::filesystem::is_directory(args[i], ec)) {
      std::vector<std::string> found;
      for (const auto& entry : std::filesystem::directory_iterator(args[i], ec)) {
        if (entry.path().extension() == ".sush") found.push_back(entry.path().string());
      }
      std::sort(found.begin(), found.end());
      files.insert(files.end(), found.begin(), found.end());
    } else {
      files.push_back(args[i]);
    }
  }
  if (files.empty()) return Usage(err, "check needs scenario files or folders holding them");
  int failed = 0, controls = 0;
  for (const std::string& file : files) {
    auto loaded = LoadScenario(file);
    if (!loaded) {
      err << "sush sim: " << loaded.error().message << "\n";
      return 2;
    }
    WorldOptions options;
    options.seed = SeedIn(loaded->text, options.seed);
    options.keep_log = false;
    const bool holds = Holds(loaded->scenario, options);
    std::string line = (holds ? "ok     " : "FAILED ") + file;
    failed += holds ? 0 : 1;
    for (const std::string& name : CatchesIn(loaded->text)) {
      WorldOptions flawed = options;
      if (auto ok = AddFlaw(flawed.flaws, name); !ok) {
        err << "sush sim: " << file << ": " << ok.error().message << "\n";
        return 2;
      }
      ++controls;
      const bool caught = !Holds(loaded->scenario, flawed);
      failed += caught ? 0 : 1;
      line += caught ? " (catches " + name + ")" : " (MISSED flaw " + name + ")";
    }
    out << line << "\n";
  }
  out << "scenarios=" << files.size() << " negative_controls=" << controls << " failed=" << failed
      << "\n";
  return failed == 0 ? 0 : 1;
}

}  // namespace

int SimCommand(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  if (args.empty() || args[0] == "help" || args[0] == "--help") {
    out << kUsage;
    return args.empty() ? 2 : 0;
  }
  if (args[0] == "run") return Run(args, out, err);
  if (args[0] == "explore") return Explore(args, out, err);
  if (args[0] == "check") return Check(args, out, err);
  if (args[0] == "flaws") {
    for (const std::string& name : FlawNames()) out << name << "\n";
    return 0;
  }
  return Usage(err, "unknown sim command '" + args[0] + "'");
}

}  // namespace once::sim
