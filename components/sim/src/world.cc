#include "once/sim/world.h"

#include <sodium.h>

#include <algorithm>
#include <cstdio>
#include <functional>
#include <queue>
#include <set>
#include <sstream>

#include "once/base/clock.h"
#include "once/base/overloaded.h"
#include "once/base/rng.h"
#include "once/gossip/bookmark.h"
#include "once/gossip/session.h"
#include "once/locker/fs.h"
#include "once/rack/chain.h"
#include "once/rack/locker_boundary_store.h"
#include "once/rack/sled.h"

namespace once::sim {
namespace {

constexpr int64_t kEpochMs = 1'700'000'000'000;
const std::filesystem::path kDrives[2] = {"/m2a/sush", "/m2b/sush"};
const std::filesystem::path kData = "/data";
const std::filesystem::path kBookmark = "/data/gossip.bookmark";
// A settle waits for jobs that end within this much virtual time.
constexpr int64_t kSettleJobHorizonMs = 60'000;
// How often a settle checks for quiescence.
constexpr int64_t kSettleStepMs = 50;

std::string Baseboard(int i) {
  char serial[16];
  std::snprintf(serial, sizeof(serial), "SIM%05d", i);
  return std::string("913-0000019:") + serial;
}

uint64_t Mix(uint64_t a, uint64_t b) {
  uint64_t x = a ^ (b + 0x9e3779b97f4a7c15ULL + (a << 6) + (a >> 2));
  x ^= x >> 31;
  x *= 0xbf58476d1ce4e5b9ULL;
  x ^= x >> 27;
  return x;
}

// What a job's command does in virtual time.
struct Behaviour {
  int64_t duration_ms = 1;
  int exit_code = 0;
};
Behaviour BehaviourOf(const std::string& command) {
  std::istringstream in(command);
  std::string word;
  in >> word;
  if (word == "false") return {1, 1};
  if (word == "exit") {
    int code = 0;
    in >> code;
    return {1, code};
  }
  if (word == "sleep") {
    double seconds = 0;
    in >> seconds;
    return {std::max<int64_t>(1, static_cast<int64_t>(seconds * 1000)), 0};
  }
  return {1, 0};
}

struct Process {
  rack::JobId job;
  uint64_t life = 0;
  int64_t ends_at = 0;
  int exit_code = 0;
  bool killed = false;
  bool ended = false;
  bool reported = false;
};

class SimBookmarks final : public gossip::BookmarkStore {
 public:
  explicit SimBookmarks(locker::Fs& fs) : fs_(fs) {}
  Status Save(const gossip::Bookmark& bookmark) override {
    const Bytes bytes = gossip::EncodeBookmark(bookmark);
    const std::filesystem::path tmp = kBookmark.string() + ".tmp";
    ONCE_RETURN_IF_ERROR(fs_.WriteSynced(tmp, bytes, 0600));
    ONCE_RETURN_IF_ERROR(fs_.Rename(tmp, kBookmark));
    return fs_.SyncDir(kData);
  }

 private:
  locker::Fs& fs_;
};

}  // namespace

struct SimSled;

// One process life of a sled.
struct Life {
  uint64_t id = 0;
  std::unique_ptr<SeededRng> rng;
  std::unique_ptr<SimBookmarks> bookmarks;
  std::unique_ptr<gossip::Host> host;
  std::unique_ptr<rack::LockerBoundaryStore> store;
  std::unique_ptr<rack::SledCore> core;
  std::unique_ptr<rack::JobRunner> runner;
  std::unique_ptr<rack::GossipPort> port;
  std::unique_ptr<rack::Sled> sled;
  uint64_t sessions_completed = 0;
  bool initiating = false;
  ~Life() {  // the wiring first, then what it points at
    sled.reset();
    port.reset();
    runner.reset();
    core.reset();
    store.reset();
    host.reset();
  }
};

// Which record (life, revision) and universe a sled's heights were taken of.
struct HeightsOf {
  uint64_t life = 0;
  uint64_t revision = 0;
  rack::NetworkId network;
  friend bool operator==(const HeightsOf&, const HeightsOf&) = default;
};

struct SimSled {
  int index = 0;
  std::string baseboard;
  locker::MemoryFs drives;
  locker::MemoryFs data;
  std::set<int> links;
  std::unique_ptr<Life> life;
  uint64_t lives = 0;
  std::map<rack::JobId, int> runs;
  // Jobs some life of this sled refused or cancelled (Error: their session
  // was no longer active when they arrived; Cancelled: a newer session's
  // start cancelled them). A later life may judge the same job again by its
  // record (Skipped): it still never could run here.
  std::set<rack::JobId> refused;
  std::vector<Process> processes;
  std::vector<std::string> log;
  // Logical times (World::Impl::Tick), so that steps at one virtual instant keep their order.
  uint64_t disturbed_at = 0;
  uint64_t crashed_at = 0;
  uint64_t booted_at = 0;
  uint64_t accepted_session_at = 0;  // the last session start this sled accepted
  uint64_t settled_up_at = 0;        // the last settle this sled was up through
  uint64_t arrived_at = 0;           // the first such settle after its last disturbance
  std::optional<int64_t> pump_at;
  std::optional<rack::NetworkId> network;  // as the core last saw it
  itc::Version heights;                    // rack::RecordedHeights of its record, as last seen up
  std::optional<HeightsOf> heights_of;     // what `heights` was computed from
  bool wiped = false;                      // a drive was wiped since the last boot
  bool up() const { return life != nullptr; }
};

// One reconciliation session between two sled lives.
struct GossipSession {
  uint64_t id = 0;
  int side[2] = {0, 0};  // initiator, responder
  uint64_t life[2] = {0, 0};
  std::optional<gossip::SessionMachine> machine[2];
  bool done[2] = {false, false};
  gossip::Mode mode = gossip::Mode::kSync;
};

struct World::Impl {
  WorldOptions options;
  SeededRng rng;
  rack::KeyPair operator_keys;
  rack::TrustedKeys trusted;
  int64_t now = 0;
  uint64_t seq = 0;
  uint64_t next_life = 1;
  uint64_t next_session = 1;

  struct Event {
    int64_t at;
    uint64_t seq;
    std::function<void()> run;
    bool operator>(const Event& o) const { return std::tie(at, seq) > std::tie(o.at, o.seq); }
  };
  std::priority_queue<Event, std::vector<Event>, std::greater<Event>> events;
  std::vector<std::unique_ptr<SimSled>> sleds;
  std::map<uint64_t, std::unique_ptr<GossipSession>> sessions;

