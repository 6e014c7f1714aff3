// sush: the sush client (docs/sush.md).
//
//   sush rack up 4 --dir /tmp/rack          # a local rack of 4 sush-server processes
//   sush --rack /tmp/rack session start
//   sush --rack /tmp/rack job start -w 'echo hello from $SUSH_JOB_ID'
//   sush --rack /tmp/rack job status WORD-WORD-... --full
//   sush --rack /tmp/rack session skip WORD-WORD-...   # burn a cancelled job's position
//   sush --rack /tmp/rack boundary [-T 2]   # each sled's boundary record and drives
//   sush --rack /tmp/rack sled reset -T 2   # an untrusted sled's record, reset (signed)
//   sush rack restart -T 2 --dir /tmp/rack [--kill]
//   sush --rack /tmp/rack                   # the REPL (prompt "sush# ")
//   sush rack down --dir /tmp/rack
//
// Every command takes --json. The rack is found with --rack DIR (its
// rack.json; $SUSH_RACK) or --server http://127.0.0.1:PORT ($SUSH_SERVER_URL);
// the key with --key FILE (default DIR/keys/operator.key).

#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <iostream>
#include <map>
#include <optional>
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

struct Globals {
  std::string rack_dir;
  std::string server;
  std::string key;
  bool json_output = false;
};

// What a command needs: a sled to talk to, the rack's sleds, the key.
struct Context {
  Globals globals;
  std::optional<sush::RackFile> rack;

  Result<sush_net::SushClient> Sled() const {
    if (!globals.server.empty()) {
      ONCE_ASSIGN_OR_RETURN(sush_net::Address address, sush_net::ParseAddress(globals.server));
      return sush_net::SushClient(address);
    }
    if (!rack) {
      return MakeError(ErrorCode::kInvalidArgument, "say which rack: --rack DIR or --server URL");
    }
    for (const sush::RackSled& sled : rack->sleds) {
      sush_net::SushClient client(sled.http, {1000ms});
      if (client.Info()) return sush_net::SushClient(sled.http);
    }
    return MakeError(ErrorCode::kUnavailable, "no sled of " + rack->dir.string() + " answers");
  }
  // The HTTP address of a sled by baseboard (from rack.json), or the --server.
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
    if (path.empty()) return MakeError(ErrorCode::kInvalidArgument, "say which key: --key FILE");
    return sush_net::LoadKeyPair(path);
  }
};

int Fail(const Context& ctx, const Error& error) {
  if (ctx.globals.json_output) {
    std::cout << sush_net::ErrorToJson(error).dump() << std::endl;
  } else {
    std::cerr << "sush: " << error.ToString() << std::endl;
  }
  return 1;
}

void Print(const Context& ctx, const json& body, const std::string& text) {
  if (ctx.globals.json_output) {
    std::cout << body.dump() << std::endl;
  } else {
    std::cout << text << std::flush;
  }
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
};

// The sleds a job targets, among those the sled knows (version announcements).
std::vector<SledRow> TargetedSleds(const json& info, const std::string& target_text) {
  std::vector<SledRow> rows;
  auto target = rack::Target::Parse(target_text);
  for (const json& s : info["sleds"]) {
    SledRow row{s.value("baseboard", std::string()), std::nullopt};
    if (s.contains("cubby") && s["cubby"].is_number()) row.cubby = s["cubby"].get<int>();
    rack::SledIdentity identity{row.baseboard, std::nullopt};
    if (row.cubby) identity.cubby = static_cast<uint8_t>(*row.cubby);
    if (target && target->Matches(identity)) rows.push_back(row);
  }
  std::sort(rows.begin(), rows.end(),
            [](const SledRow& a, const SledRow& b) { return a.cubby < b.cubby; });
  return rows;
}

std::string Line(const SledRow& row, const json& job) {
  char head[96];
  std::snprintf(head, sizeof(head), "cubby %2s  %-24s ",
                row.cubby ? std::to_string(*row.cubby).c_str() : "?", row.baseboard.c_str());
  const json& statuses = job["statuses"];
  return head + (statuses.contains(row.baseboard) ? StatusText(statuses[row.baseboard])
                                                  : std::string("(no status yet)"));
}

