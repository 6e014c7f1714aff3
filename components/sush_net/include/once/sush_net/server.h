// File: server.h
//
// The HTTP face of a sled: one function per endpoint of api.h, beside the
// client. Each takes what it reads (the sled or its core, under the caller's
// lock; the parts of the request it needs) and returns the answer: an HTTP
// status and a JSON body. No function here knows about sockets or threads;
// the server (apps/sush-server) registers them with cpp-httplib, holds its
// one mutex around every call that touches the sled, and hands the outputs a
// call produced (statuses, sled errors, boundary changes) to its own sink.
//
//   std::lock_guard lock(mu);                     // the sled is not thread-safe
//   HttpAnswer a = PostSubmit(sled, clock.Now(), req.body, [&](auto outputs) { ... });
//   res.status = a.status;
//   res.set_content(a.body.dump(), "application/json");
//
// Errors answer {"error": {"code", "message"}} with HttpStatusOf(code)
// (ErrorToJson); a body that is not a JSON object, or lacks a field an
// endpoint needs, is kInvalidArgument (400).

#pragma once

#include <deque>
#include <filesystem>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "once/base/clock.h"
#include "once/base/result.h"
#include "once/rack/sled.h"
#include "once/sush_net/api.h"
#include "once/sush_net/http_server.h"

