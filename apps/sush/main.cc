// sush: the sush client (docs/sush.md).
//
//   sush rack up 4 --dir /tmp/rack          # a local rack of 4 sush-server processes
//   sush --rack /tmp/rack session start     # refused while a session is active: --replace
//   sush --rack /tmp/rack job start -w 'echo hello from $SUSH_JOB_ID'
//   sush --rack /tmp/rack job status WORD-WORD-... -w     # what job start -w prints
//   sush --rack /tmp/rack job history       # success or failure per sled
//   sush --rack /tmp/rack job purge --finished            # output folders, signed
//   sush --rack /tmp/rack session skip WORD-WORD-...      # burn a cancelled job's position
//   sush --rack /tmp/rack boundary [-T 2]   # each sled's boundary record and drives
//   sush --rack /tmp/rack sled reset -T 2   # an untrusted sled's record, reset (signed)
//   sush rack restart -T 2 --dir /tmp/rack [--kill]
//   sush --rack /tmp/rack                   # the REPL (prompt "sush# "); `sush help` as `help`
//   sush rack down --dir /tmp/rack
//
// Every command takes --json (or --output json). The rack is found with
// --rack DIR (its rack.json; $SUSH_RACK) or --server http://127.0.0.1:PORT
// ($SUSH_SERVER_URL); the key with --key FILE (default DIR/keys/operator.key).
// Exit status: 0 done, 1 refused or failed (a typed error, printed), 2 a
// usage error (docs/sush.md, "Exit status").

#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <iostream>
#include <limits>
#include <map>
#include <optional>
#include <set>
#include <thread>

#include "once/rack/target.h"
#include "once/sim/cli.h"
#include "rack.h"

namespace {

using namespace once;
using nlohmann::json;
using namespace std::chrono_literals;

constexpr char kClientVersion[] = "once-sush 0.1.0";
constexpr auto kWaitPoll = std::chrono::milliseconds(200);
// A targeted sled that does not answer for this long while -w waits is
// taken as down: -w stops waiting for it and says so.
constexpr auto kDownGrace = std::chrono::milliseconds(3000);
// How long a probe of a sled (which one answers) may take.
constexpr auto kProbeTimeout = std::chrono::milliseconds(1000);

constexpr int kExitOk = 0;
constexpr int kExitFailed = 1;
constexpr int kExitUsage = 2;
// The longest a -w waits (--timeout-s): a week, in seconds.
constexpr int kWaitSecondsMax = 7 * 24 * 3600;

struct Globals {
  std::string rack_dir;
  std::string server;
  std::string key;
  bool json_output = false;
  std::string output_format;  // --output text|json
  std::string session;        // --session / $SUSH_SESSION / the REPL's attach
};

// The REPL's state across lines.
struct ReplState {
  std::optional<std::string> attached;  // `session attach` / `session start`
};

// What a command needs: a sled to talk to, the rack's sleds, the key.
struct Context {
  Globals globals;
  std::optional<sush::RackFile> rack;
  std::optional<Error> rack_error;  // --rack named something that is not a rack
  ReplState* repl = nullptr;

  bool json() const { return globals.json_output; }