bool AllTerminal(const std::vector<SledRow>& rows, const json& job) {
  for (const SledRow& row : rows) {
    if (!job["statuses"].contains(row.baseboard)) return false;
    if (!job["statuses"][row.baseboard].value("terminal", false)) return false;
  }
  return true;
}

// Polls the job until every targeted sled is terminal, one live line a sled.
Result<json> WaitForJob(const Context& ctx, const sush_net::SushClient& sled, const rack::JobId& id,
                        std::chrono::seconds timeout) {
  const bool tty = ::isatty(1) != 0 && !ctx.globals.json_output;
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  std::map<std::string, std::string> printed;
  size_t drawn = 0;
  while (true) {
    ONCE_ASSIGN_OR_RETURN(json info, sled.Info());
    ONCE_ASSIGN_OR_RETURN(json job, sled.Job(id));
    const std::string target = job.value("target", std::string("*"));
    const auto rows = TargetedSleds(info, target);
    if (rows.empty()) {  // an unknown cubby, serial or baseboard targets nothing
      if (!ctx.globals.json_output)
        std::cout << "no known sled is targeted by '" << target << "'\n";
      return job;
    }
    if (!ctx.globals.json_output) {
      if (tty) {
        if (drawn > 0) std::cout << "\033[" << drawn << "A";
        for (const SledRow& row : rows) std::cout << "\r\033[K" << Line(row, job) << "\n";
        drawn = rows.size();
      } else {
        for (const SledRow& row : rows) {
          const std::string line = Line(row, job);
          if (printed[row.baseboard] != line) std::cout << line << "\n";
          printed[row.baseboard] = line;
        }
      }
      std::cout << std::flush;
    }
    if (AllTerminal(rows, job)) return job;
    if (std::chrono::steady_clock::now() > deadline) {
      return MakeError(ErrorCode::kTimeout, "job " + id.ToString() + " still running");
    }
    std::this_thread::sleep_for(kWaitPoll);
  }
}

// Each sled's output of a job (from that sled's own server).
json Outputs(const Context& ctx, const sush_net::SushClient& sled, const json& job,
             const std::string& stream, const std::string& only) {
  json out = json::object();
  auto id = rack::JobId::Parse(job.value("job_id", std::string()));
  std::map<std::string, uint8_t> cubbies;  // -T by cubby needs the sleds' announcements
  if (auto info = sled.Info()) {
    for (const json& s : (*info)["sleds"]) {
      if (s["cubby"].is_number()) cubbies[s["baseboard"]] = s["cubby"].get<uint8_t>();
    }
  }
  for (const auto& [baseboard, status] : job["statuses"].items()) {
    if (!status.contains("exit")) continue;
    if (!only.empty()) {
      auto target = rack::Target::Parse(only);
      rack::SledIdentity identity{baseboard, std::nullopt};
      if (auto it = cubbies.find(baseboard); it != cubbies.end()) identity.cubby = it->second;
      if (!target || !target->Matches(identity)) continue;
    }
    std::optional<sush_net::Address> address = ctx.AddressOf(baseboard);
    if (!address && ctx.globals.server.empty()) continue;
    sush_net::SushClient client(address ? *address : sled.address());
    auto bytes = client.Output(*id, stream);
    out[baseboard] = bytes ? json(*bytes) : json(nullptr);
  }
  return out;
}

std::string OutputText(const json& outputs, const json& job) {
  std::string text;
  for (const auto& [baseboard, bytes] : outputs.items()) {
    text += "== " + baseboard + ": " + StatusText(job["statuses"][baseboard]) + " ==\n";
    if (bytes.is_string()) {
      text += bytes.get<std::string>();
      if (!text.empty() && text.back() != '\n') text += "\n";
    } else {
      text += "(output not reachable from here)\n";
    }
  }
  return text;
}

// ---- Commands ----

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

