// The chaos test's checker (chaos_check.h).
#include "chaos_check.h"

#include <fmt/format.h>

#include <algorithm>
#include <fstream>
#include <sstream>

#include "once/base/decimal.h"

namespace once::loom_app {
namespace {

// The moment the driver killed `pid` (steady ns), or INT64_MAX: never.
int64_t KilledAt(const std::vector<Kill>& kills, int64_t pid) {
  for (const Kill& k : kills) {
    if (k.pid == pid) return k.t_ns;
  }
  return INT64_MAX;
}

struct EffectKey {
  std::string execution_id, step;
  auto operator<=>(const EffectKey&) const = default;
};

std::map<EffectKey, std::vector<const LedgerLine*>> EffectsByStep(
    const std::vector<LedgerLine>& ledger) {
  std::map<EffectKey, std::vector<const LedgerLine*>> by;
  for (const LedgerLine& l : ledger) {
    if (l.what == "effect") by[{l.execution_id, l.step}].push_back(&l);
  }
  for (auto& [key, lines] : by) {
    std::stable_sort(lines.begin(), lines.end(),
                     [](const LedgerLine* a, const LedgerLine* b) { return a->t_ns < b->t_ns; });
  }
  return by;
}

// No step effect by two live processes; every duplicate explained by a
// kill of each earlier runner before the rerun.
void CheckEffects(const std::vector<LedgerLine>& ledger, const ChaosFacts& facts, ChaosVerdict& v) {
  for (const auto& [key, lines] : EffectsByStep(ledger)) {
    v.effects += lines.size();
    for (size_t b = 1; b < lines.size(); ++b) {
      ++v.duplicates;
      bool explained = true;
      for (size_t a = 0; a < b; ++a) {
        bool killed_before = KilledAt(facts.kills, lines[a]->pid) < lines[b]->t_ns;
        if (killed_before) continue;
        explained = false;
        v.breaches.push_back(fmt::format("{}: {} step {} by pid {} at {} ns and by pid {} at {} ns",
                                         lines[a]->pid == lines[b]->pid
                                             ? "a step effect run twice by one live process"
                                             : "a step effect run by two live processes",
                                         key.execution_id, key.step, lines[a]->pid, lines[a]->t_ns,
                                         lines[b]->pid, lines[b]->t_ns));
      }
      if (explained) ++v.duplicates_by_kill;
    }
  }
}

// Every execution the store holds and every queued start ended completed,
// with one terminal event; every direct start reached the store unless its
// submitter was killed or the start was refused; a node saw each end once.
void CheckCompletions(const std::vector<LedgerLine>& ledger, const ChaosFacts& facts,
                      ChaosVerdict& v) {
  v.executions = facts.logs.size();
  for (const auto& [id, log] : facts.logs) {
    if (log.status == "EXECUTION_COMPLETED") ++v.completed;
    if (log.status != "EXECUTION_COMPLETED") {
      v.breaches.push_back(fmt::format("lost: {} ({}) ended {}", id, log.workflow, log.status));
    }
    if (log.terminal_events > 1) {
      v.breaches.push_back(
          fmt::format("duplicated completion: {} has {} terminal events", id, log.terminal_events));
    }
  }
  for (const std::string& id : facts.enqueued) {
    if (!facts.logs.contains(id)) v.breaches.push_back("lost: queued " + id + " never ran");
  }
  std::map<std::string, int64_t> submitter;
  std::set<std::string> refused;
  std::map<std::string, int> ends;
  for (const LedgerLine& l : ledger) {
    if (l.what == "submit") submitter[l.execution_id] = l.pid;
    if (l.what == "startfail") refused.insert(l.execution_id);
    if (l.what == "end") ++ends[l.execution_id];
  }
  v.submitted = submitter.size();
  for (const auto& [id, pid] : submitter) {
    if (facts.logs.contains(id)) continue;
    if (refused.contains(id)) {
      ++v.start_refused;
    } else if (KilledAt(facts.kills, pid) != INT64_MAX) {
      ++v.never_started;  // killed before its first append: never durable
    } else {
      v.breaches.push_back(
          fmt::format("lost: direct start {} by live pid {} not in the store", id, pid));
    }
  }
  for (const auto& [id, n] : ends) {
    if (n > 1) v.breaches.push_back(fmt::format("duplicated completion: {} ended {} times", id, n));
  }
}

void CheckQueues(const std::vector<LedgerLine>& ledger, const ChaosFacts& facts, ChaosVerdict& v) {
  for (const auto& [name, q] : facts.queues) {
    if (q.samples == 0) v.breaches.push_back("queue " + name + " was never sampled");
    if (q.concurrency_max > 0 && q.claimed_max > q.concurrency_max) {
      v.breaches.push_back(fmt::format("queue {}: {} claimed at once, limit {}", name,
                                       q.claimed_max, q.concurrency_max));
    }
    if (q.per_node_concurrency_max > 0 && q.claimed_by_node_max > q.per_node_concurrency_max) {
      v.breaches.push_back(fmt::format("queue {}: {} claimed by one node, limit {}", name,
                                       q.claimed_by_node_max, q.per_node_concurrency_max));
    }
  }
  // From the ledger: a queued execution is in its queue's slot from its
  // claim to its completion, so from the LAST run of its first step (a
  // first step rerun after a kill means the earlier claim was released) to
  // its last effect. Its spans never overlap more than the limit.
  std::map<std::string, std::pair<int64_t, int64_t>> span;  // id -> [first step, last effect]
  for (const LedgerLine& l : ledger) {
    if (l.what != "effect") continue;
    auto& s = span.try_emplace(l.execution_id, INT64_MIN, INT64_MIN).first->second;
    if (l.step == "s1") s.first = std::max(s.first, l.t_ns);
    s.second = std::max(s.second, l.t_ns);
  }
  std::map<std::string, std::vector<std::pair<int64_t, int>>> edges;  // queue -> (t, +1/-1)
  for (const auto& [id, s] : span) {
    for (const auto& [prefix, queue] : facts.queue_of_prefix) {
      if (!id.starts_with(prefix) || s.first == INT64_MIN) continue;
      edges[queue].push_back({s.first, +1});
      edges[queue].push_back({s.second + 1, -1});
    }
  }
  for (auto& [queue, e] : edges) {
    std::sort(e.begin(), e.end());  // an end at t sorts before a start at t
    int64_t now = 0, most = 0;
    for (const auto& [t, d] : e) most = std::max(most, now += d);
    v.span_overlap_max[queue] = static_cast<size_t>(most);
    auto q = facts.queues.find(queue);
    if (q != facts.queues.end() && q->second.concurrency_max > 0 &&
        static_cast<size_t>(most) > q->second.concurrency_max) {
      v.breaches.push_back(fmt::format("queue {}: {} queued executions ran at once, limit {}",
                                       queue, most, q->second.concurrency_max));
    }
  }
}

// Cron: one execution per tick, ticks tick_ms apart with no gap, each
// completed (CheckCompletions) with its step run.
void CheckTicks(const std::vector<LedgerLine>& ledger, const ChaosFacts& facts, ChaosVerdict& v) {
  if (!facts.cron) return;
  std::vector<int64_t> ticks;
  for (const auto& [id, log] : facts.logs) {
    if (!id.starts_with(facts.tick_prefix)) continue;
    int64_t t = 0;
    if (!ParseDecimal(std::string_view(id).substr(facts.tick_prefix.size()), t) ||
        t % facts.tick_ms != 0) {
      v.breaches.push_back("cron: an execution that is no tick: " + id);
      continue;
    }
    ticks.push_back(t);
  }
  std::sort(ticks.begin(), ticks.end());
  v.ticks = ticks.size();
  if (ticks.empty()) v.breaches.push_back("cron: no tick ran");
  for (size_t i = 1; i < ticks.size(); ++i) {
    if (ticks[i] - ticks[i - 1] != facts.tick_ms) {
      v.breaches.push_back(fmt::format("cron: ticks {} and {} with {} missing between",
                                       ticks[i - 1], ticks[i],
                                       (ticks[i] - ticks[i - 1]) / facts.tick_ms - 1));
    }
  }
  std::set<std::string> ran;
  for (const LedgerLine& l : ledger) {
    if (l.what == "effect" && l.execution_id.starts_with(facts.tick_prefix)) {
      ran.insert(l.execution_id);
    }
  }
  for (int64_t t : ticks) {
    std::string id = facts.tick_prefix + std::to_string(t);
    if (!ran.contains(id)) v.breaches.push_back("cron: tick " + id + " ended without its step");
  }
}

// Transactional steps: exactly one committed row per completed execution of
// the workflow that runs it, none for anything else.
void CheckTransactions(const ChaosFacts& facts, ChaosVerdict& v) {
  for (const auto& [id, log] : facts.logs) {
    if (log.workflow != facts.tx_workflow || log.status != "EXECUTION_COMPLETED") continue;
    auto it = facts.tx_rows.find(id);
    int64_t n = it == facts.tx_rows.end() ? 0 : it->second;
    if (n == 1) {
      ++v.tx_exactly_once;
    } else {
      v.breaches.push_back(fmt::format("transactional step of {} committed {} times", id, n));
    }
  }
  for (const auto& [id, n] : facts.tx_rows) {
    auto log = facts.logs.find(id);
    if (log == facts.logs.end() || log->second.workflow != facts.tx_workflow) {
      v.breaches.push_back(fmt::format("transactional rows of {} that ran no such step", id));
    }
  }
}

}  // namespace

std::string FormatLedgerLine(const LedgerLine& l) {
  return fmt::format("{} {} {} {} {} {}\n", l.t_ns, l.pid, l.node, l.what,
                     l.execution_id.empty() ? "-" : l.execution_id, l.step.empty() ? "-" : l.step);
}

Result<std::vector<LedgerLine>> ReadLedger(const std::string& path) {
  std::ifstream in(path);
  if (!in) return MakeError(ErrorCode::kNotFound, "no ledger at " + path);
  std::vector<LedgerLine> out;
  std::string text;
  for (size_t n = 1; std::getline(in, text); ++n) {
    std::istringstream fields(text);
    LedgerLine l;
    std::string t, pid, extra;
    if (!(fields >> t >> pid >> l.node >> l.what >> l.execution_id >> l.step) ||
        (fields >> extra) || !ParseDecimal(t, l.t_ns) || !ParseDecimal(pid, l.pid)) {
      return MakeError(ErrorCode::kCorruption,
                       fmt::format("ledger {} line {}: malformed: '{}'", path, n, text));
    }
    if (l.execution_id == "-") l.execution_id.clear();
    if (l.step == "-") l.step.clear();
    out.push_back(std::move(l));
  }
  return out;
}

ChaosVerdict CheckChaos(const std::vector<LedgerLine>& ledger, const ChaosFacts& facts) {
  ChaosVerdict v;
  for (const std::string& f : facts.node_failures) v.breaches.push_back("node failure: " + f);
  for (const LedgerLine& l : ledger) {
    if (!facts.pids.contains(l.pid)) {
      v.breaches.push_back(fmt::format("ledger line by pid {} the driver never started", l.pid));
      break;
    }
  }
  CheckEffects(ledger, facts, v);
  if (facts.duplicates_within_kills && v.duplicates > facts.kills.size()) {
    v.breaches.push_back(fmt::format("{} step effects ran twice, more than the {} kills",
                                     v.duplicates, facts.kills.size()));
  }
  CheckCompletions(ledger, facts, v);
  CheckQueues(ledger, facts, v);
  CheckTicks(ledger, facts, v);
  CheckTransactions(facts, v);
  return v;
}

std::vector<TakeoverSample> TakeoverLatencies(const std::vector<LedgerLine>& ledger,
                                              const std::vector<Kill>& kills,
                                              int64_t active_window_ns,
                                              const std::set<std::string>& last_steps) {
  std::map<std::string, std::vector<const LedgerLine*>> by_execution;
  for (const LedgerLine& l : ledger) {
    if (l.what == "effect") by_execution[l.execution_id].push_back(&l);
  }
  std::vector<TakeoverSample> out;
  for (auto& [id, lines] : by_execution) {
    std::stable_sort(lines.begin(), lines.end(),
                     [](const LedgerLine* a, const LedgerLine* b) { return a->t_ns < b->t_ns; });
    for (const Kill& k : kills) {
      const LedgerLine* last = nullptr;  // its last line before the kill
      const LedgerLine* next = nullptr;  // the first after it by another process
      for (const LedgerLine* l : lines) {
        if (l->t_ns < k.t_ns) last = l;
        if (l->t_ns >= k.t_ns && l->pid != k.pid && !next) next = l;
      }
      if (!last || last->pid != k.pid || k.t_ns - last->t_ns > active_window_ns ||
          last_steps.contains(last->step)) {
        continue;
      }
      out.push_back({id, k.pid, next ? next->t_ns - k.t_ns : -1});
    }
  }
  return out;
}

std::vector<std::string> CheckChaosControls(const std::vector<LedgerLine>& ledger,
                                            const ChaosFacts& facts) {
  std::vector<std::string> missed;
  auto expect_breach = [&](const std::string& name, const std::vector<LedgerLine>& l,
                           const ChaosFacts& f, std::string_view needle) {
    ChaosVerdict v = CheckChaos(l, f);
    bool caught = std::any_of(v.breaches.begin(), v.breaches.end(), [&](const std::string& b) {
      return b.find(needle) != std::string::npos;
    });
    if (!caught) missed.push_back(name);
  };
  // The doctored effects are run by two processes the driver "started" and
  // never killed, made up here: a run may kill every process it started
  // (its last kills can leave every slot down when the load ends).
  const LedgerLine* effect = nullptr;
  for (const LedgerLine& l : ledger) {
    if (l.what == "effect") effect = &l;
  }
  if (!effect) return {"no step effect to doctor"};
  const int64_t first_pid = facts.pids.empty() ? 1 : *facts.pids.rbegin() + 1;
  ChaosFacts live = facts;
  live.pids.insert({first_pid, first_pid + 1});
  auto doctor = [&](int64_t pid_a, int64_t pid_b) {
    auto doctored = ledger;
    int64_t later_ms = 0;
    for (int64_t pid : {pid_a, pid_b}) {
      LedgerLine twin = *effect;
      twin.pid = pid;
      twin.t_ns += ++later_ms * 1'000'000;
      doctored.push_back(twin);
    }
    return doctored;
  };
  // 1. Two live processes ran the same step (a takeover that ignored
  // ownership, or a stale body the fence did not stop before its effect).
  expect_breach("a step run by two live processes", doctor(first_pid, first_pid + 1), live,
                "by two live processes");
  // 2. The same live process ran it twice.
  expect_breach("a step run twice by one process", doctor(first_pid, first_pid), live,
                "twice by one live process");
  // 3. An execution lost: a queued start that never ran, an open log.
  ChaosFacts f = facts;
  f.enqueued.push_back("q-never-ran");
  expect_breach("a queued start never ran", ledger, f, "lost");
  f = facts;
  if (!f.logs.empty()) {
    f.logs.begin()->second.status = "open";
    expect_breach("an execution left open", ledger, f, "lost");
  }
  // 4. A second completion.
  f = facts;
  if (!f.logs.empty()) {
    ++f.logs.begin()->second.terminal_events;
    expect_breach("two terminal events", ledger, f, "duplicated completion");
  }
  // 5. A transactional step committed twice.
  f = facts;
  if (!f.tx_rows.empty()) {
    ++f.tx_rows.begin()->second;
    expect_breach("a transactional step committed twice", ledger, f, "committed 2 times");
  } else {
    missed.push_back("no transactional row to doctor");
  }
  // 6. A queue limit exceeded (sampled and by the ledger's spans).
  f = facts;
  for (auto& [name, q] : f.queues) {
    q.concurrency_max = q.claimed_max > 1 ? q.claimed_max - 1 : 0;
    if (q.concurrency_max == 0) continue;
    expect_breach("queue " + name + " over its limit", ledger, f, "claimed at once");
    break;
  }
  // 7. A cron tick missing, and one run twice (a second id of one tick
  // cannot exist: ids are the tick; a gap is what a lost tick looks like).
  f = facts;
  std::vector<std::string> ticks;
  for (const auto& [id, log] : f.logs) {
    if (id.starts_with(f.tick_prefix)) ticks.push_back(id);
  }
  std::sort(ticks.begin(), ticks.end(), [](const std::string& a, const std::string& b) {
    return a.size() != b.size() ? a.size() < b.size() : a < b;  // by the tick's number
  });
  if (ticks.size() >= 3) {
    f.logs.erase(ticks[ticks.size() / 2]);
    expect_breach("a cron tick missing", ledger, f, "missing between");
  } else {
    missed.push_back("fewer than 3 ticks to doctor");
  }
  return missed;
}

}  // namespace once::loom_app