  std::map<std::string, rack::SessionId> session_labels;
  std::map<std::string, rack::JobId> job_labels;
  std::map<rack::JobId, std::string> job_names;
  struct Submitted {
    rack::JobId job;
    int via = 0;
    uint64_t at = 0;              // logical
    uint64_t settled_before = 0;  // the last settle's end before the submission (0: none)
    std::vector<int> targets;
    rack::SessionId session;
    std::vector<int> settled;  // targets settled and undisturbed when it was submitted
    rack::JobId successor;     // the chain position after it
    std::set<int> knew;        // sleds whose record heights `via` (and the starter) had heard of
  };
  std::map<rack::SessionId, uint64_t> session_started_at;  // logical
  // The sleds whose record heights the session's starter had heard of.
  std::map<rack::SessionId, std::set<int>> session_knew;
  std::vector<Submitted> submitted;
  bool settled_now = false;  // the last step but expectations was a settle
  uint64_t last_settle = 0;  // logical
  uint64_t clock = 0;
  uint64_t Tick() { return ++clock; }

  std::vector<Breach> breaches;
  std::vector<std::string> failures;
  WorldStats stats;
  crypto_generichash_state trace;

  explicit Impl(WorldOptions o) : options(std::move(o)), rng(Mix(options.seed, 0x5eed)) {
    operator_keys = rack::KeyPair::Generate(rng);
    (void)trusted.Add(operator_keys.public_key);
    // The sleds of a world (one thread) share what they verified.
    trusted.ShareVerified(std::make_shared<rack::VerifiedSignatures>());
    crypto_generichash_init(&trace, nullptr, 0, 32);
  }

  // ---- the trace and the log ----

  void Trace(const std::string& line) {
    const std::string stamped = std::to_string(now) + " " + line + "\n";
    crypto_generichash_update(&trace, reinterpret_cast<const uint8_t*>(stamped.data()),
                              stamped.size());
  }
  void Note(SimSled& s, const std::string& line) {
    Trace(SledName(s.index) + " " + line);
    if (options.keep_log) s.log.push_back("[" + std::to_string(now) + "ms] " + line);
  }
  std::string JobName(const rack::JobId& id) const {
    auto it = job_names.find(id);
    return it != job_names.end() ? it->second : id.ToString().substr(0, 16);
  }
  void Breached(std::string kind, std::string detail) {
    Trace("BREACH " + kind + ": " + detail);
    breaches.push_back(Breach{std::move(kind), std::move(detail)});
  }

  // ---- events ----

  void At(int64_t at, std::function<void()> run) { events.push(Event{at, seq++, std::move(run)}); }
  void RunUntil(int64_t until) {
    while (!events.empty() && events.top().at <= until) {
      Event e = events.top();
      events.pop();
      now = std::max(now, e.at);
      e.run();
    }
    now = std::max(now, until);
  }
  TimePoint Clock() const { return FromUnixMillis(kEpochMs + now); }

  // ---- sleds ----

  SimSled& S(int i) { return *sleds[i]; }

  void SchedulePump(SimSled& s, int64_t at) {
    if (!s.up()) return;
    if (s.pump_at && *s.pump_at <= at && *s.pump_at >= now) return;
    s.pump_at = at;
    const uint64_t life = s.life->id;
    At(at, [this, &s, life, at] {
      if (!s.up() || s.life->id != life) return;
      if (s.pump_at == at) s.pump_at.reset();
      Pump(s);
    });
  }

  void Pump(SimSled& s) {
    Take(s, s.life->sled->Pump(Clock()));
    AfterCall(s);
  }

  // After any call into a sled: a torn write crashed it, a drain pending.
  void AfterCall(SimSled& s) {
    if (!s.up()) return;
    if (s.drives.crashed()) {
      Note(s, "crashed in the middle of a locker write (torn)");
      Crash(s);
      return;
    }
    const auto& network = s.life->core->network();
    if (network && s.network && *network != *s.network) {
      Note(s, "entered universe " + network->ToHex().substr(0, 8));
      s.disturbed_at = Tick();
    }
    if (network) s.network = network;
    if (network && s.life->core->trusted()) {
      const HeightsOf of{s.life->id, s.life->core->boundary_revision(), *network};
      if (s.heights_of != of) {
        s.heights = rack::RecordedHeights(s.life->core->boundary(), *network);
        s.heights_of = of;
      }
    }
    if (!s.life->sled->drained()) SchedulePump(s, now + options.drain_timeout_ms);
  }

  void Take(SimSled& s, const std::vector<rack::Output>& outputs) {
    for (const rack::Output& output : outputs) {
      std::visit(
          Overloaded{
              [&](const rack::JobStatusChanged& c) {
                if (c.baseboard != s.baseboard) return;
                if (c.status.state == rack::JobState::kError ||
                    c.status.state == rack::JobState::kCancelled) {
                  s.refused.insert(c.job_id);
                }
                std::string line =
                    JobName(c.job_id) + " " + std::string(rack::JobStateName(c.status.state));
                if (c.status.state == rack::JobState::kSkipped) {
                  line += " (" + std::string(rack::SkipReasonName(c.status.skip_reason)) + ")";
                  ++stats.skipped;
                }
                if (c.status.state == rack::JobState::kInterrupted) ++stats.interrupted;
                if (c.status.state == rack::JobState::kStopped) {
                  line += " exit " + std::to_string(c.status.outcome.code);
                }
                if (c.status.state == rack::JobState::kError) line += ": " + c.status.error;
                Note(s, line);
              },
              [&](const rack::BoundaryChanged& c) { Note(s, "boundary: " + c.why); },
              [&](const rack::Diagnostic& d) {
                if (options.keep_log) Note(s, "diagnostic: " + d.error.ToString());
              },
              [&](const rack::SledErrorSeen& e) {
                if (e.error.baseboard != s.baseboard) return;
                Note(s,
                     std::string(rack::SledErrorKindName(e.error.kind)) + ": " + e.error.message);
              },
              [&](const auto&) {},
          },
          output);
    }
  }

  // ---- processes (the sled's JobRunner) ----