// start | stop | show | skip (job_id: the cancelled chain position to burn).
int SessionCommand(const Context& ctx, const std::string& action, const std::string& job_id = "") {
  SUSH_TRY(sush_net::SushClient sled, ctx.Sled());
  if (action == "show") {
    SUSH_TRY(json session, sled.Session());
    SUSH_TRY(json info, sled.Info());
    session["sled"] = info["baseboard"];
    session["network"] = info["network"];
    const std::string active =
        session["active"].is_null() ? "none" : session["active"].get<std::string>();
    Print(ctx, session,
          "session " + active + "\n" +
              (session.contains("message") ? "  " + session["message"].get<std::string>() + "\n"
                                           : std::string()) +
              (session["next_job_id"].is_null()
                   ? std::string()
                   : "  next job " + session["next_job_id"].get<std::string>() + "\n") +
              "  seen by " + info["baseboard"].get<std::string>() + "\n" + SledErrorsText(session));
    return 0;
  }
  SUSH_TRY(rack::KeyPair keys, ctx.Key());
  if (action == "skip") {
    SUSH_TRY(rack::JobId id, rack::JobId::Parse(job_id));
    SUSH_TRY(json answer, sled.SkipJob(keys, id));
    const std::string next = answer.value("next_job_id", json(nullptr)).is_string()
                                 ? answer["next_job_id"].get<std::string>()
                                 : "";
    Print(ctx, answer,
          "chain position " + id.ToString() + " burned\n" +
              (next.empty() ? std::string() : "  next job " + next + "\n"));
    return 0;
  }
  if (action == "start") {
    SUSH_TRY(rack::SessionId id, sled.StartSession(keys));
    Print(ctx, json{{"session_id", id.ToString()}, {"sled", sled.address().ToString()}},
          "session " + id.ToString() + " started\n");
    return 0;
  }
  SUSH_TRY(rack::SessionId id, sled.StopSession(keys));
  Print(ctx, json{{"session_id", id.ToString()}, {"stopped", true}},
        "session " + id.ToString() + " stop requested\n");
  return 0;
}

int JobStart(const Context& ctx, const std::string& command, const std::string& target,
             bool concurrent, bool wait, int timeout_s) {
  SUSH_TRY(sush_net::SushClient sled, ctx.Sled());
  SUSH_TRY(rack::KeyPair keys, ctx.Key());
  SUSH_TRY(rack::JobId id, sled.StartJob(keys, command, target, concurrent));
  if (!wait) {
    Print(ctx, json{{"job_id", id.ToString()}}, "job " + id.ToString() + "\n");
    return 0;
  }
  if (!ctx.globals.json_output) std::cout << "job " << id.ToString() << "\n";
  SUSH_TRY(json job, WaitForJob(ctx, sled, id, std::chrono::seconds(timeout_s)));
  const json outputs = Outputs(ctx, sled, job, "stdout", "");
  Print(ctx, json{{"job", job}, {"stdout", outputs}}, OutputText(outputs, job));
  return 0;
}

int JobStatus(const Context& ctx, const std::string& id_text, bool wait, bool full, int timeout_s) {
  SUSH_TRY(sush_net::SushClient sled, ctx.Sled());
  SUSH_TRY(rack::JobId id, rack::JobId::Parse(id_text));
  json job;
  if (wait) {
    SUSH_TRY(job, WaitForJob(ctx, sled, id, std::chrono::seconds(timeout_s)));
    if (!ctx.globals.json_output && !full) return 0;
  } else {
    SUSH_TRY(job, sled.Job(id));
  }
  std::string text = "job " + job["job_id"].get<std::string>() + "\n";
  if (full) {
    text += "  session " + job["session_id"].get<std::string>() + "\n  command " +
            job["command"].get<std::string>() + "\n  target " + job["target"].get<std::string>() +
            (job.value("concurrent", false) ? " (concurrent)" : "") + "\n  signed by " +
            job.value("key_id", std::string("?")) +
            (job.value("verified", false) ? "" : " (not verified: refused)") + "\n";
  }
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
  return 0;
}