  // The first sled that answers: with --server that one; with --rack each of
  // rack.json in turn, over TCP, or over its operator socket when TCP does
  // not answer (the local operator's own slot).
  Result<sush_net::SushClient> Sled() const {
    ONCE_ASSIGN_OR_RETURN(std::vector<sush_net::SushClient> all, Sleds(1));
    return all.front();
  }
  // Up to `count` sleds that answer, in rack.json order (one with --server).
  Result<std::vector<sush_net::SushClient>> Sleds(size_t count) const {
    if (!globals.server.empty()) {
      ONCE_ASSIGN_OR_RETURN(sush_net::Address address, sush_net::ParseAddress(globals.server));
      return std::vector<sush_net::SushClient>{sush_net::SushClient(address)};
    }
    if (rack_error) return std::unexpected(*rack_error);
    if (!rack) {
      return MakeError(ErrorCode::kInvalidArgument, "say which rack: --rack DIR or --server URL");
    }
    std::vector<sush_net::SushClient> out;
    for (const sush::RackSled& sled : rack->sleds) {
      if (auto client = Reach(sled)) out.push_back(*client);
      if (out.size() == count) break;
    }
    if (out.empty()) {
      return MakeError(ErrorCode::kUnavailable, "no sled of " + rack->dir.string() + " answers");
    }
    return out;
  }
  // A rack sled over TCP, or its operator socket.
  static std::optional<sush_net::SushClient> Reach(const sush::RackSled& sled) {
    sush_net::SushClient tcp(sled.http, {kProbeTimeout});
    if (tcp.Info()) return sush_net::SushClient(sled.http);
    if (auto socket = SocketOf(sled)) {
      sush_net::SushClient local(*socket, {kProbeTimeout});
      if (local.Info()) return sush_net::SushClient(*socket);
    }
    return std::nullopt;
  }
  static std::optional<sush_net::Address> SocketOf(const sush::RackSled& sled) {
    const auto path = sled.data_dir / "api.sock";
    std::error_code ec;
    if (sled.data_dir.empty() || !std::filesystem::exists(path, ec)) return std::nullopt;
    auto address = sush_net::ParseAddress("unix:" + path.string());
    return address ? std::optional<sush_net::Address>(*address) : std::nullopt;
  }
  // A client for the sled `baseboard` (rack.json), or `fallback` (--server).
  std::optional<sush_net::SushClient> ClientOf(const std::string& baseboard,
                                               const sush_net::SushClient& fallback) const {
    if (rack) {
      for (const sush::RackSled& sled : rack->sleds) {
        if (sled.baseboard == baseboard) {
          sush_net::SushClient tcp(sled.http);
          if (tcp.Info()) return tcp;
          if (auto socket = SocketOf(sled)) return sush_net::SushClient(*socket);
          return tcp;
        }
      }
    }
    if (!globals.server.empty()) return fallback;
    return std::nullopt;
  }
  // The HTTP address of a sled by baseboard (rack.json).
  std::optional<sush_net::Address> AddressOf(const std::string& baseboard) const {
    if (rack) {
      for (const sush::RackSled& sled : rack->sleds) {
        if (sled.baseboard == baseboard) return sled.http;
      }
    }
    return std::nullopt;
  }
  Result<rack::KeyPair> Key() const {
    std::string path = globals.key;
    if (path.empty() && rack) path = rack->key.string();
    if (path.empty() && rack_error) return std::unexpected(*rack_error);
    if (path.empty()) return MakeError(ErrorCode::kInvalidArgument, "say which key: --key FILE");
    return sush_net::LoadKeyPair(path);
  }
};

int Fail(const Context& ctx, const Error& error) {
  if (ctx.json()) {
    std::cout << sush_net::JsonText(sush_net::ErrorToJson(error)) << std::endl;
  } else {
    std::cerr << "sush: " << error.ToString() << std::endl;
  }
  return kExitFailed;
}

void Print(const Context& ctx, const json& body, const std::string& text) {
  if (ctx.json()) {
    std::cout << sush_net::JsonText(body) << std::endl;
  } else {
    std::cout << text << std::flush;
  }
}

Error Refusal(ErrorCode code, std::string message) {
  return Error{code, std::move(message), "", {}};
}

#define SUSH_TRY(lhs, expr)                                \
  auto ONCE_CONCAT(try_, __LINE__) = (expr);               \
  if (!ONCE_CONCAT(try_, __LINE__)) {                      \
    return Fail(ctx, ONCE_CONCAT(try_, __LINE__).error()); \
  }                                                        \
  lhs = std::move(ONCE_CONCAT(try_, __LINE__)).value()

// ---- Status lines ----

std::string StatusText(const json& status) {
  std::string text = status.value("state", std::string("?"));
  if (status.contains("skip_reason")) {
    text += " (" + status.value("skip_reason", std::string()) + ")";
  }
  if (status.contains("exit")) {
    const json& exit = status["exit"];
    const std::string kind = exit.value("kind", std::string());
    if (kind == "exited") text += " exit " + std::to_string(exit.value("code", 0));
    if (kind == "signaled") {
      text += " signal " + std::to_string(exit.value("code", 0)) + " (" +
              exit.value("signal", std::string("?")) + ")";
    }
    if (kind == "failed") text += " failed: " + exit.value("error", std::string());
    text += "  out " + std::to_string(status.value("stdout_bytes", uint64_t{0})) + " B, err " +
            std::to_string(status.value("stderr_bytes", uint64_t{0})) + " B";
  }
  if (status.contains("error") && !status.contains("exit")) {
    text += " " + status.value("error_code", std::string()) + ": " +
            status.value("error", std::string());
  }
  return text;
}

struct SledRow {
  std::string baseboard;
  std::optional<int> cubby;
  std::string Name() const {
    return baseboard + (cubby ? " (cubby " + std::to_string(*cubby) + ")" : std::string());
  }
};

// The sleds a sled knows (version announcements), by cubby.
std::vector<SledRow> KnownSleds(const json& info) {
  std::vector<SledRow> rows;
  if (!info.contains("sleds") || !info["sleds"].is_array()) return rows;
  for (const json& s : info["sleds"]) {
    SledRow row{s.value("baseboard", std::string()), std::nullopt};
    if (s.contains("cubby") && s["cubby"].is_number()) row.cubby = s["cubby"].get<int>();
    rows.push_back(row);
  }
  std::sort(rows.begin(), rows.end(),
            [](const SledRow& a, const SledRow& b) { return a.cubby < b.cubby; });
  return rows;
}

bool Matches(const rack::Target& target, const SledRow& row) {
  rack::SledIdentity identity{row.baseboard, std::nullopt};
  if (row.cubby) identity.cubby = static_cast<uint8_t>(*row.cubby);
  return target.Matches(identity);
}

// The known sleds a target names.
std::vector<SledRow> TargetedSleds(const json& info, const std::string& target_text) {
  std::vector<SledRow> rows;
  auto target = rack::Target::Parse(target_text);
  if (!target) return rows;
  for (const SledRow& row : KnownSleds(info)) {
    if (Matches(*target, row)) rows.push_back(row);
  }
  return rows;
}

std::string SledList(const std::vector<SledRow>& rows) {
  std::string text;
  for (const SledRow& row : rows) {
    text += (text.empty() ? "" : ", ") +
            (row.cubby ? std::to_string(*row.cubby) + " " : std::string()) +
            row.baseboard.substr(row.baseboard.rfind(':') + 1);
  }
  return text.empty() ? "none" : text;
}

// A -T that names no sled the rack knows: refused before anything is signed.
Status CheckTargetNamesASled(const json& info, const std::string& target_text) {
  ONCE_RETURN_IF_ERROR(rack::Target::Parse(target_text));
  if (!TargetedSleds(info, target_text).empty()) return Ok();
  return MakeError(ErrorCode::kInvalidArgument,
                   "-T " + target_text +
                       " names no sled of this rack (it has: " + SledList(KnownSleds(info)) + ")");
}

std::string Line(const SledRow& row, const json& job, const std::string& note = "") {
  char head[96];
  std::snprintf(head, sizeof(head), "cubby %2s  %-24s ",
                row.cubby ? std::to_string(*row.cubby).c_str() : "?", row.baseboard.c_str());
  const json& statuses = job["statuses"];
  return head +
         (statuses.contains(row.baseboard) ? StatusText(statuses[row.baseboard])
                                           : std::string("(no status yet)")) +
         note;
}

bool Terminal(const json& job, const std::string& baseboard) {
  return job["statuses"].contains(baseboard) && job["statuses"][baseboard].value("terminal", false);
}

// Where a wait for a job ended.
struct Waited {
  json job;
  std::vector<SledRow> rows;                      // the sleds it targets
  std::map<std::string, std::string> unfinished;  // baseboard -> why -w stopped waiting
};

// Polls the job until every targeted sled is terminal, or the time is up,
// or every sled still running has not answered for kDownGrace (it is down),
// drawing one live line a sled.
Result<Waited> WaitForJob(const Context& ctx, sush_net::SushClient sled, const rack::JobId& id,
                          std::chrono::seconds timeout) {
  const bool tty = ::isatty(1) != 0 && !ctx.json();
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  std::map<std::string, std::string> printed;
  std::map<std::string, std::chrono::steady_clock::time_point> silent_since;
  size_t drawn = 0;
  while (true) {
    auto info = sled.Info();
    auto job = info ? sled.Job(id) : Result<json>(std::unexpected(info.error()));
    if (!job) {  // the sled asked went away: ask another
      auto other = ctx.Sled();
      if (!other) return std::unexpected(job.error());
      sled = *other;
      continue;
    }
    Waited waited{*job, TargetedSleds(*info, job->value("target", std::string("*"))), {}};
    if (waited.rows.empty()) return waited;
    // Sleds not finished: does each still answer?
    const auto now = std::chrono::steady_clock::now();
    bool waiting_for_live = false;
    for (const SledRow& row : waited.rows) {
      if (Terminal(waited.job, row.baseboard)) continue;
      const auto address = ctx.AddressOf(row.baseboard);
      const bool answers =
          !address || sush_net::SushClient(*address, {std::chrono::milliseconds(500)}).Info();
      if (answers) {
        silent_since.erase(row.baseboard);
        waiting_for_live = true;
      } else {
        auto since = silent_since.emplace(row.baseboard, now).first->second;
        if (now - since < kDownGrace) waiting_for_live = true;
        waited.unfinished[row.baseboard] = "the sled does not answer (down?)";
      }
    }
    if (!ctx.json()) {
      auto note = [&](const SledRow& row) {
        return waited.unfinished.contains(row.baseboard) ? "  [not answering]" : "";
      };
      if (tty) {
        if (drawn > 0) std::cout << "\033[" << drawn << "A";
        for (const SledRow& row : waited.rows) {
          std::cout << "\r\033[K" << Line(row, waited.job, note(row)) << "\n";
        }
        drawn = waited.rows.size();
      } else {
        for (const SledRow& row : waited.rows) {
          const std::string line = Line(row, waited.job, note(row));
          if (printed[row.baseboard] != line) std::cout << line << "\n";
          printed[row.baseboard] = line;
        }
      }
      std::cout << std::flush;
    }
    if (!waiting_for_live) return waited;
    if (now > deadline) {
      for (const SledRow& row : waited.rows) {
        if (!Terminal(waited.job, row.baseboard) && !waited.unfinished.contains(row.baseboard)) {
          waited.unfinished[row.baseboard] =
              "not finished after " + std::to_string(timeout.count()) + " s (--timeout-s)";
        }
      }
      return waited;
    }
    std::this_thread::sleep_for(kWaitPoll);
  }
}

// What signs a sled's output reads: the operator key, bound to that sled.
sush_net::OutputCredentials Credentials(const std::optional<rack::KeyPair>& keys,
                                        const std::string& baseboard) {
  return sush_net::OutputCredentials{keys ? &*keys : nullptr, baseboard};
}

// One sled's stdout or stderr of a job, from that sled's own server: the
// bytes, or why not.
Result<std::string> OutputOf(const Context& ctx, const sush_net::SushClient& sled,
                             const std::optional<rack::KeyPair>& keys, const rack::JobId& id,
                             const std::string& baseboard, const std::string& stream) {
  std::optional<sush_net::SushClient> client = ctx.ClientOf(baseboard, sled);
  if (!client) {
    return MakeError(ErrorCode::kUnavailable,
                     "the output of " + baseboard + " is on its own server (use --rack)");
  }
  return client->Output(id, stream, Credentials(keys, baseboard));
}

// The sleds of `rows` whose status says the job ran there (it has an exit).
bool Ran(const json& job, const std::string& baseboard) {
  return job["statuses"].contains(baseboard) && job["statuses"][baseboard].contains("exit");
}

// A block a sled: "== baseboard: status ==", stdout, and stderr if any (or
// why there is none).
std::string OutputBlocks(const json& job, const std::vector<SledRow>& rows, const json& stdouts,
                         const json& stderrs, const std::map<std::string, std::string>& notes) {
  std::string text;
  for (const SledRow& row : rows) {
    const std::string& bb = row.baseboard;
    const bool has_status = job["statuses"].contains(bb);
    text += "== " + bb + ": " +
            (has_status ? StatusText(job["statuses"][bb]) : std::string("(no status yet)")) +
            " ==\n";
    if (auto note = notes.find(bb); note != notes.end()) {
      text += "(" + note->second + ")\n";
      continue;
    }
    for (const auto& [stream, all] : {std::pair{"stdout", &stdouts}, {"stderr", &stderrs}}) {
      if (!all->contains(bb)) continue;
      const json& bytes = (*all)[bb];
      if (!bytes.is_string()) {
        text += std::string("(") + stream + " not reachable from here)\n";
        continue;
      }
      const std::string& out = bytes.get_ref<const std::string&>();
      if (out.empty()) continue;
      if (std::string_view(stream) == "stderr") text += "-- stderr --\n";
      text += out;
      if (out.back() != '\n') text += "\n";
    }
  }
  return text;
}

// After -w (job start and job status alike): every finished sled's stdout
// and stderr, a line for each sled -w stopped waiting for; exit 1 if any.
int ShowWaited(const Context& ctx, const sush_net::SushClient& sled, const Waited& waited) {
  const rack::JobId id = *rack::JobId::Parse(waited.job.value("job_id", std::string()));
  std::optional<rack::KeyPair> keys;
  if (auto loaded = ctx.Key()) keys = *loaded;
  json stdouts = json::object(), stderrs = json::object();
  for (const SledRow& row : waited.rows) {
    if (!Ran(waited.job, row.baseboard)) continue;
    for (const auto& [stream, all] : {std::pair{"stdout", &stdouts}, {"stderr", &stderrs}}) {
      auto bytes = OutputOf(ctx, sled, keys, id, row.baseboard, stream);
      (*all)[row.baseboard] = bytes ? json(*bytes) : json(nullptr);
    }
  }
  json body{{"job", waited.job}, {"stdout", stdouts}, {"stderr", stderrs}};
  std::string text;
  if (waited.rows.empty()) {
    text = "no known sled is targeted by '" + waited.job.value("target", std::string("*")) + "'\n";
  }
  text += OutputBlocks(waited.job, waited.rows, stdouts, stderrs, waited.unfinished);
  if (!waited.unfinished.empty()) {
    json unfinished = json::object();
    for (const auto& [bb, why] : waited.unfinished) unfinished[bb] = why;
    body["unfinished"] = unfinished;
    body["error"] = sush_net::ErrorToJson(
        Refusal(ErrorCode::kTimeout, "job " + id.ToString() + " did not finish on " +
                                         std::to_string(unfinished.size()) + " sled(s)"))["error"];
  }
  Print(ctx, body, text);
  if (!ctx.json() && !waited.unfinished.empty()) {
    std::cerr << "sush: job " << id.ToString() << " did not finish on " << waited.unfinished.size()
              << " sled(s); the others' output is above\n";
  }
  return waited.unfinished.empty() ? kExitOk : kExitFailed;
}

// ---- Keys ----

int KeysNew(const Context& ctx, const std::string& name, const std::string& out) {
  std::filesystem::path path = out;
  if (path.empty()) {
    path =
        ctx.rack ? ctx.rack->dir / "keys" / (name + ".key") : std::filesystem::path(name + ".key");
  }
  const rack::KeyPair keys = rack::KeyPair::GenerateFromOs();
  if (auto saved = sush_net::SaveKeyPair(path, name, keys); !saved) {
    return Fail(ctx, saved.error());
  }
  auto pub = path;
  pub.replace_extension(".pub");
  (void)sush_net::SavePublicKey(pub, name, keys.public_key);
  Print(ctx,
        json{{"name", name},
             {"key_id", keys.id().ToString()},
             {"file", path.string()},
             {"public_file", pub.string()}},
        "key " + name + " " + keys.id().ToString() + "\n  " + path.string() + " (0600)\n  " +
            pub.string() + " (give this one to the sleds: --trusted-key)\n");
  return 0;
}

// The sled errors a /v1/session answer carries, one line each.
std::string SledErrorsText(const json& session) {
  std::string text;
  if (!session.contains("errors") || !session["errors"].is_array()) return text;
  for (const json& e : session["errors"]) {
    const std::string kind = e.value("kind", std::string("?"));
    text += "  " + kind + " reported by " + e.value("baseboard", std::string("?")) + ": " +
            e.value("message", std::string());
    if (kind == "ConcurrentSessions") {
      text +=
          " (" + e.value("first", std::string()) + " met " + e.value("second", std::string()) + ")";
    }
    text += "\n";
  }
  return text;
}

// ---- Sessions ----

Result<std::optional<rack::SessionId>> ActiveSession(const sush_net::SushClient& sled) {
  ONCE_ASSIGN_OR_RETURN(json session, sled.Session());
  return sush_net::IdField<rack::SessionId>(session, "active");
}

Result<std::optional<rack::SessionId>> ParseOptionalSession(const std::string& text) {
  if (text.empty()) return std::optional<rack::SessionId>{};
  ONCE_ASSIGN_OR_RETURN(rack::SessionId id, rack::SessionId::Parse(text));
  return std::optional<rack::SessionId>{id};
}

// The session this shell is attached to (the REPL's `session attach`, or
// --session / $SUSH_SESSION), if any.
std::optional<std::string> Attached(const Context& ctx) {
  if (ctx.repl != nullptr && ctx.repl->attached) return ctx.repl->attached;
  if (!ctx.globals.session.empty()) return ctx.globals.session;
  return std::nullopt;
}

// Jobs go into the session this shell attached to, or are refused.
Status CheckAttached(const Context& ctx, const std::optional<rack::SessionId>& active) {
  const std::optional<std::string> attached = Attached(ctx);
  if (!attached) return Ok();
  ONCE_ASSIGN_OR_RETURN(rack::SessionId want, rack::SessionId::Parse(*attached));
  if (active == want) return Ok();
  return MakeError(ErrorCode::kNotFound, "the session this shell is attached to (" +
                                             want.ToString() + ") is not active; the rack's is " +
                                             (active ? active->ToString() : std::string("none")) +
                                             " (sush session attach)");
}

bool Retryable(const Error& error) {
  return IsRetryable(error.code) || error.code == ErrorCode::kLimitExceeded;
}

// `session start [ID] [--replace]`: a new session, accepted by the first sled
// that takes it (the next one is tried when one refuses for a reason
// another may not have: replaying, busy, a limit). A session that is active
// is only ended when named (ID) or with --replace.
int SessionStart(const Context& ctx, const std::string& replace_text, bool replace) {
  SUSH_TRY(std::optional<rack::SessionId> named, ParseOptionalSession(replace_text));
  SUSH_TRY(rack::KeyPair keys, ctx.Key());
  SUSH_TRY(std::vector<sush_net::SushClient> sleds, ctx.Sleds(SIZE_MAX));
  SUSH_TRY(std::optional<rack::SessionId> active, ActiveSession(sleds.front()));
  if (named && named != active) {
    return Fail(ctx, Refusal(ErrorCode::kNotFound,
                             "session " + named->ToString() + " is not active (the active one: " +
                                 (active ? active->ToString() : std::string("none")) +
                                 "): nothing of that name to replace"));
  }
  if (active && !named && !replace) {
    return Fail(ctx, Refusal(ErrorCode::kInvalidArgument,
                             "session " + active->ToString() +
                                 " is active; starting another ends it: `sush session start "
                                 "--replace` (or `sush session start " +
                                 active->ToString() + "`)"));
  }
  std::string tried;
  for (const sush_net::SushClient& sled : sleds) {
    auto started = sled.StartSession(keys);
    if (!started) {
      if (!Retryable(started.error())) return Fail(ctx, started.error());
      tried += "\n  " + sled.address().ToString() + ": " + started.error().ToString();
      continue;
    }
    if (ctx.repl != nullptr) ctx.repl->attached = started->ToString();
    json body{{"session_id", started->ToString()}, {"sled", sled.address().ToString()}};
    if (active) body["replaced"] = active->ToString();
    Print(ctx, body,
          "session " + started->ToString() + " started" +
              (active ? " (it replaces " + active->ToString() + ")" : std::string()) + "\n");
    return kExitOk;
  }
  return Fail(ctx, Refusal(ErrorCode::kUnavailable, "no sled took the session start:" + tried));
}

// `session stop [ID]`: stops the active session (if ID names it).
int SessionStop(const Context& ctx, const std::string& id_text) {
  SUSH_TRY(std::optional<rack::SessionId> named, ParseOptionalSession(id_text));
  SUSH_TRY(sush_net::SushClient sled, ctx.Sled());
  SUSH_TRY(rack::KeyPair keys, ctx.Key());
  SUSH_TRY(rack::SessionId id, sled.StopSession(keys, named));
  if (ctx.repl != nullptr && ctx.repl->attached == id.ToString()) ctx.repl->attached.reset();
  Print(ctx, json{{"session_id", id.ToString()}, {"stopped", true}},
        "session " + id.ToString() + " stop requested\n");
  return kExitOk;
}

// `session attach [ID]`: binds this shell's job starts to the active session.
int SessionAttach(const Context& ctx, const std::string& id_text) {
  SUSH_TRY(std::optional<rack::SessionId> named, ParseOptionalSession(id_text));
  SUSH_TRY(sush_net::SushClient sled, ctx.Sled());
  SUSH_TRY(std::optional<rack::SessionId> active, ActiveSession(sled));
  if (!active) return Fail(ctx, Refusal(ErrorCode::kNotFound, "no active session to attach to"));
  if (named && named != active) {
    return Fail(ctx, Refusal(ErrorCode::kNotFound,
                             "session " + named->ToString() +
                                 " is not active (the active one: " + active->ToString() + ")"));
  }
  std::string text = "attached to session " + active->ToString() + "\n";
  if (ctx.repl != nullptr) {
    ctx.repl->attached = active->ToString();
    text += "  job start in this shell is refused once it is no longer the active session\n";
  } else {
    text += "  export SUSH_SESSION=" + active->ToString() +
            "   (later commands refuse to start jobs in another session)\n";
  }
  Print(ctx, json{{"session_id", active->ToString()}, {"attached", true}}, text);
  return kExitOk;
}

int SessionShow(const Context& ctx) {
  SUSH_TRY(sush_net::SushClient sled, ctx.Sled());
  SUSH_TRY(json session, sled.Session());
  SUSH_TRY(json info, sled.Info());
  session["sled"] = info["baseboard"];
  session["network"] = info["network"];
  const std::optional<std::string> attached = Attached(ctx);
  if (attached) session["attached"] = *attached;
  const std::string active =
      session["active"].is_null() ? "none" : session["active"].get<std::string>();
  Print(ctx, session,
        "session " + active + "\n" +
            (session.contains("message") ? "  " + session["message"].get<std::string>() + "\n"
                                         : std::string()) +
            (session["next_job_id"].is_null()
                 ? std::string()
                 : "  next job " + session["next_job_id"].get<std::string>() + "\n") +
            (attached ? "  attached " + *attached + "\n" : std::string()) + "  seen by " +
            info["baseboard"].get<std::string>() + "\n" + SledErrorsText(session));
  return kExitOk;
}

int SessionSkip(const Context& ctx, const std::string& job_id) {
  SUSH_TRY(sush_net::SushClient sled, ctx.Sled());
  SUSH_TRY(rack::KeyPair keys, ctx.Key());
  SUSH_TRY(rack::JobId id, rack::JobId::Parse(job_id));
  SUSH_TRY(json answer, sled.SkipJob(keys, id));
  const std::string next = answer.value("next_job_id", json(nullptr)).is_string()
                               ? answer["next_job_id"].get<std::string>()
                               : "";
  Print(ctx, answer,
        "chain position " + id.ToString() + " burned\n" +
            (next.empty() ? std::string() : "  next job " + next + "\n"));
  return kExitOk;
}

// ---- Jobs ----

int JobStart(const Context& ctx, const std::string& command, const std::string& target,
             bool concurrent, bool wait, int timeout_s) {
  SUSH_TRY(sush_net::SushClient sled, ctx.Sled());
  SUSH_TRY(json info, sled.Info());
  if (auto named = CheckTargetNamesASled(info, target); !named) return Fail(ctx, named.error());
  SUSH_TRY(std::optional<rack::SessionId> active, ActiveSession(sled));
  if (auto attached = CheckAttached(ctx, active); !attached) return Fail(ctx, attached.error());
  SUSH_TRY(rack::KeyPair keys, ctx.Key());
  SUSH_TRY(rack::JobId id, sled.StartJob(keys, command, target, concurrent));
  if (!wait) {
    Print(ctx, json{{"job_id", id.ToString()}}, "job " + id.ToString() + "\n");
    return kExitOk;
  }
  if (!ctx.json()) std::cout << "job " << id.ToString() << "\n";
  SUSH_TRY(Waited waited, WaitForJob(ctx, sled, id, std::chrono::seconds(timeout_s)));
  return ShowWaited(ctx, sled, waited);
}

std::string FullText(const json& job) {
  std::string text = "job " + job["job_id"].get<std::string>() + "\n";
  text += "  session " + job["session_id"].get<std::string>() + "\n  command " +
          job["command"].get<std::string>() + "\n  target " + job["target"].get<std::string>() +
          (job.value("concurrent", false) ? " (concurrent)" : "") + "\n  signed by " +
          job.value("key_id", std::string("?")) +
          (job.value("verified", false) ? "" : " (not verified: refused)") + "\n";
  return text;
}

int JobStatus(const Context& ctx, const std::string& id_text, bool wait, bool full, int timeout_s) {
  SUSH_TRY(sush_net::SushClient sled, ctx.Sled());
  SUSH_TRY(rack::JobId id, rack::JobId::Parse(id_text));
  if (wait) {  // what job start -w prints
    if (!ctx.json()) std::cout << (full ? FullText(*sled.Job(id)) : "job " + id.ToString() + "\n");
    SUSH_TRY(Waited waited, WaitForJob(ctx, sled, id, std::chrono::seconds(timeout_s)));
    return ShowWaited(ctx, sled, waited);
  }
  SUSH_TRY(json job, sled.Job(id));
  std::string text = full ? FullText(job) : "job " + job["job_id"].get<std::string>() + "\n";
  for (const auto& [baseboard, status] : job["statuses"].items()) {
    text += "  " + baseboard + "  " + StatusText(status) + "\n";
    if (full && status.contains("detail")) {
      text += "      " + status["detail"].get<std::string>() + "\n";
    }
    if (full && status.contains("stdout_hash")) {
      text += "      stdout blake2b " + status["stdout_hash"].get<std::string>() + "\n";
    }
  }
  Print(ctx, job, text);
  return kExitOk;
}

int JobStop(const Context& ctx, const std::string& id_text) {
  SUSH_TRY(sush_net::SushClient sled, ctx.Sled());
  SUSH_TRY(rack::KeyPair keys, ctx.Key());
  SUSH_TRY(rack::JobId id, rack::JobId::Parse(id_text));
  if (auto stopped = sled.StopJob(keys, id); !stopped) return Fail(ctx, stopped.error());
  Print(ctx, json{{"job_id", id.ToString()}, {"stop_requested", true}},
        "job " + id.ToString() + " stop requested\n");
  return kExitOk;
}

// Why a sled -T names has no output of the job: not targeted, not finished,
// never ran (nullopt: it ran, its output can be read).
std::optional<std::string> NoOutputBecause(const json& job, const std::vector<SledRow>& targeted,
                                           const SledRow& row) {
  const std::string id = job.value("job_id", std::string());
  const bool is_targeted = std::any_of(targeted.begin(), targeted.end(), [&](const SledRow& t) {
    return t.baseboard == row.baseboard;
  });
  if (!is_targeted) {
    return "job " + id + " did not target " + row.Name() + " (-T " +
           job.value("target", std::string()) + " names: " + SledList(targeted) + ")";
  }
  if (!job["statuses"].contains(row.baseboard)) {
    return "job " + id + " has no status on " + row.Name() + " yet";
  }
  const json& status = job["statuses"][row.baseboard];
  if (!status.value("terminal", false)) {
    return "job " + id + " is still " + StatusText(status) + " on " + row.Name();
  }
  if (!status.contains("exit")) {
    return "job " + id + " never ran on " + row.Name() + ": " + StatusText(status);
  }
  return std::nullopt;
}

int JobOutput(const Context& ctx, const std::string& id_text, const std::string& target,
              const std::string& stream) {
  if (stream != "stdout" && stream != "stderr") {
    return Fail(ctx, Refusal(ErrorCode::kInvalidArgument, "stdout or stderr, not " + stream));
  }
  SUSH_TRY(sush_net::SushClient sled, ctx.Sled());
  SUSH_TRY(rack::JobId id, rack::JobId::Parse(id_text));
  SUSH_TRY(json job, sled.Job(id));
  SUSH_TRY(json info, sled.Info());
  const std::vector<SledRow> targeted = TargetedSleds(info, job.value("target", std::string()));
  std::vector<SledRow> asked = targeted;
  if (!target.empty()) {
    if (auto named = CheckTargetNamesASled(info, target); !named) return Fail(ctx, named.error());
    asked = TargetedSleds(info, target);
  }
  std::optional<rack::KeyPair> keys;
  if (auto loaded = ctx.Key()) keys = *loaded;
  json outputs = json::object();
  std::map<std::string, std::string> notes;
  std::vector<std::string> reasons;
  for (const SledRow& row : asked) {
    if (auto why = NoOutputBecause(job, targeted, row)) {
      notes[row.baseboard] = *why;
      reasons.push_back(*why);
      continue;
    }
    auto bytes = OutputOf(ctx, sled, keys, id, row.baseboard, stream);
    if (!bytes) {
      notes[row.baseboard] = bytes.error().ToString();
      reasons.push_back(row.Name() + ": " + bytes.error().ToString());
      continue;
    }
    outputs[row.baseboard] = *bytes;
  }
  if (outputs.empty()) {
    std::string all;
    for (const std::string& why : reasons) all += (all.empty() ? "" : "; ") + why;
    return Fail(
        ctx, Refusal(ErrorCode::kNotFound, "no " + stream + " of " + id.ToString() + ": " +
                                               (all.empty() ? "it targets no known sled" : all)));
  }
  if (!ctx.json() && asked.size() == 1) {
    std::cout << outputs.begin()->get<std::string>() << std::flush;  // raw, for pipes
    return kExitOk;
  }
  json body{{"job_id", id.ToString()}, {stream, outputs}};
  if (!notes.empty()) {
    json missing = json::object();
    for (const auto& [bb, why] : notes) missing[bb] = why;
    body["missing"] = missing;
  }
  const json none = json::object();
  Print(ctx, body,
        OutputBlocks(job, asked, stream == "stdout" ? outputs : none,
                     stream == "stderr" ? outputs : none, notes));
  return kExitOk;
}

// How a job ended on one sled, for the history: ok (exit 0), failed (another
// exit, a signal, an error after it ran), or what else.
std::string Outcome(const json& status) {
  const std::string state = status.value("state", std::string("?"));
  if (state == "Stopped") {
    const json& exit = status["exit"];
    if (exit.value("kind", std::string()) == "exited" && exit.value("code", -1) == 0) return "ok";
    return "failed";
  }
  if (state == "Error") return status.value("refused", false) ? "refused" : "failed";
  if (state == "Skipped") return "skipped";
  if (state == "Cancelled") return "cancelled";
  if (state == "Interrupted") return "interrupted";
  return "running";  // Queued, Started
}

std::string HistoryLine(const json& job) {
  std::map<std::string, std::vector<std::string>> by_outcome;  // outcome -> "SERIAL detail"
  for (const auto& [bb, status] : job["statuses"].items()) {
    const std::string outcome = Outcome(status);
    std::string who = bb.substr(bb.rfind(':') + 1);
    if (outcome == "failed" || outcome == "refused") who += " " + StatusText(status);
    if (outcome == "skipped" && status.contains("skip_reason")) {
      who += " (" + status["skip_reason"].get<std::string>() + ")";
    }
    by_outcome[outcome].push_back(who);
  }
  std::string counts;
  for (const char* outcome :
       {"ok", "failed", "refused", "running", "skipped", "cancelled", "interrupted"}) {
    auto it = by_outcome.find(outcome);
    if (it == by_outcome.end()) continue;
    counts += (counts.empty() ? "" : ", ") + std::to_string(it->second.size()) + " " + outcome;
    if (std::string_view(outcome) != "ok" && std::string_view(outcome) != "running") {
      std::string who;
      for (const std::string& w : it->second) who += (who.empty() ? "" : "; ") + w;
      counts += " [" + who + "]";
    }
  }
  if (counts.empty()) counts = "no sled status";
  return job["job_id"].get<std::string>() + "  " + counts + "  " +
         job["command"].get<std::string>() + "\n";
}

int JobHistory(const Context& ctx, int limit, int offset) {
  SUSH_TRY(sush_net::SushClient sled, ctx.Sled());
  SUSH_TRY(json history, sled.History(offset, limit));
  std::string text;
  for (json& job : history["jobs"]) {
    text += HistoryLine(job);
    json outcomes = json::object();
    for (const auto& [bb, status] : job["statuses"].items()) outcomes[bb] = Outcome(status);
    job["outcomes"] = outcomes;
  }
  if (text.empty()) text = "no jobs\n";
  Print(ctx, history, text);
  return kExitOk;
}

// ---- Sleds named by -T ----

struct NamedSled {
  std::string baseboard;
  std::optional<int> cubby;
  sush_net::SushClient client;
};

// The sleds a command names with -T: with --rack, those of rack.json ("*":
// all); with --server, that sled if the target names it.
Result<std::vector<NamedSled>> NamedSleds(const Context& ctx, const std::string& target) {
  std::vector<NamedSled> out;
  if (ctx.globals.server.empty() && ctx.rack) {
    ONCE_ASSIGN_OR_RETURN(std::vector<sush::RackSled> sleds, sush::SledsOf(*ctx.rack, target));
    for (const sush::RackSled& sled : sleds) {
      std::optional<sush_net::SushClient> client = Context::Reach(sled);
      out.push_back(NamedSled{sled.baseboard, sled.cubby,
                              client ? *client : sush_net::SushClient(sled.http)});
    }
  } else {
    ONCE_ASSIGN_OR_RETURN(sush_net::SushClient client, ctx.Sled());
    ONCE_ASSIGN_OR_RETURN(json info, client.Info());
    ONCE_ASSIGN_OR_RETURN(rack::Target parsed, rack::Target::Parse(target));
    NamedSled sled{info.value("baseboard", std::string()), std::nullopt, client};
    if (info.contains("cubby") && info["cubby"].is_number()) sled.cubby = info["cubby"].get<int>();
    if (Matches(parsed, SledRow{sled.baseboard, sled.cubby})) out.push_back(std::move(sled));
  }
  if (out.empty()) {
    return MakeError(ErrorCode::kNotFound, "-T " + target + " names no sled of this rack");
  }
  return out;
}

// `job purge [ID...] [--finished] [-T SLEDS]`: signed; each sled deletes what
// the retention rule lets go and says what it kept and why.
int JobPurge(const Context& ctx, const std::vector<std::string>& id_texts, bool finished,
             const std::string& target) {
  if (id_texts.empty() && !finished) {
    return Fail(ctx,
                Refusal(ErrorCode::kInvalidArgument,
                        "name the jobs (IDs) or say --finished (every finished job's output)"));
  }
  std::vector<rack::JobId> ids;
  for (const std::string& text : id_texts) {
    SUSH_TRY(rack::JobId id, rack::JobId::Parse(text));
    ids.push_back(id);
  }
  SUSH_TRY(rack::KeyPair keys, ctx.Key());
  SUSH_TRY(std::vector<NamedSled> sleds, NamedSleds(ctx, target));
  json all = json::array();
  std::string text;
  bool failed = false;
  for (const NamedSled& sled : sleds) {
    auto answer = sled.client.PurgeOutput(ids, {&keys, sled.baseboard});
    if (!answer) {
      failed = true;
      all.push_back(json{{"baseboard", sled.baseboard},
                         {"error", sush_net::ErrorToJson(answer.error())["error"]}});
      text += sled.baseboard + ": " + answer.error().ToString() + "\n";
      continue;
    }
    all.push_back(*answer);
    text += sled.baseboard + ": purged " + std::to_string((*answer)["purged"].size()) +
            " job folder(s), " + std::to_string((*answer).value("bytes_freed", uint64_t{0})) +
            " bytes\n";
    for (const json& kept : (*answer)["kept"]) {
      text += "  kept " + kept.value("job_id", std::string()) + ": " +
              kept.value("reason", std::string()) + "\n";
    }
  }
  Print(ctx, json{{"sleds", all}}, text);
  return failed ? kExitFailed : kExitOk;
}

// ---- The boundary record ----

std::string Or(const json& value, const std::string& fallback = "-") {
  return value.is_string() ? value.get<std::string>() : fallback;
}

std::string OutcomeText(const json& outcome) {
  if (!outcome.is_object()) return "-";
  const std::string kind = outcome.value("kind", std::string());
  if (kind == "exited") return "exit " + std::to_string(outcome.value("code", 0));
  if (kind == "signaled") {
    return "signal " + std::to_string(outcome.value("code", 0)) + " (" +
           outcome.value("signal", std::string("?")) + ")";
  }
  return "failed: " + outcome.value("error", std::string());
}

// One sled's GET /v1/boundary, for people.
std::string BoundaryText(const json& b) {
  const std::string head = b.value("baseboard", std::string("?"));
  std::string text;
  if (!b.value("trusted", false)) {
    text = head + ": UNTRUSTED (locker verdict " + b.value("locker_verdict", std::string("?")) +
           "): " + Or(b["untrusted_reason"], "") +
           "\n  every job is skipped here until `sush sled reset -T " +
           head.substr(head.rfind(':') + 1) + "` (reset nonce " + Or(b["reset_nonce"]) + ")\n";
  } else {
    const std::string verdict = b.value("locker_verdict", std::string("?"));
    text = head + ": trusted, gate " + b.value("gate", std::string("?")) + ", locker verdict " +
           (verdict == "discarded" ? "discarded at start, reset by an operator since" : verdict) +
           "\n";
    text += "  network    " + Or(b["network"], "none yet");
    if (b["joined_network"] != b["network"]) text += " (joined " + Or(b["joined_network"]) + ")";
    text += "\n  session    " + Or(b["session"]) + "\n  last job   " + Or(b["last_job"]) +
            "\n  successor  " + Or(b["successor"]) + "\n  outcome    " + OutcomeText(b["outcome"]) +
            "\n  V          " + Or(b["V"]) + "   (ITC text)\n  markers    entry " +
            Or(b["markers"]["entry"]) +
            (b["markers"]["joined"] != b["markers"]["entry"]
                 ? ", joined universe's " + Or(b["markers"]["joined"])
                 : std::string()) +
            ", birth " + Or(b["markers"]["birth"]) + "\n  amnesia    " + Or(b["amnesia"]) + ", " +
            std::to_string(b.value("resets", 0)) + " operator reset(s)\n";
    if (b.contains("left_sessions")) {
      const json& sessions = b["left_sessions"];
      text += "  sessions   " + std::to_string(sessions.size()) + " left session(s) kept\n";
      for (const json& entry : sessions) {
        text +=
            "             " + Or(entry["session"]) + "  last job " + Or(entry["last_job"]) + "\n";
      }
    }
    const json& map = b["map"];
    text += "  map        " + std::to_string(map.size()) + " universe(s) left\n";
    for (const json& entry : map) {
      text += "             " + Or(entry["network"]) + "  session " + Or(entry["session"]) +
              "  last job " + Or(entry["last_job"]) + "\n";
    }
    const json& filter = b["filter"];
    char rate[64];
    std::snprintf(rate, sizeof(rate), "%.3g", filter.value("false_positive_rate", 0.0));
    text += "  filter     " + std::to_string(filter.value("bits_set", 0)) + "/" +
            std::to_string(filter.value("bits", 0)) + " bits set, est. false positive rate " +
            rate + "\n  record     " + std::to_string(b.value("bytes", 0)) + " bytes\n";
  }
  for (const json& drive : b["drives"]) {
    text += "  drive      " + drive.value("path", std::string()) + ": " +
            drive.value("state", std::string()) + " (sequence " +
            std::to_string(drive.value("sequence", uint64_t{0})) + ")";
    if (!drive.value("message", std::string()).empty()) {
      text += " " + drive["message"].get<std::string>();
    }
    text += "\n";
  }
  return text;
}

int Boundary(const Context& ctx, const std::string& target) {
  SUSH_TRY(std::vector<NamedSled> sleds, NamedSleds(ctx, target));
  json all = json::array();
  std::string text;
  for (const NamedSled& sled : sleds) {
    auto boundary = sled.client.Boundary();
    if (boundary) {
      all.push_back(*boundary);
      text += BoundaryText(*boundary);
    } else {
      all.push_back(json{{"baseboard", sled.baseboard},
                         {"error", sush_net::ErrorToJson(boundary.error())["error"]}});
      text += sled.baseboard + ": unreachable: " + boundary.error().message + "\n";
    }
  }
  Print(ctx, json{{"sleds", all}}, text);
  return 0;
}

int SledReset(const Context& ctx, const std::string& target) {
  SUSH_TRY(std::vector<NamedSled> sleds, NamedSleds(ctx, target));
  if (sleds.size() != 1) {
    return Fail(ctx, Error{ErrorCode::kInvalidArgument,
                           "sled reset resets one sled; -T " + target + " names " +
                               std::to_string(sleds.size()),
                           "",
                           {}});
  }
  SUSH_TRY(rack::KeyPair keys, ctx.Key());
  const NamedSled& sled = sleds[0];
  SUSH_TRY(rack::Nonce nonce, sled.client.ResetSled(keys));
  // Accepted: the sled applies it when gossip delivers it back (at once).
  json boundary;
  for (int i = 0; i < 50; ++i) {
    SUSH_TRY(boundary, sled.client.Boundary());
    if (boundary.value("trusted", false)) break;
    std::this_thread::sleep_for(100ms);
  }
  if (!boundary.value("trusted", false)) {
    return Fail(ctx, Error{ErrorCode::kUnavailable,
                           "the reset of " + sled.baseboard + " was accepted but the sled is " +
                               "still untrusted: " + Or(boundary["untrusted_reason"], ""),
                           "",
                           {}});
  }
  Print(
      ctx,
      json{
          {"baseboard", sled.baseboard}, {"reset_nonce", nonce.ToString()}, {"boundary", boundary}},
      "sled " + sled.baseboard + " reset (nonce " + nonce.ToString() +
          "): trusted again; only jobs submitted from now on run there\n");
  return 0;
}

// ---- version: the rack, and how its gossip is doing ----

// The gossip state each sled reports: its universe, a persisting split, the
// latest session failures.
std::string GossipText(const std::vector<json>& infos, bool& split) {
  std::map<std::string, std::vector<std::string>> by_network;
  std::string problems;
  for (const json& info : infos) {
    const std::string bb = info.value("baseboard", std::string("?"));
    by_network[info["network"].is_string() ? info["network"].get<std::string>() : "none"].push_back(
        bb.substr(bb.rfind(':') + 1));
    if (!info.contains("gossip")) continue;
    const json& gossip = info["gossip"];
    if (gossip.contains("split") && gossip["split"].is_object()) {
      split = true;
      problems += "  SPLIT seen by " + bb + ": " + gossip["split"].value("message", std::string()) +
                  " (universe " + gossip["split"].value("network", std::string()) + ", " +
                  std::to_string(gossip["split"].value("seconds", 0)) + " s, " +
                  std::to_string(gossip["split"].value("meetings", 0)) + " meetings)\n";
    }
    if (gossip.contains("errors") && gossip["errors"].is_array() && !gossip["errors"].empty()) {
      const json& last = gossip["errors"].back();
      problems += "  gossip error on " + bb + " with " + last.value("peer", std::string()) + ": " +
                  last.value("message", std::string()) + " (" +
                  std::to_string(last.value("count", 1)) + "x, last at " +
                  last.value("at", std::string()) + ")\n";
    }
  }
  if (by_network.size() > 1) split = true;
  std::string text = "gossip: " + std::to_string(by_network.size()) + " universe(s)";
  if (by_network.size() > 1) {
    text += " (SPLIT)";
    for (const auto& [network, sleds] : by_network) {
      std::string who;
      for (const std::string& s : sleds) who += (who.empty() ? "" : " ") + s;
      text += "\n  " + network + ": " + who;
    }
  }
  return text + "\n" + problems;
}

// The rack as 16 rows x 2 cubbies: row r holds cubbies r (left) and r+16.
std::string RackDrawing(const json& sleds) {
  std::map<int, json> by_cubby;
  std::vector<json> unknown;
  for (const json& s : sleds) {
    if (s["cubby"].is_number()) {
      by_cubby[s["cubby"].get<int>()] = s;
    } else {
      unknown.push_back(s);
    }
  }
  auto cell = [&](int cubby) {
    char text[64];
    auto it = by_cubby.find(cubby);
    if (it == by_cubby.end()) {
      std::snprintf(text, sizeof(text), "%2d %-32s", cubby, "-");
    } else {
      const std::string bb = it->second["baseboard"].get<std::string>();
      const std::string serial = bb.substr(bb.rfind(':') + 1);
      const std::string build = it->second["build_version"].get<std::string>();
      std::snprintf(text, sizeof(text), "%2d %-14.14s %-17.17s", cubby, serial.c_str(),
                    build.c_str());
    }
    return std::string(text);
  };
  const std::string rule = "+" + std::string(cell(0).size() + 2, '-') + "+" +
                           std::string(cell(0).size() + 2, '-') + "+\n";
  std::string text = rule;
  for (int row = 15; row >= 0; --row) text += "| " + cell(row) + " | " + cell(row + 16) + " |\n";
  text += rule;
  for (const json& s : unknown) {
    text += "(no cubby) " + s["baseboard"].get<std::string>() + " " +
            s["build_version"].get<std::string>() + "\n";
  }
  return text;
}

int Version(const Context& ctx) {
  json body{{"client", kClientVersion}};
  auto sled = ctx.Sled();
  auto answered = sled ? sled->Info() : Result<json>(std::unexpected(sled.error()));
  if (!answered) {
    Print(ctx, body,
          std::string("client ") + kClientVersion +
              "\nserver unreachable: " + answered.error().message + "\n");
    return kExitOk;
  }
  json info = std::move(*answered);
  body["server"] = json{{"baseboard", info["baseboard"]}, {"build_version", info["build_version"]}};
  body["sleds"] = info["sleds"];
  // Every sled's own view of its gossip (with --rack), else the one asked.
  std::vector<json> infos{info};
  if (ctx.rack && ctx.globals.server.empty()) {
    infos.clear();
    json unreachable = json::array();
    for (const sush::RackSled& s : ctx.rack->sleds) {
      auto one = sush_net::SushClient(s.http, {kProbeTimeout}).Info();
      if (one) {
        infos.push_back(*one);
      } else {
        unreachable.push_back(s.baseboard);
      }
    }
    if (!unreachable.empty()) body["unreachable"] = unreachable;
  }
  bool split = false;
  const std::string gossip = GossipText(infos, split);
  json views = json::array();
  for (const json& one : infos) {
    views.push_back(json{{"baseboard", one["baseboard"]},
                         {"network", one["network"]},
                         {"gossip", one.value("gossip", json(nullptr))}});
  }
  body["gossip"] = json{{"split", split}, {"sleds", views}};
  std::string text = std::string("client ") + kClientVersion + "\nserver " +
                     info["build_version"].get<std::string>() + " on " +
                     info["baseboard"].get<std::string>() + "\n" + RackDrawing(info["sleds"]) +
                     gossip;
  if (body.contains("unreachable")) {
    for (const json& bb : body["unreachable"]) {
      text += "  " + bb.get<std::string>() + " does not answer\n";
    }
  }
  Print(ctx, body, text);
  return kExitOk;
}

// ---- the local rack ----

int RackUpCommand(const Context& ctx, int sleds, const std::string& dir,
                  const std::string& server_bin, bool test_admin) {
  sush::RackUpOptions options;
  options.sleds = sleds;
  options.dir = dir;
  options.server_binary = server_bin;
  options.test_admin = test_admin;
  SUSH_TRY(sush::RackFile rack, sush::RackUp(options));
  std::string text =
      "rack of " + std::to_string(rack.sleds.size()) + " sleds up in " + rack.dir.string() + "\n";
  for (const sush::RackSled& s : rack.sleds) {
    text += "  cubby " + std::to_string(s.cubby) + "  " + s.baseboard + "  http://" +
            s.http.ToString() + "  pid " + std::to_string(s.pid) + "\n";
  }
  text += "operator key " + rack.key.string() + "\nreach it with:\n  sush --rack " +
          rack.dir.string() + " session start\n  sush --rack " + rack.dir.string() +
          "            (REPL)\nstop it with:\n  sush rack down --dir " + rack.dir.string() + "\n";
  Print(ctx, sush::RackToJson(rack), text);
  return kExitOk;
}

Result<std::string> RackDir(const Context& ctx, const std::string& dir) {
  const std::string rack_dir = dir.empty() ? ctx.globals.rack_dir : dir;
  if (rack_dir.empty()) return MakeError(ErrorCode::kInvalidArgument, "say which rack: --dir DIR");
  return rack_dir;
}

int RackRestartCommand(const Context& ctx, const std::string& dir, const std::string& target,
                       bool kill, const std::vector<std::string>& cut, bool no_cut) {
  SUSH_TRY(std::string rack_dir, RackDir(ctx, dir));
  sush::RackRestartOptions options{target, kill, std::nullopt};
  if (!cut.empty() || no_cut) options.cut = cut;
  SUSH_TRY(sush::RackSled sled, sush::RackRestart(rack_dir, options));
  Print(ctx, json{{"baseboard", sled.baseboard}, {"pid", sled.pid}, {"args", sled.args}},
        "sled " + sled.baseboard + " restarted (" + (kill ? "SIGKILL" : "SIGTERM") + "), pid " +
            std::to_string(sled.pid) + "\n");
  return kExitOk;
}

int RackDownCommand(const Context& ctx, const std::string& dir) {
  SUSH_TRY(std::string rack_dir, RackDir(ctx, dir));
  SUSH_TRY(sush::RackDownResult down, sush::RackDown(rack_dir));
  json still = json::array();
  std::string text = "rack in " + rack_dir + " down (" + std::to_string(down.stopped.size()) +
                     " servers stopped)\n";
  for (const auto& [baseboard, why] : down.still_up) {
    still.push_back(json{{"baseboard", baseboard}, {"why", why}});
    text += "  NOT stopped: " + baseboard + ": " + why + "\n";
  }
  json body{{"stopped", down.stopped}, {"still_up", still}};
  if (!down.still_up.empty()) {
    body["error"] = sush_net::ErrorToJson(
        Refusal(ErrorCode::kUnavailable,
                std::to_string(down.still_up.size()) + " sled(s) still answer"))["error"];
  }
  Print(ctx, body, text);
  return down.still_up.empty() ? kExitOk : kExitFailed;
}

// ---- the command line ----

int Repl(Globals globals);

// --json and --output text|json, on the app and on every command.
void OutputOptions(CLI::App* app, Globals& globals) {
  app->add_flag("--json", globals.json_output, "print one JSON object (errors too)");
  app->add_option("--output", globals.output_format, "text (default) or json (as --json)")
      ->check(CLI::IsMember({"text", "json"}));
}

// A command's subcommand with the output options.
CLI::App* Command(CLI::App* parent, const std::string& name, const std::string& help,
                  Globals& globals) {
  CLI::App* sub = parent->add_subcommand(name, help);
  OutputOptions(sub, globals);
  return sub;
}

// Parses and runs one command line (argv of main, or a REPL line).
int Run(Globals globals, const std::function<void(CLI::App&)>& parse, ReplState* repl) {
  CLI::App app{
      "sush: the support shell client (docs/sush.md). `sush help COMMAND...` for a "
      "command's options; exit status 0 done, 1 refused or failed, 2 usage error."};
  app.require_subcommand(0, 1);
  app.add_option("--rack", globals.rack_dir, "the rack directory (its rack.json)")
      ->envname("SUSH_RACK");
  app.add_option("--server", globals.server,
                 "one sled's HTTP address (http://HOST:PORT, unix:PATH)")
      ->envname("SUSH_SERVER_URL");
  app.add_option("--key", globals.key, "the signing key file (default: the rack's operator key)");
  app.add_option("--session", globals.session,
                 "refuse to start jobs unless this session is the active one")
      ->envname("SUSH_SESSION");
  OutputOptions(&app, globals);
  std::function<int(const Context&)> action;

  auto* keys = app.add_subcommand("keys", "signing keys")->require_subcommand(1);
  auto* keys_new = Command(keys, "new", "a new Ed25519 key pair in a 0600 file", globals);
  std::string name, out;
  keys_new->add_option("NAME", name, "the key's name")->required();
  keys_new->add_option("--out", out, "the key file (default DIR/keys/NAME.key or ./NAME.key)");
  keys_new->callback([&] { action = [&](const Context& c) { return KeysNew(c, name, out); }; });

  auto* session = app.add_subcommand("session", "support sessions")->require_subcommand(1);
  std::string session_id;
  bool replace = false;
  auto* start =
      Command(session, "start",
              "start a session (refused while one is active, unless named or --replace)", globals);
  start->add_option("ID", session_id,
                    "the active session this start replaces (session ids are made by the "
                    "accepting sled)");
  start->add_flag("--replace", replace, "end the active session, whichever it is");
  start->callback(
      [&] { action = [&](const Context& c) { return SessionStart(c, session_id, replace); }; });
  auto* stop = Command(session, "stop", "stop the active session", globals);
  stop->add_option("ID", session_id, "only if this is the active session");
  stop->callback([&] { action = [&](const Context& c) { return SessionStop(c, session_id); }; });
  auto* attach = Command(session, "attach",
                         "bind this shell's job starts to the active session (the REPL keeps "
                         "it; elsewhere: SUSH_SESSION)",
                         globals);
  attach->add_option("ID", session_id, "only if this is the active session");
  attach->callback(
      [&] { action = [&](const Context& c) { return SessionAttach(c, session_id); }; });
  auto* show =
      Command(session, "show", "the active session, its next job, the sled errors", globals);
  show->callback([&] { action = [&](const Context& c) { return SessionShow(c); }; });
  std::string skip_id;
  auto* skip = Command(session, "skip",
                       "burn a cancelled job's chain position, so the chain moves on", globals);
  skip->add_option("JOB_ID", skip_id, "the cancelled job (codephrase, any case)")->required();
  skip->callback([&] { action = [&](const Context& c) { return SessionSkip(c, skip_id); }; });

  auto* job = app.add_subcommand("job", "jobs")->require_subcommand(1);
  bool wait = false, concurrent = false, full = false, finished = false;
  std::string target = "*", id, stream = "stdout";
  std::vector<std::string> command, ids;
  int timeout_s = 600, limit = 20, offset = 0;
  const std::string wait_help =
      "wait, a live line per targeted sled, until each is done (or down, or --timeout-s), then "
      "print each sled's stdout and stderr";
  auto* job_start = Command(job, "start", "sign and submit a job", globals);
  job_start->add_flag("-w,--wait", wait, wait_help);
  job_start->add_option("-T,--target", target,
                        "* (default), or a comma list of cubbies, serials, baseboard ids; one "
                        "naming no sled of the rack is refused");
  job_start->add_flag("--concurrent", concurrent, "may run beside other jobs");
  job_start->add_option("--timeout-s", timeout_s, "how long -w waits (default 600)")
      ->check(CLI::Range(1, kWaitSecondsMax));
  job_start->add_option("COMMAND", command, "the bash command (words are joined by spaces)")
      ->required();
  job_start->callback([&] {
    std::string text;
    for (const auto& word : command) text += (text.empty() ? "" : " ") + word;
    action = [&, text](const Context& c) {
      return JobStart(c, text, target, concurrent, wait, timeout_s);
    };
  });
  auto* job_status = Command(job, "status", "a job's status on every sled", globals);
  job_status->add_option("ID", id, "the job (codephrase, any case)")->required();
  job_status->add_flag("-w,--wait", wait, wait_help);
  job_status->add_flag("--full", full, "session, command, target, signer, skip details, hashes");
  job_status->add_option("--timeout-s", timeout_s, "how long -w waits (default 600)")
      ->check(CLI::Range(1, kWaitSecondsMax));
  job_status->callback(
      [&] { action = [&](const Context& c) { return JobStatus(c, id, wait, full, timeout_s); }; });
  auto* job_stop =
      Command(job, "stop", "stop a job on every sled (or cancel it if queued)", globals);
  job_stop->add_option("ID", id, "the job (codephrase, any case)")->required();
  job_stop->callback([&] { action = [&](const Context& c) { return JobStop(c, id); }; });
  auto* job_output = Command(job, "output", "a job's stdout or stderr (signed reads)", globals);
  job_output->add_option("ID", id, "the job (codephrase, any case)")->required();
  job_output->add_option("STREAM", stream, "stdout (default) or stderr");
  job_output->add_option("-T,--target", target, "which sled(s) (default: every targeted one)");
  job_output->callback([&] {
    action = [&](const Context& c) {
      return JobOutput(c, id, target == "*" ? "" : target, stream);
    };
  });
  for (const char* alias : {"stdout", "stderr"}) {  // the original client's `job stdout ID`
    auto* sub = Command(job, alias, std::string("a job's ") + alias + " (as job output)", globals);
    sub->add_option("ID", id, "the job (codephrase, any case)")->required();
    sub->add_option("-T,--target", target, "which sled(s) (default: every targeted one)");
    sub->callback([&, alias] {
      action = [&, alias](const Context& c) {
        return JobOutput(c, id, target == "*" ? "" : target, alias);
      };
    });
  }
  auto* job_history = Command(job, "history", "jobs, newest first, ok or failed per sled", globals);
  job_history->add_option("-l,--limit", limit, "how many (default 20, at most 1000)")
      ->check(CLI::Range(1, 1000));
  job_history->add_option("-o,--offset", offset, "how many of the newest to pass over")
      ->check(CLI::Range(0, std::numeric_limits<int>::max()));
  job_history->callback(
      [&] { action = [&](const Context& c) { return JobHistory(c, limit, offset); }; });
  auto* job_purge = Command(job, "purge",
                            "delete job output folders (signed; never a running job's or one "
                            "whose end is not gossiped yet)",
                            globals);
  job_purge->add_option("ID", ids, "the jobs (codephrases)");
  job_purge->add_flag("--finished", finished, "every job folder the rule lets go");
  job_purge->add_option("-T,--target", target, "which sleds (default *)");
  job_purge->callback(
      [&] { action = [&](const Context& c) { return JobPurge(c, ids, finished, target); }; });

  auto* boundary = Command(&app, "boundary", "each sled's boundary record and drives", globals);
  boundary->add_option("-T,--target", target, "*, or cubbies, serials, baseboard ids");
  boundary->callback([&] { action = [&](const Context& c) { return Boundary(c, target); }; });

  auto* sled_cmd = app.add_subcommand("sled", "one sled")->require_subcommand(1);
  auto* reset = Command(sled_cmd, "reset",
                        "reset an untrusted sled's boundary record (signed; from then on it runs "
                        "only jobs submitted after the reset)",
                        globals);
  std::string reset_target;
  reset->add_option("-T,--target", reset_target, "the sled: cubby, serial or baseboard id")
      ->required();
  reset->callback([&] { action = [&](const Context& c) { return SledReset(c, reset_target); }; });

  auto* version = Command(&app, "version",
                          "client, server and every sled as the rack; gossip universes, splits "
                          "and errors",
                          globals);
  version->callback([&] { action = [&](const Context& c) { return Version(c); }; });

  auto* rack_cmd = app.add_subcommand("rack", "a local rack of sush-server processes");
  rack_cmd->require_subcommand(1);
  int sleds = 4;
  std::string dir, server_bin;
  bool test_admin = false;
  auto* up = Command(rack_cmd, "up", "start N sleds on loopback", globals);
  up->add_option("N", sleds, "how many sleds (1-32)")->required();
  up->add_option("--dir", dir, "the rack's folder (rack.json, keys, one folder a sled)")
      ->required();
  up->add_option("--server-bin", server_bin, "the sush-server binary");
  up->add_flag("--test-admin", test_admin, "enable the servers' /admin endpoints (tests)");
  up->callback([&] {
    action = [&](const Context& c) { return RackUpCommand(c, sleds, dir, server_bin, test_admin); };
  });
  auto* restart =
      Command(rack_cmd, "restart",
              "stop one sled and start it again with its flags (data, drives, --cut)", globals);
  std::string restart_target;
  bool kill = false, no_cut = false;
  std::vector<std::string> cut;
  restart->add_option("-T,--target", restart_target, "the sled: cubby, serial or baseboard id")
      ->required();
  restart->add_option("--dir", dir, "the rack (default: --rack)");
  restart->add_flag("--kill", kill, "SIGKILL (a crash) instead of SIGTERM");
  restart->add_option("--cut", cut, "replace its --cut flags (a rack up --test-admin)");
  restart->add_flag("--no-cut", no_cut, "drop its --cut flags");
  restart->callback([&] {
    action = [&](const Context& c) {
      return RackRestartCommand(c, dir, restart_target, kill, cut, no_cut);
    };
  });
  auto* down = Command(rack_cmd, "down",
                       "stop the rack's sleds (also ones restarted by hand: found by their "
                       "data folder)",
                       globals);
  down->add_option("--dir", dir, "the rack (default: --rack)");
  down->callback([&] { action = [&](const Context& c) { return RackDownCommand(c, dir); }; });

  app.add_subcommand("repl", "the interactive shell (also: no command)");
  // `sush help [COMMAND...]` is `sush [COMMAND...] --help`, as `help` in the REPL.
  auto* help = app.add_subcommand("help", "this help; `help COMMAND...` for a command's");
  help->allow_extras();
  help->callback([&] {
    action = [&, help](const Context& c) {
      std::vector<std::string> words = help->remaining();
      words.push_back("--help");
      std::reverse(words.begin(), words.end());
      return Run(
          c.globals, [&](CLI::App& again) { again.parse(words); }, c.repl);
    };
  });

  try {
    parse(app);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);  // --help
    const bool as_json = globals.json_output || globals.output_format == "json";
    if (as_json) {
      std::cout << sush_net::JsonText(
                       sush_net::ErrorToJson(Error{ErrorCode::kInvalidArgument, e.what(), "", {}}))
                << std::endl;
    } else {
      (void)app.exit(e);
    }
    return kExitUsage;
  }
  if (globals.output_format == "json") globals.json_output = true;
  if (globals.output_format == "text") globals.json_output = false;
  Context ctx{globals, std::nullopt, std::nullopt, repl};
  if (!globals.rack_dir.empty()) {
    std::error_code ec;
    if (!std::filesystem::is_directory(globals.rack_dir, ec)) {
      ctx.rack_error = Refusal(ErrorCode::kNotFound,
                               "--rack " + globals.rack_dir + ": the folder does not exist");
    } else if (auto loaded = sush::LoadRack(globals.rack_dir)) {
      ctx.rack = std::move(*loaded);
    } else {
      ctx.rack_error = loaded.error();
    }
  }
  if (action) {
    // A sled's answer is read by typed accesses that throw when a member has
    // another type than the API documents (a sled of another version, a
    // proxy's page): one typed failure, never an abort.
    try {
      return action(ctx);
    } catch (const json::exception& e) {
      return Fail(ctx, Error{ErrorCode::kCorruption,
                             std::string("a sled answered JSON of another shape: ") + e.what(),
                             "",
                             {}});
    }
  }
  if (repl != nullptr) return kExitOk;
  return Repl(globals);
}

int Repl(Globals globals) {
  ReplState state;
  std::string line;
  while (true) {
    std::cout << "sush# " << std::flush;
    if (!std::getline(std::cin, line)) break;
    const auto first = line.find_first_not_of(" \t");
    if (first == std::string::npos) continue;
    const std::string word = line.substr(first, line.find_first_of(" \t", first) - first);
    if (word == "exit" || word == "quit") break;
    Run(
        globals, [&](CLI::App& app) { app.parse(line, /*program_name_included=*/false); }, &state);
  }
  std::cout << std::endl;
  return kExitOk;
}

}  // namespace

int main(int argc, char** argv) {
  // `sush sim ...`: the deterministic rack simulator (docs/sush-simulator.md).
  if (argc > 1 && std::string_view(argv[1]) == "sim") {
    return once::sim::SimCommand(std::vector<std::string>(argv + 2, argv + argc), std::cout,
                                 std::cerr);
  }
  return Run(
      Globals{}, [&](CLI::App& app) { app.parse(argc, argv); }, nullptr);
}
