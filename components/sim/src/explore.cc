#include "once/sim/explore.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <mutex>
#include <set>
#include <thread>

#include "once/base/rng.h"

namespace once::sim {
namespace {

uint64_t Mix(uint64_t a, uint64_t b) {
  uint64_t x = a ^ (b + 0x9e3779b97f4a7c15ULL + (a << 6) + (a >> 2));
  x ^= x >> 31;
  x *= 0xbf58476d1ce4e5b9ULL;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebULL;
  x ^= x >> 31;
  return x;
}

// What the generator believes about the rack it is writing steps for.
class Generator {
 public:
  Generator(uint64_t seed, const ExploreOptions& options) : rng_(seed), options_(options) {}

  Scenario Draw() {
    const int n = options_.sleds_min +
                  static_cast<int>(rng_.Below(options_.sleds_max - options_.sleds_min + 1));
    up_.assign(n, true);
    group_.assign(n, 0);
    sim::Sleds sleds{n, {}};
    if (rng_.Below(2) == 0) {  // a cold boot split in two
      split_ = true;
      sleds.split = Split(n, 2);
      for (int g = 0; g < static_cast<int>(sleds.split.size()); ++g) {
        for (int s : sleds.split[g]) group_[s] = g;
      }
    }
    const uint64_t cap_roll = rng_.Below(10);
    if (cap_roll < 4)
      Emit(LeftCap{0});
    else if (cap_roll < 6)
      Emit(LeftCap{1});
    // Sessions kept besides the recorded one: none (V alone), one, or all.
    const uint64_t session_roll = rng_.Below(10);
    if (session_roll < 4)
      Emit(LeftCap{0, true});
    else if (session_roll < 6)
      Emit(LeftCap{1, true});
    Emit(sleds);
    const int actions =
        options_.actions_min +
        static_cast<int>(rng_.Below(options_.actions_max - options_.actions_min + 1));
    for (int i = 0; i < actions; ++i) Action();
    // The end of every schedule: everyone back, linked, settled; a probe
    // session and job that every trusted sled must run.
    Emit(Heal{});
    for (int s = 0; s < n; ++s) {
      if (!up_[s]) Emit(Boot{s});
    }
    Emit(Settle{});
    Emit(SessionStart{"Z", 0});
    Emit(Settle{});
    Emit(JobStart{"Zprobe", "Z", 0, "*", "true"});
    Emit(Settle{});
    return std::move(scenario_);
  }

 private:
  void Emit(Step step) {
    scenario_.steps.push_back(std::move(step));
    scenario_.lines.push_back(static_cast<int>(scenario_.steps.size()));
  }
  int Count() const { return static_cast<int>(up_.size()); }
  int Pick(bool want_up) {
    std::vector<int> candidates;
    for (int s = 0; s < Count(); ++s) {
      if (up_[s] == want_up) candidates.push_back(s);
    }
    if (candidates.empty()) return -1;
    return candidates[rng_.Below(candidates.size())];
  }
  std::vector<SledSet> Split(int n, int parts) {
    std::vector<SledSet> groups(parts);
    std::vector<int> order(n);
    for (int i = 0; i < n; ++i) order[i] = i;
    for (int i = n - 1; i > 0; --i) std::swap(order[i], order[rng_.Below(i + 1)]);
    for (int i = 0; i < n; ++i) groups[i < parts ? i : rng_.Below(parts)].push_back(order[i]);
    for (SledSet& g : groups) std::sort(g.begin(), g.end());
    return groups;
  }
  std::string Target() {
    if (rng_.Below(2) == 0) return "*";
    std::set<int> picked;
    const int k = 1 + static_cast<int>(rng_.Below(3));
    for (int i = 0; i < k; ++i) picked.insert(static_cast<int>(rng_.Below(Count())));
    std::string out;
    for (int s : picked) out += (out.empty() ? "" : ",") + SledName(s);
    return out;
  }
  std::string Command() {
    const uint64_t roll = rng_.Below(10);
    if (roll < 6) return "true";
    if (roll < 8) return "false";
    return "sleep " + std::to_string(1 + rng_.Below(4));
  }