  class Runner final : public rack::JobRunner {
   public:
    Runner(Impl& w, SimSled& s, uint64_t life) : w_(w), s_(s), life_(life) {}
    Status Start(const rack::JobSpec& spec) override { return w_.StartProcess(s_, life_, spec); }
    Status Stop(const rack::JobId& id) override {
      for (Process& p : s_.processes) {
        if (p.life == life_ && p.job == id && !p.ended) {
          p.killed = true;
          p.ended = true;
          w_.SchedulePump(s_, w_.now);
          return Ok();
        }
      }
      return MakeError(ErrorCode::kNotFound, "job not running");
    }
    std::vector<rack::ProcessExited> Poll(std::chrono::milliseconds) override {
      std::vector<rack::ProcessExited> out;
      for (Process& p : s_.processes) {
        if (p.life != life_ || !p.ended || p.reported) continue;
        p.reported = true;
        rack::ExitReport report;
        report.outcome = p.killed
                             ? rack::ExitOutcome{rack::ExitOutcome::Kind::kSignaled, 9, ""}
                             : rack::ExitOutcome{rack::ExitOutcome::Kind::kExited, p.exit_code, ""};
        out.push_back(rack::ProcessExited{p.job, report});
      }
      return out;
    }
    size_t running() const override {
      size_t n = 0;
      for (const Process& p : s_.processes) n += p.life == life_ && !p.ended;
      return n;
    }

   private:
    Impl& w_;
    SimSled& s_;
    uint64_t life_;
  };

  Status StartProcess(SimSled& s, uint64_t life, const rack::JobSpec& spec) {
    ++stats.jobs_run;
    const int runs = ++s.runs[spec.job_id];
    Note(s, "START " + JobName(spec.job_id) + " (life " + std::to_string(s.lives) + ")");
    if (runs > 1) {
      Breached("at-most-once", SledName(s.index) + " started " + JobName(spec.job_id) + " " +
                                   std::to_string(runs) + " times");
    }
    bool concurrent = false;
    if (auto m = rack::Decode(spec.request); m) {
      if (const auto* r = std::get_if<rack::SignedRequest>(&*m)) {
        if (const auto* job = rack::AsJobStart(*r)) concurrent = job->concurrent;
      }
    }
    for (const Process& p : s.processes) {
      if (!p.ended && !concurrent) {
        Breached("one-at-a-time", SledName(s.index) + " started " + JobName(spec.job_id) +
                                      " while " + JobName(p.job) + " may still run");
      }
    }
    const Behaviour b = BehaviourOf(spec.command);
    s.processes.push_back(Process{spec.job_id, life, now + b.duration_ms, b.exit_code});
    const size_t index = s.processes.size() - 1;
    At(now + b.duration_ms, [this, &s, index, life] {
      Process& p = s.processes[index];
      if (p.ended || p.life != life) return;
      p.ended = true;
      SchedulePump(s, now);
    });
    return Ok();
  }

  class Port final : public rack::GossipPort {
   public:
    Port(Impl& w, SimSled& s) : w_(w), s_(s) {}
    Status Send(Bytes payload) override {
      ONCE_RETURN_IF_ERROR(s_.life->host->Send(std::move(payload)));
      w_.SchedulePump(s_, w_.now);
      return Ok();
    }
    rack::GossipFeed Read(const itc::Version& checkpoint) override {
      return rack::FeedOf(*s_.life->host, checkpoint);
    }
    Status PersistIdentity(const itc::Version& tick_floor) override {
      return s_.life->host->PersistAbove(tick_floor);
    }
    uint64_t sessions_completed() const override { return s_.life->sessions_completed; }
    bool has_peers() const override { return !s_.links.empty(); }

   private:
    Impl& w_;
    SimSled& s_;
  };

  // ---- lives ----

  void Boot(SimSled& s) {
    if (s.up()) {
      Note(s, "boot: already up");
      return;
    }
    for (Process& p : s.processes) {
      if (!p.ended) {
        p.ended = p.killed = p.reported = true;  // the executor kills what a life left
        Note(s, "killed the previous life's " + JobName(p.job));
      }
    }
    auto life = std::make_unique<Life>();
    life->id = next_life++;
    life->rng = std::make_unique<SeededRng>(Mix(Mix(options.seed, s.index + 1), ++s.lives));
    life->bookmarks = std::make_unique<SimBookmarks>(s.data);
    std::optional<gossip::Replica> replica;
    if (auto saved = s.data.Read(kBookmark, 1 << 20); saved && *saved) {
      if (auto bookmark = gossip::DecodeBookmark(**saved); bookmark) {
        replica.emplace(gossip::Replica::Reclaim(std::move(*bookmark)));
      }
    }
    if (!replica) replica.emplace(gossip::Replica::Seed(*life->rng));
    life->host = std::make_unique<gossip::Host>(std::move(*replica), life->bookmarks.get());
    auto store = rack::LockerBoundaryStore::Open(
        {.slots = {kDrives[0], kDrives[1]}, .fs = &s.drives, .rng = life->rng.get()});
    if (s.drives.crashed()) {
      Note(s, "crashed while opening its drives (torn)");
      s.drives.Crash();
      s.data.Crash();
      return;
    }
    if (!store) {
      Note(s, "cannot open its drives: " + store.error().ToString());
      return;
    }
    life->store = std::move(*store);
    Note(s, "boot (life " + std::to_string(s.lives) + "): drives " + life->store->loaded().verdict +
                (life->store->loaded().untrusted_reason.empty()
                     ? ""
                     : " (" + life->store->loaded().untrusted_reason + ")"));
    rack::SledConfig config;
    config.identity = rack::SledIdentity{s.baseboard, static_cast<uint8_t>(s.index)};
    config.build_version = "once-sim";
    config.trusted = trusted;
    config.boundary.flaws = options.flaws;
    config.boundary.left_universes_max = options.left_universes_max;
    config.boundary.left_sessions_max = options.left_sessions_max;
    life->core = std::make_unique<rack::SledCore>(std::move(config), *life->rng, *life->store);
    life->runner = std::make_unique<Runner>(*this, s, life->id);
    life->port = std::make_unique<Port>(*this, s);
    rack::SledOptions sled_options;
    sled_options.drain_timeout = std::chrono::milliseconds(options.drain_timeout_ms);
    life->sled =
        std::make_unique<rack::Sled>(*life->core, *life->runner, *life->port, sled_options);
    s.life = std::move(life);
    s.booted_at = Tick();
    // Its causal past is gone when no sled it can reach has been up since
    // before it went down (its whole partition restarted, and the gossip set
    // with it): a session begun meanwhile is causally unrelated to its
    // markers, so it arrives as a new sled would (the accepted cost).
    if (s.lives > 1 && !HistoryKept(s)) Disturb(s.index);
    // Drives wiped since the last boot that come up empty make it a new
    // sled: sessions and positions from before are skipped on it. (Empty
    // drives that were never wiped are not an excuse: the entry marker must
    // have been persisted.)
    if (s.wiped && s.life->store->loaded().verdict == "empty") Disturb(s.index);
    s.wiped = false;
    SchedulePump(s, now);
    ScheduleRound(s, now + static_cast<int64_t>(rng.Below(options.gossip_interval_ms)));
  }

