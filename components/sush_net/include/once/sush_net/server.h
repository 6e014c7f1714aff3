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
#include <string>
#include <string_view>
#include <vector>

#include "once/base/clock.h"
#include "once/base/result.h"
#include "once/rack/sled.h"
#include "once/sush_net/api.h"

namespace once::sush_net {

// Sled errors (ConcurrentSessions, SessionHop, ...) kept for GET /v1/session.
inline constexpr size_t kSledErrorsKept = 16;

struct HttpAnswer {
  int status = 200;
  nlohmann::json body;
};
HttpAnswer ErrorAnswer(const Error& error);
// The answer's body as the HTTP body text: its JSON, with text that is not
// UTF-8 (a signed job's command, a peer's event text) shown with U+FFFD
// instead of failing the whole answer.
std::string AnswerText(const HttpAnswer& answer);

// An answer of raw bytes (job output), or a JSON error.
struct BytesAnswer {
  int status = 200;
  std::string content_type = "application/octet-stream";
  std::string body;
  bool truncated = false;  // cut at kOutputAnswerBytesMax: "X-Sush-Truncated: 1"
};

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
// first. A missing or malformed number is its default (0, 20); limit is at
// most kHistoryPageEntriesMax.
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

// ---- Endpoints that do not touch the sled (no lock needed) ----

// GET /v1/jobs/ID/stdout|stderr from `jobs_dir`/ID/stream.
BytesAnswer GetJobOutput(const std::filesystem::path& jobs_dir, std::string_view id,
                         std::string_view stream, std::string_view baseboard);
// The peers of a POST /admin/partition body: {"peers": ["HOST:PORT", ...]}.
// kInvalidArgument for a body that is not an object, a missing or non-array
// "peers", or an entry that is not an address string.
Result<std::vector<Address>> ParsePartition(std::string_view body);
// POST /admin/partition: with `enabled` (--test-admin), parses the body and
// calls `cut` with the peers (an empty list heals); kNotFound otherwise.
HttpAnswer PostPartition(bool enabled, std::string_view body,
                         const std::function<void(const std::vector<Address>&)>& cut);

}  // namespace once::sush_net