  void Action() {
    uint64_t roll = rng_.Below(100);
    // A rack booted split keeps its two universes until a link joins them:
    // mostly move sleds between them then, and now and then bounce one back
    // and forth with work on both sides (the universe flip-flops).
    if (split_ && roll >= 46 && roll < 56) {
      if (rng_.Below(2) == 0) return Bounce();
      roll = 56;
    }
    if (roll < 14) return Emit(Settle{});
    if (roll < 24) {
      const int via = Pick(true);
      if (via < 0) return;
      const std::string label = std::string(1, static_cast<char>('A' + sessions_ % 25));
      ++sessions_;
      latest_[group_[via]] = label;
      return Emit(SessionStart{label, via});
    }
    if (roll < 46) {
      const int via = Pick(true);
      if (via < 0 || !latest_.contains(group_[via])) return;
      return Emit(
          JobStart{"J" + std::to_string(++jobs_), latest_[group_[via]], via, Target(), Command()});
    }
    if (roll < 52) {
      std::vector<SledSet> groups = Split(Count(), 2 + static_cast<int>(rng_.Below(2)));
      for (int g = 0; g < static_cast<int>(groups.size()); ++g) {
        for (int s : groups[g]) group_[s] = g;
      }
      return Emit(Partition{groups});
    }
    if (roll < 56) {
      group_.assign(Count(), 0);
      return Emit(Heal{});
    }
    if (roll < 66) {  // a move: crash, relink to another group, boot
      const int s = Pick(true);
      if (s < 0) return;
      std::vector<int> others;
      for (int o = 0; o < Count(); ++o) {
        if (o != s && group_[o] != group_[s]) others.push_back(o);
      }
      if (others.empty()) {
        for (int o = 0; o < Count(); ++o) {
          if (o != s) others.push_back(o);
        }
      }
      const int anchor = others[rng_.Below(others.size())];
      SledSet to;
      for (int o = 0; o < Count(); ++o) {
        if (o != s && group_[o] == group_[anchor]) to.push_back(o);
      }
      Emit(Crash{s});
      Emit(Move{s, to});
      group_[s] = group_[anchor];
      Emit(Boot{s});
      if (rng_.Below(2) == 0) Emit(Settle{});
      return;
    }
    if (roll < 72) {  // a restart in place
      const int s = Pick(true);
      if (s < 0) return;
      Emit(Crash{s});
      return Emit(Boot{s});
    }
    if (roll < 76) {
      const int s = Pick(true);
      if (s < 0) return;
      up_[s] = false;
      return Emit(Crash{s});
    }
    if (roll < 82) {
      const int s = Pick(false);
      if (s < 0) return;
      up_[s] = true;
      return Emit(Boot{s});
    }
    if (roll < 86) {
      const int s = static_cast<int>(rng_.Below(Count()));
      const int drive = static_cast<int>(rng_.Below(2));
      const uint64_t f = rng_.Below(10);
      const DriveFault fault = f < 6   ? DriveFault::kTear
                               : f < 8 ? DriveFault::kWipe
                                       : DriveFault::kCorrupt;
      return Emit(Drive{s, drive, fault});
    }
    if (roll < 88) {
      const int s = Pick(false);
      if (s < 0) return;
      return Emit(WipeData{s});
    }
    if (roll < 90) return Emit(Reset{static_cast<int>(rng_.Below(Count()))});
    return Emit(Wait{100 + static_cast<int64_t>(rng_.Below(3000))});
  }

  // Moves a sled to the other side and back, and there again, with a job for
  // it on each side in between.
  void Bounce() {
    const int s = Pick(true);
    if (s < 0) return;
    for (int leg = 0; leg < 3; ++leg) {
      std::vector<int> there;
      for (int o = 0; o < Count(); ++o) {
        if (o != s && group_[o] != group_[s]) there.push_back(o);
      }
      if (there.empty()) return;
      Emit(Crash{s});
      Emit(Move{s, there});
      group_[s] = group_[there.front()];
      Emit(Boot{s});
      Emit(Settle{});
      const int via = there[rng_.Below(there.size())];
      if (!latest_.contains(group_[via])) {
        const std::string label = std::string(1, static_cast<char>('A' + sessions_ % 25));
        ++sessions_;
        latest_[group_[via]] = label;
        Emit(SessionStart{label, via});
        Emit(Settle{});
      }
      for (int j = 0; j < 2; ++j) {
        Emit(JobStart{"J" + std::to_string(++jobs_), latest_[group_[via]], via, SledName(s),
                      "true"});
        Emit(Settle{});
      }
    }
  }