  bool HistoryKept(const SimSled& s) {
    for (const auto& op : sleds) {
      const SimSled& o = *op;
      if (o.index == s.index || !o.up() || o.booted_at >= s.crashed_at) continue;
      if (Reachable(s.index, o.index)) return true;
    }
    return false;
  }

  void Crash(SimSled& s) {
    if (!s.up()) {
      Note(s, "crash: already down");
      return;
    }
    for (auto it = sessions.begin(); it != sessions.end();) {
      const GossipSession& g = *it->second;
      const bool involved = (g.side[0] == s.index && g.life[0] == s.life->id) ||
                            (g.side[1] == s.index && g.life[1] == s.life->id);
      if (involved) ClearInitiating(g);
      it = involved ? sessions.erase(it) : std::next(it);
    }
    s.life.reset();
    s.pump_at.reset();
    s.crashed_at = Tick();
    // A session start it accepted may have died with it, and with it the
    // session its record now names: a move of sorts.
    if (s.accepted_session_at > last_settle) Disturb(s.index);
    s.drives.Crash();
    s.data.Crash();
    Note(s, "crash");
  }

  // ---- gossip ----

  void ScheduleRound(SimSled& s, int64_t at) {
    const uint64_t life = s.life->id;
    At(at, [this, &s, life] {
      if (!s.up() || s.life->id != life) return;
      Round(s);
      const int64_t jitter = static_cast<int64_t>(rng.Below(options.gossip_interval_ms / 2 + 1));
      ScheduleRound(s, now + options.gossip_interval_ms + jitter);
    });
  }

  void Round(SimSled& s) {
    if (s.life->initiating) return;
    std::vector<int> peers;
    for (int peer : s.links) {
      if (S(peer).up()) peers.push_back(peer);
    }
    if (peers.empty()) return;
    StartSession(s, S(peers[rng.Below(peers.size())]), gossip::Mode::kSync);
  }

  void StartSession(SimSled& a, SimSled& b, gossip::Mode mode) {
    if (!a.up() || !b.up() || !a.links.contains(b.index) || a.life->initiating) return;
    if (mode == gossip::Mode::kSync && SameReplicaState(a, b)) return IdleSession(a, b);
    auto machine = gossip::SessionMachine::Initiate(*a.life->host, mode, {});
    if (!machine) return;
    auto g = std::make_unique<GossipSession>();
    g->id = next_session++;
    g->side[0] = a.index;
    g->side[1] = b.index;
    g->life[0] = a.life->id;
    g->life[1] = b.life->id;
    g->mode = mode;
    g->machine[0].emplace(std::move(*machine));
    a.life->initiating = true;
    GossipSession& ref = *g;
    sessions.emplace(g->id, std::move(g));
    Flush(ref, 0);
  }

  // True when the two replicas hold one state: the same universe, ceiling
  // and message set (digest and count).
  static bool SameReplicaState(const SimSled& a, const SimSled& b) {
    const gossip::Snapshot x = a.life->host->Snap();
    const gossip::Snapshot y = b.life->host->Snap();
    return x.network() == y.network() && x.ceiling() == y.ceiling() && x.summary() == y.summary();
  }

  // A sync session between replicas in one state ships no message and its
  // commit (their Merge) is that state: nothing in either replica changes.
  // Most of a schedule's sessions are such (a settled rack keeps gossiping),
  // so the simulator plays only what such a session does outside the
  // replicas: the bookmark check before the first frame, then, after a
  // round trip, the completed-session count (a drain waits for one) and the
  // pump on both sides. The initiator starts nothing else meanwhile.
  void IdleSession(SimSled& a, SimSled& b) {
    SimSled* side[2] = {&a, &b};
    for (SimSled* s : side) {
      if (auto saved = s->life->host->Persist(); !saved) return;  // a failed session
    }
    a.life->initiating = true;
    const uint64_t life[2] = {a.life->id, b.life->id};
    const int64_t round_trip = 2 * LinkDelay();
    const bool lost = options.frame_loss > 0 && rng.NextDouble() < options.frame_loss;
    At(now + round_trip, [this, side, life, lost] {
      bool alive[2];
      for (int k = 0; k < 2; ++k) alive[k] = side[k]->up() && side[k]->life->id == life[k];
      if (alive[0]) side[0]->life->initiating = false;
      if (lost || !alive[0] || !alive[1] || !side[0]->links.contains(side[1]->index)) return;
      for (SimSled* s : side) {
        ++s->life->sessions_completed;
        ++stats.sessions;
        SchedulePump(*s, now);
      }
    });
  }

  int64_t LinkDelay() {
    return options.link_delay_ms_min +
           static_cast<int64_t>(
               rng.Below(options.link_delay_ms_max - options.link_delay_ms_min + 1));
  }

  void ClearInitiating(const GossipSession& g) {
    SimSled& a = S(g.side[0]);
    if (a.up() && a.life->id == g.life[0]) a.life->initiating = false;
  }

  void Abort(uint64_t id) {
    auto it = sessions.find(id);
    if (it == sessions.end()) return;
    ClearInitiating(*it->second);
    sessions.erase(it);
  }

  bool Alive(const GossipSession& g) {
    for (int k = 0; k < 2; ++k) {
      SimSled& s = S(g.side[k]);
      if (!s.up() || s.life->id != g.life[k]) return false;
    }
    return S(g.side[0]).links.contains(g.side[1]);
  }

  // Writes what side k has to send; each frame arrives after the link's delay.
  void Flush(GossipSession& g, int k) {
    gossip::SessionMachine& m = *g.machine[k];
    std::vector<Bytes> frames = m.TakeOutgoing();
    if (!m.finished() && !frames.empty()) (void)m.OnWritten();
    if (m.finished() && !m.done()) return Abort(g.id);
    const uint64_t id = g.id;
    for (Bytes& frame : frames) {
      const int64_t delay = LinkDelay();
      if (options.frame_loss > 0 && rng.NextDouble() < options.frame_loss) {
        At(now + delay, [this, id] { Abort(id); });
        return;
      }
      At(now + delay, [this, id, k, frame = std::move(frame)] { Arrive(id, 1 - k, frame); });
    }
    if (m.done()) Finished(g, k);
  }