int JobStop(const Context& ctx, const std::string& id_text) {
  SUSH_TRY(sush_net::SushClient sled, ctx.Sled());
  SUSH_TRY(rack::KeyPair keys, ctx.Key());
  SUSH_TRY(rack::JobId id, rack::JobId::Parse(id_text));
  if (auto stopped = sled.StopJob(keys, id); !stopped) return Fail(ctx, stopped.error());
  Print(ctx, json{{"job_id", id.ToString()}, {"stop_requested", true}},
        "job " + id.ToString() + " stop requested\n");
  return 0;
}

int JobOutput(const Context& ctx, const std::string& id_text, const std::string& target,
              const std::string& stream) {
  if (stream != "stdout" && stream != "stderr") {
    return Fail(ctx, Error{ErrorCode::kInvalidArgument, "stdout or stderr", "", {}});
  }
  SUSH_TRY(sush_net::SushClient sled, ctx.Sled());
  SUSH_TRY(rack::JobId id, rack::JobId::Parse(id_text));
  SUSH_TRY(json job, sled.Job(id));
  const json outputs = Outputs(ctx, sled, job, stream, target);
  if (!ctx.globals.json_output && outputs.size() == 1 && outputs.begin()->is_string()) {
    std::cout << outputs.begin()->get<std::string>() << std::flush;  // raw, for pipes
    return 0;
  }
  if (outputs.empty()) {
    return Fail(
        ctx, Error{ErrorCode::kNotFound,
                   "no " + stream + " of " + id.ToString() + " on the sleds asked (still running?)",
                   "",
                   {}});
  }
  Print(ctx, json{{"job_id", id.ToString()}, {stream, outputs}}, OutputText(outputs, job));
  return 0;
}

int JobHistory(const Context& ctx, int limit, int offset) {
  SUSH_TRY(sush_net::SushClient sled, ctx.Sled());
  SUSH_TRY(json history, sled.History(offset, limit));
  std::string text;
  for (const json& job : history["jobs"]) {
    size_t terminal = 0;
    std::map<std::string, size_t> states;  // "Stopped", "Skipped (lightcone)", ...
    for (const auto& [bb, status] : job["statuses"].items()) {
      terminal += status.value("terminal", false) ? 1 : 0;
      std::string state = status.value("state", std::string("?"));
      if (status.contains("skip_reason"))
        state += " (" + status["skip_reason"].get<std::string>() + ")";
      ++states[state];
    }
    std::string counts;
    for (const auto& [state, n] : states) {
      counts += (counts.empty() ? "" : ", ") + std::to_string(n) + " " + state;
    }
    text += job["job_id"].get<std::string>() + "  " + std::to_string(terminal) + "/" +
            std::to_string(job["statuses"].size()) + " done  " + job["command"].get<std::string>() +
            (counts.empty() ? std::string() : "  [" + counts + "]") + "\n";
  }
  if (text.empty()) text = "no jobs\n";
  Print(ctx, history, text);
  return 0;
}

// ---- The boundary record ----

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
      out.push_back(NamedSled{sled.baseboard, sled.cubby, sush_net::SushClient(sled.http)});
    }
  } else {
    ONCE_ASSIGN_OR_RETURN(sush_net::SushClient client, ctx.Sled());
    ONCE_ASSIGN_OR_RETURN(json info, client.Info());
    ONCE_ASSIGN_OR_RETURN(rack::Target parsed, rack::Target::Parse(target));
    NamedSled sled{info.value("baseboard", std::string()), std::nullopt, client};
    if (info.contains("cubby") && info["cubby"].is_number()) sled.cubby = info["cubby"].get<int>();
    rack::SledIdentity identity{sled.baseboard, std::nullopt};
    if (sled.cubby) identity.cubby = static_cast<uint8_t>(*sled.cubby);
    if (parsed.Matches(identity)) out.push_back(std::move(sled));
  }
  if (out.empty()) {
    return MakeError(ErrorCode::kNotFound, "-T " + target + " names no sled of this rack");
  }
  return out;
}

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