  SeededRng rng_;
  const ExploreOptions& options_;
  Scenario scenario_;
  std::vector<bool> up_;
  std::vector<int> group_;
  std::map<int, std::string> latest_;  // the last session started in each group
  int sessions_ = 0;
  int jobs_ = 0;
  bool split_ = false;
};

bool SameKind(const std::optional<Breach>& found, const Breach& breach) {
  return found && found->kind == breach.kind;
}

}  // namespace

// The seed is scrambled before the index is added: Mix(seed, index) alone
// gave seeds 1 and 2 nearly the same schedules (shifted by 64 indexes).
uint64_t ScheduleSeed(uint64_t seed, uint64_t index) { return Mix(Mix(seed, 0), index + 1); }

Scenario RandomSchedule(uint64_t schedule_seed, const ExploreOptions& options) {
  return Generator(schedule_seed, options).Draw();
}

std::optional<Breach> FirstBreach(const Scenario& scenario, uint64_t seed,
                                  const rack::BoundaryFlaws& flaws, WorldStats* stats) {
  WorldOptions options;
  options.seed = seed;
  options.flaws = flaws;
  options.keep_log = false;
  auto world = RunScenario(scenario, options);
  if (stats) *stats = world->stats();
  if (world->breaches().empty()) return std::nullopt;
  return world->breaches().front();
}

Scenario Shrink(const Scenario& scenario, uint64_t seed, const rack::BoundaryFlaws& flaws,
                const Breach& breach) {
  // The rack's creation (and the options before it) stays; delta debugging
  // over the rest.
  size_t head = 0;
  while (head < scenario.steps.size() && !std::holds_alternative<Sleds>(scenario.steps[head])) {
    ++head;
  }
  ++head;
  std::vector<Step> steps(scenario.steps.begin() + static_cast<ptrdiff_t>(head),
                          scenario.steps.end());
  auto build = [&](const std::vector<Step>& rest) {
    Scenario s;
    s.steps.assign(scenario.steps.begin(), scenario.steps.begin() + static_cast<ptrdiff_t>(head));
    s.steps.insert(s.steps.end(), rest.begin(), rest.end());
    for (size_t i = 0; i < s.steps.size(); ++i) s.lines.push_back(static_cast<int>(i + 1));
    return s;
  };
  auto breaches = [&](const std::vector<Step>& rest) {
    return SameKind(FirstBreach(build(rest), seed, flaws), breach);
  };
  size_t chunks = 2;
  while (steps.size() >= 2) {
    const size_t size = (steps.size() + chunks - 1) / chunks;
    bool reduced = false;
    for (size_t start = 0; start < steps.size(); start += size) {
      std::vector<Step> rest(steps.begin(), steps.begin() + start);
      rest.insert(rest.end(), steps.begin() + std::min(steps.size(), start + size), steps.end());
      if (breaches(rest)) {
        steps = std::move(rest);
        chunks = std::max<size_t>(chunks - 1, 2);
        reduced = true;
        break;
      }
    }
    if (!reduced) {
      if (chunks >= steps.size()) break;
      chunks = std::min(steps.size(), chunks * 2);
    }
  }
  // One more pass, one step at a time.
  for (size_t i = 0; i < steps.size();) {
    std::vector<Step> rest = steps;
    rest.erase(rest.begin() + static_cast<ptrdiff_t>(i));
    if (breaches(rest)) {
      steps = std::move(rest);
    } else {
      ++i;
    }
  }
  return build(steps);
}

ExploreResult Explore(const ExploreOptions& options) {
  const auto started = std::chrono::steady_clock::now();
  ExploreResult result;
  std::mutex mu;
  std::atomic<uint64_t> best{UINT64_MAX};  // the lowest breaching index so far
  std::optional<FoundBreach> found;
  const int threads = std::max(1, options.threads);
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      ExploreResult mine;
      for (uint64_t i = static_cast<uint64_t>(t); i < options.schedules; i += threads) {
        if (options.stop_at_breach && i > best.load()) break;
        const uint64_t seed = ScheduleSeed(options.seed, i);
        Scenario schedule = RandomSchedule(seed, options);
        WorldStats stats;
        std::optional<Breach> breach = FirstBreach(schedule, seed, options.flaws, &stats);
        ++mine.schedules;
        mine.jobs_run += stats.jobs_run;
        mine.skipped += stats.skipped;
        mine.interrupted += stats.interrupted;
        if (!breach) continue;
        ++mine.breaches;
        std::lock_guard lock(mu);
        if (!found || i < found->index) {
          found = FoundBreach{i, seed, *breach, schedule, {}};
          best = i;
        }
      }
      std::lock_guard lock(mu);
      result.schedules += mine.schedules;
      result.breaches += mine.breaches;
      result.jobs_run += mine.jobs_run;
      result.skipped += mine.skipped;
      result.interrupted += mine.interrupted;
    });
  }
  for (std::thread& t : pool) t.join();
  if (found && options.shrink) {
    found->shrunk = Shrink(found->schedule, found->seed, options.flaws, found->breach);
  }
  result.first_breach = std::move(found);
  result.seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  return result;
}

Result<rack::BoundaryFlaws> FlawByName(std::string_view name) {
  rack::BoundaryFlaws flaws;
  if (name == "single-session-version")
    flaws.single_session_version = true;
  else if (name == "no-filter-insert-on-hit")
    flaws.no_filter_insert_on_hit = true;
  else if (name == "lazy-entry-marker")
    flaws.lazy_entry_marker = true;
  else if (name == "unpersisted-entry-marker")
    flaws.unpersisted_entry_marker = true;
  else if (name == "zombies-by-join-frontier")
    flaws.zombies_by_join_frontier = true;
  else if (name == "record-after-start")
    flaws.record_after_start = true;
  else if (name == "position-unchecked")
    flaws.position_unchecked = true;
  else if (name == "rehop-past")
    flaws.rehop_past = true;
  else if (name == "reused-heights")
    flaws.reused_heights = true;
  else
    return MakeError(ErrorCode::kInvalidArgument, "unknown flaw '" + std::string(name) + "'");
  return flaws;
}

std::vector<std::string> FlawNames() {
  return {"single-session-version",
          "no-filter-insert-on-hit",
          "lazy-entry-marker",
          "unpersisted-entry-marker",
          "zombies-by-join-frontier",
          "record-after-start",
          "position-unchecked",
          "rehop-past",
          "reused-heights"};
}

}  // namespace once::sim