  void Arrive(uint64_t id, int k, const Bytes& frame) {
    auto it = sessions.find(id);
    if (it == sessions.end()) return;
    GossipSession& g = *it->second;
    if (!Alive(g)) return Abort(id);
    SimSled& s = S(g.side[k]);
    if (!g.machine[k]) {
      auto machine = gossip::SessionMachine::Respond(*s.life->host, {});
      if (!machine) return Abort(id);
      g.machine[k].emplace(std::move(*machine));
    }
    if (g.done[k]) return;
    if (auto ok = g.machine[k]->OnFrame(frame); !ok) return Abort(id);
    Flush(g, k);
  }

  void Finished(GossipSession& g, int k) {
    if (g.done[k]) return;
    g.done[k] = true;
    SimSled& s = S(g.side[k]);
    const gossip::SessionReport report = g.machine[k]->report();
    ++s.life->sessions_completed;
    ++stats.sessions;
    using Outcome = gossip::SessionReport::Outcome;
    if (report.outcome != Outcome::kConverged && getenv("SIMDEBUG")) {
      Note(s, "session with " + SledName(g.side[1 - k]) + " mode " +
                  std::to_string(static_cast<int>(g.mode)) + " outcome " +
                  std::to_string(static_cast<int>(report.outcome)) + " received " +
                  std::to_string(report.received));
    }
    if (report.outcome != Outcome::kConverged) {
      Trace("session " + SledName(g.side[0]) + "->" + SledName(g.side[1]) + " side " +
            std::to_string(k) + " outcome " + std::to_string(static_cast<int>(report.outcome)) +
            " got " + std::to_string(report.received));
    }
    SchedulePump(s, now);
    SimSled& other = S(g.side[1 - k]);
    if (k == 0) {
      s.life->initiating = false;
      if (report.outcome == Outcome::kPeerWins) {
        // Lost the game: bootstrap into the peer's universe at once, before
        // anything else can start a session here (as the node's round does).
        sessions.erase(g.id);
        StartSession(s, other, gossip::Mode::kBootstrap);
        return;
      }
    } else if (report.outcome == Outcome::kPeerWins) {
      // Learnt of a winning universe from an inbound session: the same rule
      // as a side that dialled (go and lose as the initiator).
      At(now + 1, [this, &s, &other] { StartSession(s, other, gossip::Mode::kSync); });
    }
    if (g.done[0] && g.done[1]) sessions.erase(g.id);
  }

  // ---- quiescence ----

  bool Quiescent() {
    if (!sessions.empty()) return false;
    for (const auto& sp : sleds) {
      SimSled& s = *sp;
      if (!s.up()) continue;
      const rack::GateState gate = s.life->core->gate();
      if (!s.life->sled->drained() || gate == rack::GateState::kMintingMarker ||
          gate == rack::GateState::kReplaying || gate == rack::GateState::kNotJoined) {
        return false;
      }
      for (const Process& p : s.processes) {
        if (!p.ended && p.ends_at - now <= kSettleJobHorizonMs) return false;
      }
      for (int peer : s.links) {
        SimSled& o = S(peer);
        if (!o.up()) continue;
        auto mine = s.life->host->Read(
            [](const gossip::Replica& r) { return std::make_pair(r.network(), r.ceiling()); });
        auto theirs = o.life->host->Read(
            [](const gossip::Replica& r) { return std::make_pair(r.network(), r.ceiling()); });
        if (mine != theirs) return false;
      }
    }
    return true;
  }

  void Settle() {
    const int64_t deadline = now + options.settle_budget_ms;
    int quiet = 0;
    while (now < deadline) {
      RunUntil(now + kSettleStepMs);
      quiet = Quiescent() ? quiet + 1 : 0;
      if (quiet >= 3) break;
    }
    if (quiet < 3) {
      Breached("settle", "the rack did not settle within " +
                             std::to_string(options.settle_budget_ms) + " ms of virtual time");
    }
    last_settle = Tick();
    for (auto& sp : sleds) {
      if (!sp->up()) continue;
      if (sp->settled_up_at < sp->disturbed_at) sp->arrived_at = last_settle;
      sp->settled_up_at = last_settle;
    }
    CheckSettled();
  }

  // ---- liveness ----

  const rack::JobStatus* OwnStatus(SimSled& s, const rack::JobId& job) {
    return s.up() ? s.life->core->StatusOf(job, s.baseboard) : nullptr;
  }

  // After a settle: nothing sits Started without a process, nothing Queued
  // without a running job ahead of it.
  // Sessions whose chain a client cannot have kept whole: two submissions
  // claimed one chain position (a job signed behind the loser waits behind a
  // hole on the sleds that took the winner), or a job died with the sled that
  // accepted it (those signed after it wait behind it). Both are documented:
  // stop the waiting job, or skip the position.
  std::set<rack::SessionId> BrokenChains() {
    std::map<rack::JobId, int> claims;
    std::set<rack::SessionId> broken;
    for (const Submitted& sub : submitted) {
      if (++claims[sub.job] > 1) broken.insert(sub.session);
      bool known = false;
      for (const auto& sp : sleds) known = known || (sp->up() && sp->life->core->FindJob(sub.job));
      if (!known) broken.insert(sub.session);
    }
    return broken;
  }

  void CheckSettled() {
    const std::set<rack::SessionId> raced = BrokenChains();
    for (const auto& sp : sleds) {
      SimSled& s = *sp;
      if (!s.up() || !s.life->core->trusted()) continue;
      const std::vector<rack::JobId> running = s.life->core->running();
      for (const rack::JobId& job : s.life->core->History(0, SIZE_MAX)) {
        const rack::JobStatus* own = OwnStatus(s, job);
        if (own == nullptr) continue;
        if (own->state == rack::JobState::kStarted &&
            std::find(running.begin(), running.end(), job) == running.end()) {
          Breached("liveness/started", JobName(job) + " sits Started on " + SledName(s.index) +
                                           " with no process of this life behind it");
        }
        const rack::JobRecord* record = s.life->core->FindJob(job);
        if (own->state == rack::JobState::kQueued && running.empty() &&
            s.life->core->gate() == rack::GateState::kOpen && record != nullptr &&
            !raced.contains(record->job.session_id) && !s.life->core->waiting_at_hole()) {
          Breached("liveness/queued", JobName(job) + " sits Queued on " + SledName(s.index));
        }
      }
    }
  }

  bool Reachable(int from, int to) {
    std::set<int> seen{from};
    std::vector<int> todo{from};
    while (!todo.empty()) {
      const int at = todo.back();
      todo.pop_back();
      if (at == to) return true;
      for (int next : S(at).links) {
        if (S(next).up() && seen.insert(next).second) todo.push_back(next);
      }
    }
    return false;
  }