// The rack as 16 rows x 2 cubbies: row r holds cubbies r (left) and r+16.
int Version(const Context& ctx) {
  json body{{"client", kClientVersion}};
  auto sled = ctx.Sled();
  if (!sled) {
    Print(ctx, body,
          std::string("client ") + kClientVersion +
              "\nserver unreachable: " + sled.error().message + "\n");
    return 0;
  }
  auto answered = sled->Info();
  if (!answered) {
    Print(ctx, body,
          std::string("client ") + kClientVersion +
              "\nserver unreachable: " + answered.error().message + "\n");
    return 0;
  }
  json info = std::move(*answered);
  body["server"] = json{{"baseboard", info["baseboard"]}, {"build_version", info["build_version"]}};
  body["sleds"] = info["sleds"];
  std::map<int, json> by_cubby;
  std::vector<json> unknown;
  for (const json& s : info["sleds"]) {
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
  std::string text = std::string("client ") + kClientVersion + "\nserver " +
                     info["build_version"].get<std::string>() + " on " +
                     info["baseboard"].get<std::string>() + "\n";
  const std::string rule = "+" + std::string(cell(0).size() + 2, '-') + "+" +
                           std::string(cell(0).size() + 2, '-') + "+\n";
  text += rule;
  for (int row = 15; row >= 0; --row) {
    text += "| " + cell(row) + " | " + cell(row + 16) + " |\n";
  }
  text += rule;
  for (const json& s : unknown) {
    text += "(no cubby) " + s["baseboard"].get<std::string>() + " " +
            s["build_version"].get<std::string>() + "\n";
  }
  Print(ctx, body, text);
  return 0;
}

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
  return 0;
}

int RackRestartCommand(const Context& ctx, const std::string& dir, const std::string& target,
                       bool kill, const std::vector<std::string>& cut, bool no_cut) {
  const std::string rack_dir = dir.empty() ? ctx.globals.rack_dir : dir;
  if (rack_dir.empty()) {
    return Fail(ctx, Error{ErrorCode::kInvalidArgument, "say which rack: --dir DIR", "", {}});
  }
  sush::RackRestartOptions options{target, kill, std::nullopt};
  if (!cut.empty() || no_cut) options.cut = cut;
  SUSH_TRY(sush::RackSled sled, sush::RackRestart(rack_dir, options));
  Print(ctx, json{{"baseboard", sled.baseboard}, {"pid", sled.pid}, {"args", sled.args}},
        "sled " + sled.baseboard + " restarted (" + (kill ? "SIGKILL" : "SIGTERM") + "), pid " +
            std::to_string(sled.pid) + "\n");
  return 0;
}

int RackDownCommand(const Context& ctx, const std::string& dir) {
  SUSH_TRY(std::vector<int> pids, sush::RackDown(dir));
  Print(ctx, json{{"stopped", pids}},
        "rack in " + dir + " down (" + std::to_string(pids.size()) + " servers stopped)\n");
  return 0;
}

int Repl(Globals globals);