namespace once::sush_net {

// Sled errors (ConcurrentSessions, SessionHop, ...) kept for GET /v1/session.
inline constexpr size_t kSledErrorsKept = 16;

struct HttpAnswer {
  int status = 200;
  nlohmann::json body;
};
HttpAnswer ErrorAnswer(const Error& error);
// "2024-05-01T12:00:00Z".
std::string Iso8601(TimePoint t);
// The answer's body as the HTTP body text: its JSON, with text that is not
// UTF-8 (a signed job's command, a peer's event text) shown with U+FFFD
// instead of failing the whole answer.
std::string AnswerText(const HttpAnswer& answer);

// What a sled is, fixed for the life of its process.
struct SledFacts {
  std::string baseboard;
  int cubby = 0;
  std::string build_version;
  Address http;
  Address gossip;
  TimePoint started_at{};  // this process's start (wall clock)
};

// What the server remembers beside the core.
struct SledNotes {
  std::deque<rack::SledError> errors;       // the latest kSledErrorsKept delivered, oldest first
  uint64_t universe_resets = 0;             // universes this process dropped for another's
  std::vector<rack::JobId> orphans_killed;  // the executor's, at this process's start
  void Note(const rack::SledError& error);
};

// Receives the outputs a call on the sled produced (everything a Sled does
// not perform itself: replies, statuses, sled errors, boundary changes).
using OutputSink = std::function<void(std::vector<rack::Output>)>;

// ---- Endpoints (the caller holds the sled's lock) ----

// GET /v1/info.
HttpAnswer GetInfo(const SledFacts& facts, const rack::SledCore& core, const SledNotes& notes);
// GET /v1/session. Without an active session and no session start delivered
// since this process started (a full-rack restart that lost the gossip set,
// or a sled alone), "message" says "no session known since this sled started
// at T".
HttpAnswer GetSession(const SledFacts& facts, const rack::SledCore& core, const SledNotes& notes);
// POST /v1/session/nonce.
HttpAnswer PostSessionNonce(rack::Sled& sled, const OutputSink& sink);
// The encoded message of a POST /v1/submit body {"request": HEX}, at most
// rack::kRequestBytesMax bytes. kInvalidArgument for a body that is not a
// JSON object or lacks a hex "request" string; kLimitExceeded past
// kRequestBodyBytesMax or rack::kRequestBytesMax.
Result<Bytes> ParseSubmit(std::string_view body);
// POST /v1/submit {"request": HEX}: Handle (the core checks and broadcasts),
// then Deliver (the own send at once, so the next job start sees its chain
// position).
HttpAnswer PostSubmit(rack::Sled& sled, TimePoint now, std::string_view body,
                      const OutputSink& sink);
// GET /v1/jobs?offset=N&limit=N: the core's history in delivery order, newest
// first. A missing number is its default (0, 20); one that is not a decimal
// integer of 0 or more is a 400 (InvalidArgument) naming the parameter;
// limit is at most kHistoryPageEntriesMax (a larger one reads that many).
HttpAnswer GetJobs(const rack::SledCore& core, std::optional<std::string_view> offset,
                   std::optional<std::string_view> limit);
// GET /v1/jobs/ID.
HttpAnswer GetJob(const rack::SledCore& core, std::string_view id);
// GET /v1/boundary: the boundary record (BoundaryRecordToJson, null fields
// while untrusted) and beside it "baseboard", "joined_network" (the universe
// the sled is in now), "markers" {"entry": the record's lightcone marker
// (here.marker: entry, flip-flop or hop), "joined": the marker of the joined
// universe's boundary (the one that gates now; differs from "entry" when the
// sled is back in a universe of its map), "birth": this life's}, "gate",
// "active_session", "active_verdict", "trusted", "locker_verdict" (at this
// process's start), "drives" (now), "untrusted_reason" and "reset_nonce"
// (while untrusted), "executions", "skipped", "interrupted" (this life),
// "orphans_killed" (at start), "heard" (the gossip replica's ceiling, ITC
// text: what this sled has heard; `heard`).
HttpAnswer GetBoundary(const SledFacts& facts, const rack::SledCore& core,
                       const rack::BoundaryStore& drives, const SledNotes& notes,
                       const itc::Version& heard);

// ---- Who may read and delete job output ----

// A request over the operator socket (whoever can reach it can read the
// sled's data folder anyway), or one signed by a key the sled trusts
// (VerifyHttpRequest, api.h). kPermissionDenied otherwise.
Status AuthorizeOperator(const HttpRequest& request, const rack::TrustedKeys& trusted,
                         std::string_view baseboard, TimePoint now);

// ---- Job output: reading, retention, purging ----

// GET /v1/jobs/ID/stdout|stderr from `jobs_dir`/ID/stream, streamed (at most
// kOutputAnswerBytesMax; "X-Sush-Truncated: 1" when cut). `authorized` is
// AuthorizeOperator's verdict (its refusal is the answer).
HttpResponse GetJobOutput(const std::filesystem::path& jobs_dir, std::string_view id,
                          std::string_view stream, std::string_view baseboard,
                          const Status& authorized);

// The retention rule of a sled's job output (sush-server flags of the same
// names): a finished job's folder goes once it is older than
// output_age_s_max, and the oldest finished ones go while all folders
// together pass output_total_bytes_max.
struct OutputRetention {
  std::chrono::seconds output_age_s_max{7 * 24 * 3600};
  uint64_t output_total_bytes_max = uint64_t{10} << 30;
};

struct OutputFolder {
  rack::JobId id;
  uint64_t bytes = 0;   // its files
  TimePoint written{};  // the newest of its files' modification times
};
// The job folders of `jobs_dir`, oldest written first (names that are not
// job ids are left alone).
std::vector<OutputFolder> ListOutput(const std::filesystem::path& jobs_dir);

// Why a job's output must stay (nullopt: it may go): its process runs here;
// this sled's status for it is not terminal; its end is not gossiped yet
// (`unshipped`: the server's list of this sled's terminal statuses no peer
// has taken yet); or this sled knows nothing of the job (it cannot tell
// whether its end was ever gossiped: only age removes such a folder). The
// caller holds the sled's lock.
std::optional<std::string> WhyKeepOutput(const rack::SledCore& core,
                                         const std::set<rack::JobId>& unshipped,
                                         const rack::JobId& id);
using KeepOutput = std::function<std::optional<std::string>(const rack::JobId&)>;
// The folders the rule removes: every one older than output_age_s_max that
// `keep` lets go or that is unknown to the sled, then the oldest `keep` lets
// go while the total passes output_total_bytes_max.
std::vector<OutputFolder> RetentionVictims(const std::vector<OutputFolder>& folders, TimePoint now,
                                           const OutputRetention& rule, const KeepOutput& keep);
// Removes one job's folder; its bytes. kNotFound if there is none.
Result<uint64_t> DeleteOutput(const std::filesystem::path& jobs_dir, const rack::JobId& id);

// The jobs a POST /v1/output/purge body names: {"jobs": [ids]} or
// {"finished": true} (nullopt: every folder). kInvalidArgument otherwise
// (at most kPurgeJobsMax ids).
inline constexpr size_t kPurgeJobsMax = 1000;
Result<std::optional<std::vector<rack::JobId>>> ParsePurge(std::string_view body);

// ---- Endpoints that do not touch the sled (no lock needed) ----

// The peers of a POST /admin/partition body: {"peers": ["HOST:PORT", ...]}.
// kInvalidArgument for a body that is not an object, a missing or non-array
// "peers", or an entry that is not an address string.
Result<std::vector<Address>> ParsePartition(std::string_view body);
// POST /admin/partition: with `enabled` (--test-admin), parses the body and
// calls `cut` with the peers (an empty list heals); kNotFound otherwise.
HttpAnswer PostPartition(bool enabled, std::string_view body,
                         const std::function<void(const std::vector<Address>&)>& cut);

}  // namespace once::sush_net