  void CheckSubmitted() {
    const std::set<rack::SessionId> raced = BrokenChains();
    for (const Submitted& sub : submitted) {
      // Judged only once a settle after the submission gave it time to spread.
      if (sub.settled_before == 0 || raced.contains(sub.session) || last_settle <= sub.at) {
        continue;
      }
      const SimSled& via = S(sub.via);
      // A sled that accepted a job and crashed may have taken it along
      // (accepted requests live in gossip only).
      if (via.disturbed_at > sub.settled_before || via.crashed_at >= sub.at) continue;
      for (int x : sub.settled) {
        SimSled& s = S(x);
        if (!s.up() || !s.life->core->trusted()) continue;
        if (s.disturbed_at > sub.at || !Reachable(sub.via, x)) continue;
        const rack::JobStatus* own = OwnStatus(s, sub.job);
        // Ran, or never could: cancelled, or refused (its session ended first).
        const bool ran =
            own != nullptr &&
            (own->state == rack::JobState::kStopped || own->state == rack::JobState::kInterrupted ||
             own->state == rack::JobState::kCancelled || own->state == rack::JobState::kError);
        // Or started by an earlier life (its next life skips it: already executed).
        if (ran || s.runs.contains(sub.job) || s.refused.contains(sub.job)) continue;
        if (!s.life->core->running().empty()) continue;  // held by a long job
        // Behind a hole (gossip lost a request: documented, stop or skip it).
        if (own != nullptr && own->state == rack::JobState::kQueued &&
            s.life->core->waiting_at_hole()) {
          continue;
        }
        Breached("liveness/not-run",
                 JobName(sub.job) + " was submitted while " + SledName(x) +
                     " was settled and undisturbed, but it did not run there (" +
                     (own ? std::string(rack::JobStateName(own->state)) +
                                (own->state == rack::JobState::kSkipped
                                     ? " " + std::string(rack::SkipReasonName(own->skip_reason))
                                     : "")
                          : "no status") +
                     ")");
      }
    }
  }

  // ---- the client ----

  std::optional<rack::Reply> Call(SimSled& via, const rack::Input& input) {
    if (!via.up()) return std::nullopt;
    std::optional<rack::Reply> reply;
    std::vector<rack::Output> outputs = via.life->sled->Handle(input);
    for (const rack::Output& o : outputs) {
      if (const auto* r = std::get_if<rack::Reply>(&o)) reply = *r;
    }
    Take(via, outputs);
    AfterCall(via);
    if (via.up()) {
      Take(via, via.life->sled->Deliver(Clock()));
      AfterCall(via);
    }
    return reply;
  }

  bool Submit(SimSled& via, const rack::RequestPayload& payload, std::string what,
              std::optional<rack::SessionId>* session = nullptr) {
    auto request = rack::Sign(payload, operator_keys);
    auto bytes = request ? rack::Encode(rack::Message{*request})
                         : Result<Bytes>(std::unexpected(request.error()));
    if (!bytes) {
      Note(via, what + " refused: " + bytes.error().ToString());
      return false;
    }
    std::optional<rack::Reply> reply = Call(via, rack::ClientSubmit{*bytes});
    if (!reply) {
      Note(via, what + ": the sled is down");
      return false;
    }
    if (!reply->status) {
      Note(via, what + " refused: " + reply->status.error().ToString());
      return false;
    }
    if (session) *session = reply->session_id;
    return true;
  }

  std::string RackTarget(const std::string& target) const {
    if (target == "*") return target;
    std::string out;
    size_t i = 0;
    while (i <= target.size()) {
      size_t j = target.find(',', i);
      if (j == std::string::npos) j = target.size();
      std::string item = target.substr(i, j - i);
      if (!item.empty() && item[0] == 's') item = item.substr(1);
      out += (out.empty() ? "" : ",") + item;
      i = j + 1;
    }
    return out;
  }

  std::vector<int> TargetSleds(const std::string& rack_target) const {
    std::vector<int> out;
    auto parsed = rack::Target::Parse(rack_target);
    if (!parsed) return out;
    for (const auto& s : sleds) {
      if (parsed->Matches(rack::SledIdentity{s->baseboard, static_cast<uint8_t>(s->index)})) {
        out.push_back(s->index);
      }
    }
    return out;
  }

  void StartSessionStep(const SessionStart& step) {
    SimSled& via = S(step.via);
    std::optional<rack::Reply> nonce = Call(via, rack::IssueSessionNonce{});
    if (!nonce || !nonce->nonce) {
      Note(via, "session start " + step.label + ": no nonce (down or refused)");
      return;
    }
    rack::Nonce signer;
    rng.Fill(signer.bytes.data(), signer.bytes.size());
    std::optional<rack::SessionId> id;
    if (Submit(via, rack::SessionStart{via.baseboard, *nonce->nonce, signer},
               "session start " + step.label, &id) &&
        id) {
      session_labels[step.label] = *id;
      via.accepted_session_at = Tick();
      session_started_at[*id] = via.accepted_session_at;
      session_knew[*id] = Heard(via);
      Note(via, "session " + step.label + " started");
    }
  }

  // The sleds whose record heights (rack::RecordedHeights) `via`'s replica
  // covers: a session or job made there is above their markers. What a sled
  // made after a crash cost it the heights of a peer it has not heard from
  // since is causally unrelated to that peer's markers, and the peer may
  // skip it (the accepted cost: docs/sush-simulator.md).
  std::set<int> Heard(SimSled& via) {
    std::set<int> heard;
    if (!via.up()) return heard;
    const itc::Version seen = via.life->host->Read(
        [](const gossip::Replica& replica) { return replica.MakeBookmark().version; });
    for (auto& sp : sleds) {
      if (itc::Leq(sp->heights, seen)) heard.insert(sp->index);
    }
    return heard;
  }