// Parses and runs one command line (argv of main, or a REPL line).
int Run(Globals globals, const std::function<void(CLI::App&)>& parse, bool in_repl) {
  CLI::App app{"sush: the support shell client"};
  app.require_subcommand(0, 1);
  app.add_option("--rack", globals.rack_dir, "rack directory (rack.json)")->envname("SUSH_RACK");
  app.add_option("--server", globals.server, "a sled's HTTP address")->envname("SUSH_SERVER_URL");
  app.add_option("--key", globals.key, "the signing key file");
  app.add_flag("--json", globals.json_output, "JSON output");
  std::function<int(const Context&)> action;

  auto* keys = app.add_subcommand("keys", "signing keys")->require_subcommand(1);
  auto* keys_new = keys->add_subcommand("new", "a new Ed25519 key pair in a 0600 file");
  std::string name, out;
  keys_new->add_option("NAME", name)->required();
  keys_new->add_option("--out", out, "the key file (default DIR/keys/NAME.key or ./NAME.key)");
  keys_new->add_flag("--json", globals.json_output);
  keys_new->callback([&] { action = [&](const Context& c) { return KeysNew(c, name, out); }; });

  auto* session = app.add_subcommand("session", "support sessions")->require_subcommand(1);
  for (const char* verb : {"start", "stop", "show"}) {
    auto* sub = session->add_subcommand(verb, std::string(verb) + " the session");
    sub->add_flag("--json", globals.json_output);
    sub->callback(
        [&action, verb] { action = [verb](const Context& c) { return SessionCommand(c, verb); }; });
  }
  std::string skip_id;
  auto* skip = session->add_subcommand(
      "skip", "burn a cancelled job's chain position, so the chain moves on");
  skip->add_option("JOB_ID", skip_id, "the cancelled job (codephrase, any case)")->required();
  skip->add_flag("--json", globals.json_output);
  skip->callback(
      [&] { action = [&](const Context& c) { return SessionCommand(c, "skip", skip_id); }; });

  auto* job = app.add_subcommand("job", "jobs")->require_subcommand(1);
  bool wait = false, concurrent = false, full = false;
  std::string target = "*", id, stream = "stdout";
  std::vector<std::string> command;
  int timeout_s = 600, limit = 20, offset = 0;
  auto* job_start = job->add_subcommand("start", "sign and submit a job");
  job_start->add_flag("-w,--wait", wait, "live status until every targeted sled is done");
  job_start->add_option("-T,--target", target, "*, or cubbies, serials, baseboard ids");
  job_start->add_flag("--concurrent", concurrent, "may run beside other jobs");
  job_start->add_option("--timeout-s", timeout_s, "how long -w waits");
  job_start->add_flag("--json", globals.json_output);
  job_start->add_option("COMMAND", command, "the bash command")->required();
  job_start->callback([&] {
    std::string text;
    for (const auto& word : command) text += (text.empty() ? "" : " ") + word;
    action = [&, text](const Context& c) {
      return JobStart(c, text, target, concurrent, wait, timeout_s);
    };
  });
  auto* job_status = job->add_subcommand("status", "a job's status on every sled");
  job_status->add_option("ID", id)->required();
  job_status->add_flag("-w,--wait", wait);
  job_status->add_flag("--full", full);
  job_status->add_option("--timeout-s", timeout_s);
  job_status->add_flag("--json", globals.json_output);
  job_status->callback(
      [&] { action = [&](const Context& c) { return JobStatus(c, id, wait, full, timeout_s); }; });
  auto* job_stop = job->add_subcommand("stop", "stop a job on every sled");
  job_stop->add_option("ID", id)->required();
  job_stop->add_flag("--json", globals.json_output);
  job_stop->callback([&] { action = [&](const Context& c) { return JobStop(c, id); }; });
  auto* job_output = job->add_subcommand("output", "a job's stdout or stderr");
  job_output->add_option("ID", id)->required();
  job_output->add_option("STREAM", stream, "stdout (default) or stderr");
  job_output->add_option("-T,--target", target, "which sled(s)");
  job_output->add_flag("--json", globals.json_output);
  job_output->callback([&] {
    action = [&](const Context& c) {
      return JobOutput(c, id, target == "*" ? "" : target, stream);
    };
  });
  auto* job_history = job->add_subcommand("history", "jobs, newest first");
  job_history->add_option("-l,--limit", limit);
  job_history->add_option("-o,--offset", offset);
  job_history->add_flag("--json", globals.json_output);
  job_history->callback(
      [&] { action = [&](const Context& c) { return JobHistory(c, limit, offset); }; });

  auto* boundary = app.add_subcommand("boundary", "each sled's boundary record and drives");
  boundary->add_option("-T,--target", target, "*, or cubbies, serials, baseboard ids");
  boundary->add_flag("--json", globals.json_output);
  boundary->callback([&] { action = [&](const Context& c) { return Boundary(c, target); }; });

  auto* sled_cmd = app.add_subcommand("sled", "one sled")->require_subcommand(1);
  auto* reset = sled_cmd->add_subcommand(
      "reset",
      "reset an untrusted sled's boundary record (signed; from then on it runs only "
      "jobs submitted after the reset)");
  std::string reset_target;
  reset->add_option("-T,--target", reset_target, "the sled: cubby, serial or baseboard id")
      ->required();
  reset->add_flag("--json", globals.json_output);
  reset->callback([&] { action = [&](const Context& c) { return SledReset(c, reset_target); }; });

  auto* version = app.add_subcommand("version", "client, server and every sled, as the rack");
  version->add_flag("--json", globals.json_output);
  version->callback([&] { action = [&](const Context& c) { return Version(c); }; });

  auto* rack_cmd = app.add_subcommand("rack", "a local rack of sush-server processes");
  rack_cmd->require_subcommand(1);
  int sleds = 4;
  std::string dir, server_bin;
  bool test_admin = false;
  auto* up = rack_cmd->add_subcommand("up", "start N sleds on loopback");
  up->add_option("N", sleds)->required();
  up->add_option("--dir", dir)->required();
  up->add_option("--server-bin", server_bin, "the sush-server binary");
  up->add_flag("--test-admin", test_admin, "enable the servers' /admin endpoints");
  up->add_flag("--json", globals.json_output);
  up->callback([&] {
    action = [&](const Context& c) { return RackUpCommand(c, sleds, dir, server_bin, test_admin); };
  });
  auto* restart = rack_cmd->add_subcommand(
      "restart", "stop one sled and start it again with its flags (data, drives, --cut)");
  std::string restart_target;
  bool kill = false, no_cut = false;
  std::vector<std::string> cut;
  restart->add_option("-T,--target", restart_target, "the sled")->required();
  restart->add_option("--dir", dir, "the rack (default: --rack)");
  restart->add_flag("--kill", kill, "SIGKILL (a crash) instead of SIGTERM");
  restart->add_option("--cut", cut, "replace its --cut flags (a rack up --test-admin)");
  restart->add_flag("--no-cut", no_cut, "drop its --cut flags");
  restart->add_flag("--json", globals.json_output);
  restart->callback([&] {
    action = [&](const Context& c) {
      return RackRestartCommand(c, dir, restart_target, kill, cut, no_cut);
    };
  });
  auto* down = rack_cmd->add_subcommand("down", "stop the rack's sleds");
  down->add_option("--dir", dir)->required();
  down->add_flag("--json", globals.json_output);
  down->callback([&] { action = [&](const Context& c) { return RackDownCommand(c, dir); }; });

  app.add_subcommand("repl", "the interactive shell (also: no command)");

  try {
    parse(app);
  } catch (const CLI::ParseError& e) {
    if (globals.json_output && e.get_exit_code() != 0) {  // a usage error, as JSON too
      std::cout
          << sush_net::ErrorToJson(Error{ErrorCode::kInvalidArgument, e.what(), "", {}}).dump()
          << std::endl;
      return e.get_exit_code();
    }
    return app.exit(e);
  }
  Context ctx{globals, std::nullopt};
  if (!globals.rack_dir.empty()) {
    auto rack = sush::LoadRack(globals.rack_dir);
    if (rack) ctx.rack = std::move(*rack);
  }
  if (action) return action(ctx);
  if (in_repl) return 0;
  return Repl(globals);
}

int Repl(Globals globals) {
  std::string line;
  while (true) {
    std::cout << "sush# " << std::flush;
    if (!std::getline(std::cin, line)) break;
    const auto first = line.find_first_not_of(" \t");
    if (first == std::string::npos) continue;
    if (line.substr(first) == "exit" || line.substr(first) == "quit") break;
    if (line.substr(first) == "help") line = "--help";
    Run(
        globals, [&](CLI::App& app) { app.parse(line, /*program_name_included=*/false); },
        /*in_repl=*/true);
  }
  std::cout << std::endl;
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  // `sush sim ...`: the deterministic rack simulator (docs/sush-simulator.md).
  if (argc > 1 && std::string_view(argv[1]) == "sim") {
    return once::sim::SimCommand(std::vector<std::string>(argv + 2, argv + argc), std::cout,
                                 std::cerr);
  }
  return Run(
      Globals{}, [&](CLI::App& app) { app.parse(argc, argv); }, /*in_repl=*/false);
}
