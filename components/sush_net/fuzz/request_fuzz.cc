// libFuzzer target for the sled API's request decoders (server.h, api.h):
// the bodies of POST /v1/submit (ParseSubmit) and POST /admin/partition
// (ParsePartition), the addresses in them (ParseAddress), and the job ids and
// numbers of GET paths and queries (JobId::Parse, GetJobs). Every input is
// tried as each of them and is either refused with a typed error or decodes
// to a value that the client's own encoding of it decodes to again
// (decode(encode(decode(b))) == decode(b)): JSON allows spacing, escapes and
// member orders, and hex either case, that the client never writes, so
// encode(decode(b)) == b holds only for what the client wrote.
//
// What decodes then goes to a real sled (a SledCore and Sled over a gossip
// Host with no peers, as server_test builds it): the submitted bytes as a
// client's submit, and the input as a request payload signed by the sled's
// trusted key (so the core's checks past the signature are reached too).
// Bad input is answered with a client error (4xx), never 500, and every
// view of the sled (info, session, jobs, the job, boundary) still renders.
// Seeds: components/sush_net/fuzz/corpus/sush_net_request_fuzz (bodies the
// client writes; kept by sush_net_test).

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>
#include <string_view>

#include "once/base/rng.h"
#include "once/sush_net/server.h"

namespace {

using namespace once;
using namespace once::sush_net;
using nlohmann::json;

void Check(bool ok) {
  if (!ok) std::abort();
}

bool Typed(const Error& e) {
  return e.code == ErrorCode::kInvalidArgument || e.code == ErrorCode::kLimitExceeded;
}

class NoRunner final : public rack::JobRunner {
 public:
  Status Start(const rack::JobSpec&) override { return Ok(); }
  Status Stop(const rack::JobId&) override { return Ok(); }
  std::vector<rack::ProcessExited> Poll(std::chrono::milliseconds) override { return {}; }
  size_t running() const override { return 0; }
};

constexpr char kBoard[] = "913-0000019:NET0";

// One fresh sled a call, so that every input is judged alone.
struct Sled {
  SeededRng rng{11};
  rack::KeyPair keys = rack::KeyPair::Generate(rng);
  gossip::Host host{gossip::Replica::Seed(rng)};
  rack::HostPort port{host, {}};
  NoRunner runner;
  TimePoint now = FromUnixMillis(1'700'000'000'000);
  SledFacts facts{kBoard, 0, "fuzz", {"127.0.0.1", 1}, {"127.0.0.1", 2}, now};
  SledNotes notes;
  OutputSink sink = [this](std::vector<rack::Output> outputs) {
    for (const rack::Output& o : outputs) {
      if (const auto* seen = std::get_if<rack::SledErrorSeen>(&o)) notes.Note(seen->error);
    }
  };
  rack::MemoryBoundaryStore drives{rack::BoundaryLoad{rack::BoundaryRecord{}, "empty", "", {}}};
  std::unique_ptr<rack::SledCore> core;
  std::unique_ptr<rack::Sled> sled;

  Sled() {
    rack::TrustedKeys trusted;
    Check(trusted.Add(keys.public_key).has_value());
    core = std::make_unique<rack::SledCore>(
        rack::SledConfig{rack::SledIdentity{kBoard, 0}, "fuzz", trusted, {}, {}}, rng, drives);
    sled = std::make_unique<rack::Sled>(*core, runner, port);
    for (int i = 0; i < 3; ++i) sink(sled->Pump(now));
    StartSession();
  }

  // An active session, the same as server_test's fixture starts (the seeds'
  // job requests name it), so that jobs get past the session check.
  void StartSession() {
    HttpAnswer nonce = PostSessionNonce(*sled, sink);
    Check(nonce.status == 200);
    auto parsed = rack::Nonce::Parse(nonce.body["nonce"].get<std::string>());
    Check(parsed.has_value());
    auto request = rack::Sign(rack::SessionStart{kBoard, *parsed, rack::Nonce{}}, keys);
    Check(request.has_value());
    Check(PostSubmit(*sled, now, SubmitBody(*rack::Encode(rack::Message{*request})).dump(), sink)
              .status == 200);
    for (int i = 0; i < 3; ++i) sink(sled->Pump(now));
  }

  // Submits `body`; a refusal is a client error. Then every view renders.
  void Submit(std::string_view body) {
    HttpAnswer answer = PostSubmit(*sled, now, body, sink);
    Check(answer.status == 200 || (answer.status >= 400 && answer.status < 500));
    Renders(answer);
    for (int i = 0; i < 2; ++i) sink(sled->Pump(now));
    Renders(GetInfo(facts, *core, notes));
    Renders(GetSession(facts, *core, notes));
    HttpAnswer jobs = GetJobs(*core, std::nullopt, std::nullopt);
    Renders(jobs);
    for (const json& job : jobs.body["jobs"]) {
      HttpAnswer one = GetJob(*core, job["job_id"].get<std::string>());
      Check(one.status == 200);
      Renders(one);
    }
    const itc::Version heard =
        host.Read([](const gossip::Replica& replica) { return replica.ceiling(); });
    Renders(GetBoundary(facts, *core, drives, notes, heard));
  }

  // The server sends AnswerText (sush-server); a client must be able to parse it.
  static void Renders(const HttpAnswer& answer) { Check(json::accept(AnswerText(answer))); }
};

void TrySubmit(std::string_view text) {
  auto bytes = ParseSubmit(text);
  if (!bytes) {
    Check(Typed(bytes.error()));
    return;
  }
  const std::string canonical = SubmitBody(*bytes).dump();
  auto again = ParseSubmit(canonical);
  Check(again && *again == *bytes);
  Sled().Submit(text);
}

void TryPartition(std::string_view text) {
  auto peers = ParsePartition(text);
  if (!peers) {
    Check(Typed(peers.error()));
    return;
  }
  auto again = ParsePartition(PartitionBody(*peers).dump());
  Check(again && *again == *peers);
}

void TryAddress(std::string_view text) {
  auto address = ParseAddress(text);
  if (!address) {
    Check(Typed(address.error()));
    return;
  }
  auto again = ParseAddress(address->ToString());
  Check(again && *again == *address);
}

void TryJobId(std::string_view text) {
  auto id = rack::JobId::Parse(text);
  if (!id) {
    Check(Typed(id.error()));
    return;
  }
  auto again = rack::JobId::Parse(id->ToString());
  Check(again && *again == *id);
}

// The input as a request payload, signed by the sled's trusted key.
void TrySigned(std::span<const uint8_t> input) {
  auto payload = rack::DecodePayload(input);
  if (!payload) return;
  Sled sled;
  auto request = rack::Sign(*payload, sled.keys);
  Check(request.has_value());
  auto wire = rack::Encode(rack::Message{*request});
  Check(wire.has_value());
  sled.Submit(SubmitBody(*wire).dump());
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  TrySubmit(text);
  TryPartition(text);
  TryAddress(text);
  TryJobId(text);
  // As a GET path's id and query numbers, on a sled that was never changed.
  static Sled* const idle = new Sled();
  HttpAnswer job = GetJob(*idle->core, text);
  Check(job.status < 500);
  Sled::Renders(job);
  Sled::Renders(GetJobs(*idle->core, text, text));
  TrySigned({data, size});
  return 0;
}