  void StartJobStep(const JobStart& step) {
    SimSled& via = S(step.via);
    auto session = session_labels.find(step.session);
    if (session == session_labels.end()) {
      failures.push_back("job " + step.label + ": no session labelled " + step.session);
      return;
    }
    if (!via.up()) {
      Note(via, "job " + step.label + ": the sled is down");
      return;
    }
    if (via.life->core->active_session() != session->second) {
      Note(via, "job " + step.label + " refused: session " + step.session + " is not active here");
      return;
    }
    const rack::JobId id = *via.life->core->next_free_job_id();
    const std::string target = RackTarget(step.target);
    const uint64_t at = Tick();
    // When the chain position came to be: the session's start for its first
    // position, else the submission of the job whose digest derived it. A
    // sled that arrived after that may have to skip it (boundary.h,
    // JobMayRun: at most once is per position).
    std::optional<uint64_t> position_at;
    std::set<int> knew = Heard(via);
    const std::set<int>& starter_knew = session_knew[session->second];
    std::set<int> position_knew;
    if (id == rack::FirstJobId(session->second)) {
      if (auto it = session_started_at.find(session->second); it != session_started_at.end()) {
        position_at = it->second;
      }
      position_knew = starter_knew;
    } else {
      for (const Submitted& earlier : submitted) {
        if (earlier.successor == id) {
          position_at = earlier.at;
          position_knew = earlier.knew;
        }
      }
    }
    std::erase_if(knew, [&](int x) { return !starter_knew.contains(x); });
    auto request =
        rack::Sign(rack::JobStart{id, session->second, step.command, target, false}, operator_keys);
    if (request && Submit(via, request->payload, "job " + step.label)) {
      job_labels[step.label] = id;
      job_names[id] = step.label;
      Submitted sub{id,
                    step.via,
                    at,
                    last_settle,
                    TargetSleds(target),
                    session->second,
                    {},
                    rack::NextJobId(rack::ToBeSignedDigest(*request)),
                    knew};
      for (int x : sub.targets) {
        const SimSled& t = S(x);
        if (t.settled_up_at > t.disturbed_at && position_at && *position_at > t.arrived_at &&
            knew.contains(x) && position_knew.contains(x)) {
          sub.settled.push_back(x);
        }
      }
      submitted.push_back(std::move(sub));
    }
  }

  void Disturb(int sled) { S(sled).disturbed_at = Tick(); }
  void SetLinks(const std::vector<std::set<int>>& links) {
    for (size_t i = 0; i < sleds.size(); ++i) {
      if (S(static_cast<int>(i)).links != links[i]) Disturb(static_cast<int>(i));
      S(static_cast<int>(i)).links = links[i];
    }
  }
  void Groups(const std::vector<SledSet>& groups) {
    std::vector<std::set<int>> links(sleds.size());
    for (const SledSet& g : groups) {
      for (int a : g) {
        for (int b : g) {
          if (a != b) links[a].insert(b);
        }
      }
    }
    SetLinks(links);
  }

  // ---- steps ----

  void Apply(const Step& step) {
    ++stats.steps;
    // An expectation changes nothing: the rack stays as settled as it was.
    const bool expectation = std::holds_alternative<ExpectRan>(step) ||
                             std::holds_alternative<ExpectStatus>(step) ||
                             std::holds_alternative<ExpectTrust>(step);
    if (!expectation) {
      settled_now =
          std::holds_alternative<sim::Settle>(step) || std::holds_alternative<Sleds>(step);
    }
    Trace("STEP " + FormatStep(step));
    std::visit(Overloaded{
                   [&](const Sleds& s) { Create(s); },
                   [&](const Partition& s) { Groups(s.groups); },
                   [&](const Heal&) {
                     SledSet all;
                     for (size_t i = 0; i < sleds.size(); ++i) all.push_back(static_cast<int>(i));
                     Groups({all});
                   },
                   [&](const sim::Crash& s) { Crash(S(s.sled)); },
                   [&](const sim::Boot& s) { Boot(S(s.sled)); },
                   [&](const WipeData& s) {
                     S(s.sled).data.Wipe(kData);
                     Disturb(s.sled);
                     Note(S(s.sled), "data folder wiped (the gossip bookmark is gone)");
                   },
                   [&](const Move& s) { MoveStep(s); },
                   [&](const sim::Link& s) {
                     std::vector<std::set<int>> links;
                     for (const auto& sp : sleds) links.push_back(sp->links);
                     if (s.up) {
                       links[s.a].insert(s.b);
                       links[s.b].insert(s.a);
                     } else {
                       links[s.a].erase(s.b);
                       links[s.b].erase(s.a);
                     }
                     SetLinks(links);
                   },
                   [&](const sim::SessionStart& s) { StartSessionStep(s); },
                   [&](const sim::SessionStop& s) {
                     auto it = session_labels.find(s.label);
                     if (it == session_labels.end()) {
                       failures.push_back("session stop: no session labelled " + s.label);
                       return;
                     }
                     Submit(S(s.via), rack::SessionStop{it->second}, "session stop " + s.label);
                   },
                   [&](const sim::JobStart& s) { StartJobStep(s); },
                   [&](const sim::JobStop& s) {
                     auto it = job_labels.find(s.label);
                     if (it == job_labels.end()) {
                       failures.push_back("job stop: no job labelled " + s.label);
                       return;
                     }
                     Submit(S(s.via), rack::JobStop{it->second}, "job stop " + s.label);
                   },
                   [&](const sim::Reset& s) { ResetStep(s); },
                   [&](const sim::Settle&) { Settle(); },
                   [&](const sim::Wait& s) { RunUntil(now + s.ms); },
                   [&](const sim::Drive& s) { DriveStep(s); },
                   [&](const LeftCap& s) {
                     (s.sessions ? options.left_sessions_max : options.left_universes_max) =
                         static_cast<size_t>(s.cap);
                   },
                   [&](const ExpectRan& s) { ExpectRanStep(s); },
                   [&](const ExpectStatus& s) { ExpectStatusStep(s); },
                   [&](const ExpectTrust& s) {
                     SimSled& x = S(s.sled);
                     const bool trusted_now = x.up() && x.life->core->trusted();
                     if (!x.up() || trusted_now != s.trusted) {
                       failures.push_back(FormatStep(step) + ": " + SledName(s.sled) + " is " +
                                          (!x.up()       ? "down"
                                           : trusted_now ? "trusted"
                                                         : "untrusted"));
                     }
                   },
               },
               step);
  }

  void Create(const Sleds& step) {
    if (!sleds.empty()) {
      failures.push_back("`sleds` comes once, first");
      return;
    }
    for (int i = 0; i < step.count; ++i) {
      auto s = std::make_unique<SimSled>();
      s->index = i;
      s->baseboard = Baseboard(i);
      s->drives.MakeDirs(kDrives[0]);
      s->drives.MakeDirs(kDrives[1]);
      s->data.MakeDirs(kData);
      sleds.push_back(std::move(s));
    }
    if (step.split.empty()) {
      SledSet all;
      for (int i = 0; i < step.count; ++i) all.push_back(i);
      Groups({all});
    } else {
      Groups(step.split);
    }
    for (auto& s : sleds) Boot(*s);
    Settle();
  }

  void MoveStep(const Move& step) {
    SimSled& s = S(step.sled);
    if (s.up()) {
      failures.push_back("move " + SledName(step.sled) + ": the sled is running (crash it first)");
      return;
    }
    std::vector<std::set<int>> links;
    for (const auto& sp : sleds) links.push_back(sp->links);
    for (int peer : links[step.sled]) links[peer].erase(step.sled);
    links[step.sled].clear();
    for (int peer : step.to) {
      links[step.sled].insert(peer);
      links[peer].insert(step.sled);
    }
    SetLinks(links);
    Note(s, "moved to " + FormatStep(step).substr(FormatStep(step).find(" to ") + 4));
  }

  void ResetStep(const sim::Reset& step) {
    SimSled& s = S(step.sled);
    Disturb(step.sled);
    if (!s.up()) {
      Note(s, "reset: the sled is down");
      return;
    }
    const std::optional<rack::Nonce> nonce = s.life->core->reset_nonce();
    if (!nonce) {
      Note(s, "reset refused: the record is trusted");
      return;
    }
    Submit(s, rack::SledReset{s.baseboard, *nonce}, "reset");
  }

  void DriveStep(const sim::Drive& step) {
    SimSled& s = S(step.sled);
    const std::filesystem::path& dir = kDrives[step.drive];
    Disturb(step.sled);
    switch (step.fault) {
      case DriveFault::kFail:
        s.drives.Fail(dir, true);
        break;
      case DriveFault::kNoSpace:
        s.drives.NoSpace(dir, true);
        break;
      case DriveFault::kHeal:
        s.drives.Fail(dir, false);
        s.drives.NoSpace(dir, false);
        s.drives.MakeDirs(dir);
        break;
      case DriveFault::kWipe:
        s.drives.Wipe(dir);
        s.wiped = true;
        break;
      case DriveFault::kMissing:
        s.drives.RemoveDir(dir);
        break;
      case DriveFault::kCorrupt: {
        const std::filesystem::path record = dir / "record";
        auto bytes = s.drives.Read(record, 1 << 20);
        if (bytes && *bytes && !(*bytes)->empty()) {
          (void)s.drives.FlipBit(record, rng.Below((*bytes)->size() * 8));
        } else {
          Note(s, "drive " + std::to_string(step.drive) + " corrupt: no record to corrupt");
        }
        break;
      }
      case DriveFault::kTear: {
        // The next locker write stops: drive 0 between write and rename, after
        // the rename, or between the drives; drive 1 between write and rename
        // or after the rename.
        const size_t drawn = step.point > 0 ? static_cast<size_t>(step.point)
                                            : 1 + rng.Below(step.drive == 0 ? 3 : 2);
        const size_t point = step.drive == 0 ? drawn : 3 + drawn;
        s.drives.CrashAfter(point);
        Note(s, "drive tear armed (" + std::to_string(point) + " operations into the next write)");
        break;
      }
    }
    Note(s, "drive " + std::to_string(step.drive) + " " + std::string(DriveFaultName(step.fault)));
  }

  void ExpectRanStep(const ExpectRan& step) {
    auto it = job_labels.find(step.job);
    const int expected = static_cast<int>(step.count);
    int runs = 0;
    if (it != job_labels.end()) {
      auto r = S(step.sled).runs.find(it->second);
      runs = r == S(step.sled).runs.end() ? 0 : r->second;
    }
    if (runs != expected) {
      failures.push_back(FormatStep(step) + ": it ran " + std::to_string(runs) + " time(s)");
    }
  }

  void ExpectStatusStep(const ExpectStatus& step) {
    auto it = job_labels.find(step.job);
    std::string state = "none";
    if (it != job_labels.end()) {
      const std::string& board = S(step.sled).baseboard;
      const rack::JobStatus* best = nullptr;
      auto consider = [&](SimSled& viewer) {
        if (!viewer.up()) return;
        const rack::JobStatus* st = viewer.life->core->StatusOf(it->second, board);
        if (st && (!best || rack::Stronger(*st, *best))) best = st;
      };
      if (S(step.sled).up()) {
        consider(S(step.sled));
      } else {
        for (auto& sp : sleds) consider(*sp);
      }
      if (best) {
        state = std::string(rack::JobStateName(best->state));
        std::transform(state.begin(), state.end(), state.begin(),
                       [](unsigned char c) { return std::tolower(c); });
      }
    }
    if (state != step.state) {
      failures.push_back(FormatStep(step) + ": it is " + state);
    }
  }

  std::string Report() const {
    std::string out;
    for (const auto& sp : sleds) {
      const SimSled& s = *sp;
      out += "== " + SledName(s.index) + " (" + s.baseboard + ", cubby " + std::to_string(s.index) +
             ", " + (s.up() ? "up" : "down") + ", " + std::to_string(s.lives) + " li" +
             (s.lives == 1 ? "fe" : "ves") + ") ==\n";
      std::string ran;
      for (const auto& [job, n] : s.runs) {
        ran += (ran.empty() ? "" : ", ") + JobName(job) + (n > 1 ? " x" + std::to_string(n) : "");
      }
      out += "  ran: " + (ran.empty() ? std::string("nothing") : ran) + "\n";
      for (const std::string& line : s.log) out += "  " + line + "\n";
    }
    return out;
  }
};

World::World(WorldOptions options) : impl_(std::make_unique<Impl>(std::move(options))) {}
World::~World() = default;

void World::Apply(const Step& step) { impl_->Apply(step); }

void World::Finish() {
  // Liveness is judged on a settled rack only.
  if (!impl_->settled_now) return;
  impl_->CheckSettled();
  impl_->CheckSubmitted();
}

const std::vector<Breach>& World::breaches() const { return impl_->breaches; }
const std::vector<std::string>& World::failures() const { return impl_->failures; }
const WorldStats& World::stats() const { return impl_->stats; }
std::string World::Report() const { return impl_->Report(); }
int64_t World::now_ms() const { return impl_->now; }

rack::Digest256 World::TraceHash() const {
  crypto_generichash_state copy = impl_->trace;
  rack::Digest256 out;
  crypto_generichash_final(&copy, out.data(), out.size());
  return out;
}

std::unique_ptr<World> RunScenario(const Scenario& scenario, WorldOptions options) {
  auto world = std::make_unique<World>(std::move(options));
  for (const Step& step : scenario.steps) world->Apply(step);
  world->Finish();
  return world;
}

}  // namespace once::sim
