// The conformance cases. Every case asserts what the EventStore contract
// (event_store.h) promises; the AcquireFenceIf cases follow ADR 0118 D1.

#include "once/store_testing/conformance.h"

#include <atomic>
#include <barrier>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "once/events/envelope.h"
#include "once/events/kinds.h"

namespace once::store_testing {

using events::AppEvent;
using events::Envelope;
using events::Json;
using events::KernelEvent;
using events::KernelKind;
using store::AcquireWithTail;
using store::AppendRequest;
using store::Capability;
using store::ConditionalAcquire;
using store::ExecutionPage;
using store::FenceExpectation;
using store::kToEnd;

// Each backend instantiates the suite; a binary that links the kit only for
// the step scheduler does not.
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(EventStoreConformance);

void EventStoreConformance::SetUp() {
  Result<StoreHarness> h = GetParam().make(StoreConfig{.limits = Limits{}, .clock = &clock_});
  if (!h && h.error().code == ErrorCode::kUnavailable) {
    GTEST_SKIP() << GetParam().name << " unavailable: " << h.error().ToString();
  }
  ASSERT_TRUE(h) << h.error().ToString();
  ASSERT_NE(h->store, nullptr);
  harness_ = std::move(*h);
}

EventStore* EventStoreConformance::MakeStore(const Limits& limits) {
  Result<StoreHarness> h = GetParam().make(StoreConfig{.limits = limits, .clock = &clock_});
  if (!h) {
    ADD_FAILURE() << "factory failed: " << h.error().ToString();
    return nullptr;
  }
  extra_.push_back(std::move(*h));
  return extra_.back().store.get();
}

std::unique_ptr<EventStore> EventStoreConformance::OpenAnother() {
  return harness_.open_another ? harness_.open_another() : nullptr;
}

void PrintTo(const BackendFactory& factory, std::ostream* os) { *os << factory.name; }

std::string NameOf(const testing::TestParamInfo<BackendFactory>& info) { return info.param.name; }

namespace {

// ---- Helpers ---------------------------------------------------------------

#define ONCE_REQUIRE_CAPABILITY(c) \
  if (!Supports(c)) GTEST_SKIP() << "the store does not support " << store::CapabilityName(c)

Envelope Step(int i) { return AppEvent("step.done", Json{{"i", i}}); }

std::vector<Envelope> Steps(int n, int first = 1) {
  std::vector<Envelope> out;
  for (int i = first; i < first + n; ++i) out.push_back(Step(i));
  return out;
}

// A kernel event whose payload has its kind's shape (kernel_payload.h):
// `payload` (an object, or null for {}) plus the members the kind requires
// ("name", "key", "topic"), unless it names them itself. A null payload
// stays null for EXECUTION_RESUMED (a status-only re-open) and the kinds
// that take any payload.
Envelope Kernel(KernelKind kind, Json payload = nullptr) {
  bool any = kind == KernelKind::kExecutionResumed || kind == KernelKind::kExecutionMigrated ||
             kind == KernelKind::kAnnotation;
  if (payload.is_null() && !any) payload = Json::object();
  auto require = [&](const char* member, const char* value) {
    if (payload.is_object() && !payload.contains(member)) payload[member] = value;
  };
  switch (kind) {
    case KernelKind::kStepCompleted:
    case KernelKind::kStepFailed:
      require("name", "step");
      break;
    case KernelKind::kChildStarted:
      require("key", "child");
      break;
    case KernelKind::kMessageConsumed:
      require("topic", "topic");
      break;
    default:
      break;
  }
  return KernelEvent(kind, std::move(payload));
}

AppendRequest Req(std::string id, int64_t next, std::vector<Envelope> events,
                  std::optional<int64_t> fence = 0) {
  return AppendRequest{.execution_id = std::move(id),
                       .expected_next = next,
                       .events = std::move(events),
                       .fence = fence};
}

std::string Describe(const Error& e) { return e.ToString(); }

template <class T>
testing::AssertionResult Fails(const Result<T>& r, ErrorCode code) {
  if (r) return testing::AssertionFailure() << "succeeded; expected " << ErrorCodeName(code);
  if (r.error().code != code) {
    return testing::AssertionFailure()
           << "failed with " << Describe(r.error()) << "; expected " << ErrorCodeName(code);
  }
  return testing::AssertionSuccess();
}

// Appends and returns the new head; a failure is reported and returns -1.
int64_t AppendOk(EventStore& s, const AppendRequest& req) {
  Result<int64_t> r = s.Append(req);
  if (!r) {
    ADD_FAILURE() << "append to " << req.execution_id << " failed: " << Describe(r.error());
    return -1;
  }
  return *r;
}

int64_t HeadOf(EventStore& s, std::string_view id) {
  Result<int64_t> r = s.Head(id);
  if (!r) {
    ADD_FAILURE() << "Head failed: " << Describe(r.error());
    return -1;
  }
  return *r;
}

int64_t FenceOf(EventStore& s, std::string_view id) {
  Result<int64_t> r = s.ReadFence(id);
  if (!r) {
    ADD_FAILURE() << "ReadFence failed: " << Describe(r.error());
    return -1;
  }
  return *r;
}

std::vector<Envelope> Read(EventStore& s, std::string_view id, int64_t first = 1,
                           int64_t last = kToEnd) {
  Result<std::vector<Envelope>> r = s.ReadRange(id, first, last);
  if (!r) {
    ADD_FAILURE() << "ReadRange failed: " << Describe(r.error());
    return {};
  }
  return *r;
}

// Every event, paging past read_events_max.
std::vector<Envelope> ReadAll(EventStore& s, std::string_view id) {
  std::vector<Envelope> out;
  for (int64_t next = 1;;) {
    std::vector<Envelope> page = Read(s, id, next);
    if (page.empty()) return out;
    next = page.back().sequence + 1;
    out.insert(out.end(), page.begin(), page.end());
  }
}

std::vector<int64_t> Seqs(const std::vector<Envelope>& events) {
  std::vector<int64_t> out;
  for (const auto& e : events) out.push_back(e.sequence);
  return out;
}

std::vector<std::string> ListAll(EventStore& s) {
  Result<ExecutionPage> r = s.ListExecutions("", s.limits().list_page_executions_max);
  if (!r) {
    ADD_FAILURE() << "ListExecutions failed: " << Describe(r.error());
    return {};
  }
  return r->execution_ids;
}

ConditionalAcquire AcquireIf(EventStore& s, std::string_view id, int64_t fence, int64_t park_seq) {
  Result<ConditionalAcquire> r = s.AcquireFenceIf(id, {.fence = fence, .park_seq = park_seq});
  if (!r) {
    ADD_FAILURE() << "AcquireFenceIf failed: " << Describe(r.error());
    return {.stale = true, .fence = -1};
  }
  return *r;
}

AcquireWithTail AcquireIfRead(EventStore& s, std::string_view id, int64_t fence, int64_t park_seq,
                              int64_t read_after) {
  Result<AcquireWithTail> r =
      s.AcquireFenceIfReadTail(id, {.fence = fence, .park_seq = park_seq}, read_after);
  if (!r) {
    ADD_FAILURE() << "AcquireFenceIfReadTail failed: " << Describe(r.error());
    return {.acquire = {.stale = true, .fence = -1}};
  }
  return std::move(*r);
}

std::vector<std::string> Kinds(const std::vector<Envelope>& events) {
  std::vector<std::string> out;
  for (const auto& e : events) out.push_back(e.kind.str());
  return out;
}

// Writes STARTED, STEP_COMPLETED and the park (EXECUTION_SUSPENDED) under
// `fence`; the park is sequence 3.
constexpr int64_t kParkSeq = 3;
void Park(EventStore& s, const std::string& id, int64_t fence = 0) {
  AppendOk(s, Req(id, 1,
                  {KernelEvent(KernelKind::kExecutionStarted, {{"input", 1}}, fence),
                   KernelEvent(KernelKind::kStepCompleted, {{"name", "s"}, {"result", 2}}, fence),
                   KernelEvent(KernelKind::kExecutionSuspended, {{"on", "timer"}}, fence)},
                  fence));
}

void ExpectStale(const Error& e, int64_t presented, int64_t current) {
  EXPECT_EQ(e.code, ErrorCode::kStaleFence) << Describe(e);
  const auto* d = e.As<StaleFenceDetail>();
  ASSERT_NE(d, nullptr) << Describe(e);
  EXPECT_EQ(d->presented, presented);
  EXPECT_EQ(d->current, current);
}

void ExpectSequenceConflict(const Error& e, int64_t expected, int64_t given) {
  EXPECT_EQ(e.code, ErrorCode::kSequenceConflict) << Describe(e);
  const auto* d = e.As<SequenceDetail>();
  ASSERT_NE(d, nullptr) << Describe(e);
  EXPECT_EQ(d->expected, expected);
  EXPECT_EQ(d->given, given);
}

void ExpectLimit(const Error& e, std::string_view limit, int64_t value, int64_t max) {
  EXPECT_EQ(e.code, ErrorCode::kLimitExceeded) << Describe(e);
  const auto* d = e.As<LimitDetail>();
  ASSERT_NE(d, nullptr) << Describe(e);
  EXPECT_EQ(d->limit, limit);
  EXPECT_EQ(d->value, value);
  EXPECT_EQ(d->max, max);
}

// A payload whose event (with "{}" metadata) serializes to exactly `bytes`.
Envelope EventOfBytes(size_t bytes) {
  return AppEvent("blob", Json(std::string(bytes - 4, 'x')));  // quotes + "{}"
}

// The handle thread `i` uses: its own when the backend has them.
EventStore& HandleFor(std::vector<std::unique_ptr<EventStore>>& handles, size_t i,
                      EventStore& shared) {
  return handles[i] ? *handles[i] : shared;
}

// ---- Core: appends ---------------------------------------------------------

TEST_P(EventStoreConformance, AppendOneReturnsHeadAndReadsBack) {
  EXPECT_EQ(HeadOf(store(), "ex-1"), 0);
  Result<int64_t> head =
      store().Append(Req("ex-1", 1, {KernelEvent(KernelKind::kExecutionStarted, {{"input", 7}})}));
  ASSERT_TRUE(head) << Describe(head.error());
  EXPECT_EQ(*head, 1);
  EXPECT_EQ(HeadOf(store(), "ex-1"), 1);
  std::vector<Envelope> got = Read(store(), "ex-1");
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].execution_id, "ex-1");
  EXPECT_EQ(got[0].sequence, 1);
  EXPECT_EQ(got[0].kind, "EXECUTION_STARTED");
  EXPECT_EQ(got[0].payload, (Json{{"input", 7}}));
  EXPECT_EQ(got[0].metadata.ToJson(), (Json{{"kernel", true}}));
}

TEST_P(EventStoreConformance, AppendManyNumbersDenselyInOrder) {
  EXPECT_EQ(AppendOk(store(), Req("ex-1", 1, Steps(3, 1))), 3);
  EXPECT_EQ(AppendOk(store(), Req("ex-1", 4, Steps(2, 4))), 5);
  std::vector<Envelope> got = Read(store(), "ex-1");
  ASSERT_EQ(Seqs(got), (std::vector<int64_t>{1, 2, 3, 4, 5}));
  for (int i = 0; i < 5; ++i) EXPECT_EQ(got[i].payload["i"], i + 1);
}

// Every kind reads back as appended: an application's by its name, a kernel
// kind's the same whether it was made from the enum or from its name.
TEST_P(EventStoreConformance, KindsReadBackAsAppended) {
  Envelope by_name = KernelEvent(KernelKind::kStepCompleted, {{"name", "s"}, {"result", 2}});
  by_name.kind = std::string("STEP_COMPLETED");
  AppendOk(store(), Req("ex-1", 1,
                        {KernelEvent(KernelKind::kExecutionStarted, {{"input", 1}}), Step(2),
                         by_name, AppEvent("order.shipped", Json{{"n", 1}})}));
  AppendOk(store(), Req("ex-1", 5, {AppEvent("order.billed", Json{{"n", 2}})}));
  EXPECT_EQ(Kinds(Read(store(), "ex-1")),
            (std::vector<std::string>{"EXECUTION_STARTED", "step.done", "STEP_COMPLETED",
                                      "order.shipped", "order.billed"}));
}

TEST_P(EventStoreConformance, EventCarryingItsOwnSequenceAndIdIsAccepted) {
  Envelope e = Step(1);
  e.sequence = 1;
  e.execution_id = "ex-1";
  EXPECT_EQ(AppendOk(store(), Req("ex-1", 1, {e})), 1);
}

TEST_P(EventStoreConformance, GapIsSequenceConflictAndWritesNothing) {
  AppendOk(store(), Req("ex-1", 1, Steps(2)));
  Result<int64_t> r = store().Append(Req("ex-1", 4, Steps(2, 100)));
  ASSERT_FALSE(r);
  ExpectSequenceConflict(r.error(), 3, 4);
  EXPECT_EQ(HeadOf(store(), "ex-1"), 2);
  EXPECT_EQ(Read(store(), "ex-1").size(), 2u);

  Result<int64_t> fresh = store().Append(Req("ex-new", 2, Steps(1)));
  ASSERT_FALSE(fresh);
  ExpectSequenceConflict(fresh.error(), 1, 2);
  EXPECT_EQ(HeadOf(store(), "ex-new"), 0);
  EXPECT_EQ(ListAll(store()), (std::vector<std::string>{"ex-1"}));
}

TEST_P(EventStoreConformance, DuplicateIsSequenceConflictAndWritesNothing) {
  AppendOk(store(), Req("ex-1", 1, Steps(2)));
  Result<int64_t> r = store().Append(Req("ex-1", 2, Steps(3, 100)));
  ASSERT_FALSE(r);
  ExpectSequenceConflict(r.error(), 3, 2);
  std::vector<Envelope> got = Read(store(), "ex-1");
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[1].payload["i"], 2);  // not overwritten by the refused append
}

// Appends of one event each (PostgreSQL's lone statement, one row each):
// an append at a sequence the log already holds, below its head, or at 1 of
// a log that has rows, is refused with the head and overwrites nothing.
TEST_P(EventStoreConformance, OneEventAppendInsideTheLogIsSequenceConflict) {
  for (int i = 1; i <= 3; ++i) AppendOk(store(), Req("ex-1", i, Steps(1, i)));
  for (int64_t next : {1, 2, 3}) {
    Result<int64_t> r = store().Append(Req("ex-1", next, Steps(1, 100)));
    ASSERT_FALSE(r) << "expected_next " << next;
    ExpectSequenceConflict(r.error(), 4, next);
  }
  std::vector<Envelope> got = Read(store(), "ex-1");
  ASSERT_EQ(Seqs(got), (std::vector<int64_t>{1, 2, 3}));
  for (int i = 0; i < 3; ++i) EXPECT_EQ(got[i].payload["i"], i + 1);
  EXPECT_EQ(AppendOk(store(), Req("ex-1", 4, Steps(1, 4))), 4);
}

TEST_P(EventStoreConformance, MalformedRequestsAreInvalidArgumentAndWriteNothing) {
  Envelope wrong_seq = Step(1);
  wrong_seq.sequence = 5;
  Envelope other_exec = Step(1);
  other_exec.execution_id = "someone-else";
  std::vector<std::pair<std::string, AppendRequest>> cases = {
      {"no events", Req("ex-1", 1, {})},
      {"expected_next 0", Req("ex-1", 0, Steps(1))},
      {"event carries another sequence", Req("ex-1", 1, {wrong_seq})},
      {"event names another execution", Req("ex-1", 1, {other_exec})},
      {"empty kind", Req("ex-1", 1, {AppEvent("", 1)})},
      {"kind with a space", Req("ex-1", 1, {AppEvent("step done", 1)})},
      {"kind with a control character", Req("ex-1", 1, {AppEvent("step\ndone", 1)})},
      {"kind of 129 bytes", Req("ex-1", 1, {AppEvent(std::string(129, 'K'), 1)})},
      {"negative fence", Req("ex-1", 1, Steps(1), -1)},
  };
  for (const auto& [what, req] : cases) {
    SCOPED_TRACE(what);
    EXPECT_TRUE(Fails(store().Append(req), ErrorCode::kInvalidArgument));
  }
  EXPECT_EQ(HeadOf(store(), "ex-1"), 0);
  EXPECT_TRUE(ListAll(store()).empty());
  EXPECT_EQ(AppendOk(store(), Req("ex-1", 1, {AppEvent(std::string(128, 'K'), 1)})), 1);
}

// A kernel event whose payload lacks its kind's shape (kernel_payload.h)
// would make every reader of the log fail on it (issue 15: a fold that
// threw stopped every restart): refused, typed, nothing written, alone in a
// batch. The same shapes with their required members are accepted.
TEST_P(EventStoreConformance, KernelPayloadOfTheWrongShapeIsRefused) {
  auto kernel = [](KernelKind kind, Json payload) { return KernelEvent(kind, std::move(payload)); };
  const std::vector<std::pair<std::string, Envelope>> bad = {
      {"a started payload that is a string", kernel(KernelKind::kExecutionStarted, "order")},
      {"a started payload that is null", kernel(KernelKind::kExecutionStarted, nullptr)},
      {"a started workflow that is a number",
       kernel(KernelKind::kExecutionStarted, {{"workflow", 7}})},
      {"a parent without a key",
       kernel(KernelKind::kExecutionStarted, {{"parent", {{"execution_id", "p"}}}})},
      {"a completion with a null payload", kernel(KernelKind::kExecutionCompleted, nullptr)},
      {"a failure whose error is a string",
       kernel(KernelKind::kExecutionFailed, {{"error", "boom"}})},
      {"a step without a name", kernel(KernelKind::kStepCompleted, {{"value", 1}})},
      {"a step whose name is a number", kernel(KernelKind::kStepFailed, {{"name", 3}})},
      {"a park whose waits is an object",
       kernel(KernelKind::kExecutionSuspended, {{"waits", {{"type", "timer"}}}})},
      {"a timer wait whose wake is a string",
       kernel(KernelKind::kExecutionSuspended,
              {{"call", "sleep"}, {"waits", {{{"type", "timer"}, {"wake_at_ms", "soon"}}}}})},
      {"a resume that is an array", kernel(KernelKind::kExecutionResumed, Json::array())},
      {"a child start without a key", kernel(KernelKind::kChildStarted, {{"child_id", "c"}})},
      {"a consumed message without a topic",
       kernel(KernelKind::kMessageConsumed, {{"message", 1}})},
      {"a kernel kind named by a plain string",
       Envelope{.kind = std::string("EXECUTION_STARTED"), .payload = 5}},
  };
  int n = 0;
  for (const auto& [what, event] : bad) {
    SCOPED_TRACE(what);
    Result<int64_t> r = store().Append(Req("ex-1", 1, {event}));
    EXPECT_TRUE(Fails(r, ErrorCode::kInvalidArgument));
    Result<std::vector<Result<int64_t>>> batch = store().AppendBatch(std::vector<AppendRequest>{
        Req("ex-1", 1, {event}), Req("ok-" + std::to_string(++n), 1, Steps(1))});
    ASSERT_TRUE(batch) << Describe(batch.error());
    EXPECT_TRUE(Fails((*batch)[0], ErrorCode::kInvalidArgument));
    EXPECT_EQ((*batch)[1].value_or(-1), 1);
  }
  EXPECT_EQ(HeadOf(store(), "ex-1"), 0);

  const std::vector<Envelope> good = {
      kernel(KernelKind::kExecutionStarted, {{"workflow", "order"}, {"input", "anything"}}),
      kernel(KernelKind::kStepCompleted, {{"name", "charge"}, {"value", nullptr}}),
      kernel(KernelKind::kExecutionSuspended,
             {{"call", "sleep"}, {"waits", {{{"type", "timer"}, {"wake_at_ms", 5}}}}}),
      kernel(KernelKind::kExecutionResumed, nullptr),
      kernel(KernelKind::kAnnotation, "any JSON at all"),
      kernel(KernelKind::kExecutionCompleted, {{"value", 1}}),
  };
  EXPECT_EQ(AppendOk(store(), Req("ex-1", 1, good)), static_cast<int64_t>(good.size()));
  EXPECT_EQ(Read(store(), "ex-1").size(), good.size());
}

TEST_P(EventStoreConformance, InvalidExecutionIdsAreRefusedAndWriteNothing) {
  const std::vector<std::pair<std::string, std::string>> bad = {
      {"empty", ""},
      {"one byte over the limit", std::string(store().limits().execution_id_bytes_max + 1, 'x')},
      {"newline", "a\nb"},
      {"NUL", std::string("a\0b", 3)},
      {"tab", "a\tb"},
      {"DEL", "a\x7f"},
      {"C1 control", "a\xc2\x85"},
      {"invalid byte", "bad\xff"},
      {"truncated sequence", "bad\xc3"},
      {"overlong encoding", "bad\xc0\xaf"},
      {"surrogate", "bad\xed\xa0\x80"},
  };
  for (const auto& [what, id] : bad) {
    SCOPED_TRACE(what);
    EXPECT_TRUE(Fails(store().Append(Req(id, 1, Steps(1))), ErrorCode::kInvalidArgument));
    EXPECT_TRUE(Fails(store().Head(id), ErrorCode::kInvalidArgument));
    EXPECT_TRUE(Fails(store().ReadRange(id, 1, kToEnd), ErrorCode::kInvalidArgument));
    EXPECT_TRUE(Fails(store().DeleteExecution(id), ErrorCode::kInvalidArgument));
  }
  EXPECT_TRUE(ListAll(store()).empty());

  // At the limit is fine (255 bytes on an undecorated store; a decorator
  // such as the tenant scope may lower it and says so in limits()).
  const size_t id_max = store().limits().execution_id_bytes_max;
  for (const std::string& good : {std::string(id_max, 'x'), std::string("ünïcödé ✓ 注文/7:a")}) {
    EXPECT_EQ(AppendOk(store(), Req(good, 1, Steps(1))), 1);
    EXPECT_EQ(Read(store(), good).size(), 1u);
  }
}

TEST_P(EventStoreConformance, MetadataMustBeAnObject) {
  for (Json metadata : {Json::array({1, 2}), Json("kernel"), Json(3), Json(true)}) {
    SCOPED_TRACE(metadata.dump());
    Envelope e = Step(1);
    e.metadata.extra = metadata;
    EXPECT_TRUE(Fails(store().Append(Req("ex-1", 1, {e})), ErrorCode::kInvalidArgument));
  }
  EXPECT_EQ(HeadOf(store(), "ex-1"), 0);

  Envelope absent = Step(1);
  absent.metadata = {};  // no members reads back as an empty object
  AppendOk(store(), Req("ex-1", 1, {absent}));
  std::vector<Envelope> got = Read(store(), "ex-1");
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].metadata.ToJson(), Json::object());
}

// A member of extra that a field owns would read back as the field (or be
// written twice): refused, nothing written.
TEST_P(EventStoreConformance, MetadataFieldsAreNotRepeatedInExtra) {
  auto with = [](int64_t fence, bool kernel, Json extra) {
    Envelope e = Step(1);
    e.metadata = {.fence = fence, .kernel = kernel, .extra = std::move(extra)};
    return e;
  };
  for (const Envelope& e : {with(0, false, {{"fence", 4}}), with(0, false, {{"kernel", true}}),
                            with(2, false, {{"fence", "two"}}), with(0, true, {{"kernel", 1}}),
                            with(-1, false, nullptr)}) {
    SCOPED_TRACE(e.metadata.extra.dump());
    EXPECT_TRUE(Fails(store().Append(Req("ex-1", 1, {e})), ErrorCode::kInvalidArgument));
  }
  EXPECT_EQ(HeadOf(store(), "ex-1"), 0);
  // The same names with values the fields do not own stay in extra.
  Envelope kept = with(0, false, {{"fence", 0}, {"kernel", "true"}});
  AppendOk(store(), Req("ex-1", 1, {kept}));
  EXPECT_EQ(Read(store(), "ex-1")[0].metadata, kept.metadata);
  EXPECT_EQ(Read(store(), "ex-1")[0].metadata.ToJson(), (Json{{"fence", 0}, {"kernel", "true"}}));
}

TEST_P(EventStoreConformance, JsonRoundTripsExactly) {
  Json nested = {
      {"text", "héllo ✓ 😀 注文"},
      {"escapes", "quote\" backslash\\ newline\n tab\t"},
      {"numbers",
       {0, -1, 42, std::numeric_limits<int64_t>::max(), std::numeric_limits<int64_t>::min(), 2.5,
        -0.125}},
      {"flags", {true, false, nullptr}},
      {"deep", {{"a", {{"b", {{"c", Json::array({Json::object(), Json::array()})}}}}}}},
      {"empty_object", Json::object()},
      {"empty_string", ""},
  };
  std::vector<Json> payloads = {nested,        Json(nullptr),
                                Json(17),      Json("just a string"),
                                Json(-3.75),   Json::array({1, "two", nullptr}),
                                Json::object()};
  std::vector<Envelope> evs;
  for (const Json& p : payloads) evs.push_back(AppEvent("data", p));
  evs.back().metadata = events::Metadata::FromJson(
      {{"kernel", false}, {"fence", 3}, {"trace", {{"id", "ab-12"}, {"n", 1}}}});
  AppendOk(store(), Req("json", 1, evs));
  std::vector<Envelope> got = Read(store(), "json");
  ASSERT_EQ(got.size(), payloads.size());
  for (size_t i = 0; i < payloads.size(); ++i) {
    SCOPED_TRACE(payloads[i].dump());
    EXPECT_EQ(got[i].payload, payloads[i]);
    EXPECT_EQ(got[i].payload.type(), payloads[i].type());
  }
  EXPECT_EQ(got.back().metadata, evs.back().metadata);
  EXPECT_EQ(got.back().metadata.ToJson(),
            (Json{{"kernel", false}, {"fence", 3}, {"trace", {{"id", "ab-12"}, {"n", 1}}}}));
  EXPECT_TRUE(got[1].payload.is_null());
}

TEST_P(EventStoreConformance, TimeIsKeptOrStampedFromTheClock) {
  const int64_t now_ms = clock_.NowUnixMillis();
  Envelope given = Step(2);
  given.time_ms = 42;
  AppendOk(store(), Req("ex-1", 1, {Step(1), given}));
  clock_.Advance(std::chrono::seconds(5));
  AppendOk(store(), Req("ex-1", 3, {Step(3)}));
  std::vector<Envelope> got = Read(store(), "ex-1");
  ASSERT_EQ(got.size(), 3u);
  EXPECT_EQ(got[0].time_ms, now_ms);
  EXPECT_EQ(got[1].time_ms, 42);
  EXPECT_EQ(got[2].time_ms, now_ms + 5000);
}

// ---- Core: reads -----------------------------------------------------------

TEST_P(EventStoreConformance, ReadRangeHonoursBothBounds) {
  AppendOk(store(), Req("ex-1", 1, Steps(10)));
  EXPECT_EQ(Seqs(Read(store(), "ex-1", 3, 5)), (std::vector<int64_t>{3, 4, 5}));
  EXPECT_EQ(Seqs(Read(store(), "ex-1", 8)), (std::vector<int64_t>{8, 9, 10}));
  EXPECT_EQ(Seqs(Read(store(), "ex-1", 10, 10)), (std::vector<int64_t>{10}));
  EXPECT_EQ(Read(store(), "ex-1", 1, 100).size(), 10u);
  EXPECT_TRUE(Read(store(), "ex-1", 11).empty());
  EXPECT_TRUE(Read(store(), "ex-1", 6, 5).empty());
  std::vector<Envelope> one = Read(store(), "ex-1", 4, 4);
  ASSERT_EQ(one.size(), 1u);
  EXPECT_EQ(one[0].payload["i"], 4);
}

TEST_P(EventStoreConformance, UnknownExecutionReadsEmpty) {
  AppendOk(store(), Req("known", 1, Steps(2)));
  EXPECT_TRUE(Read(store(), "unknown").empty());
  EXPECT_EQ(HeadOf(store(), "unknown"), 0);
  EXPECT_TRUE(Read(store(), "know").empty());  // a prefix of an id is another id
}

TEST_P(EventStoreConformance, ReadRangePagesAtReadEventsMax) {
  Limits limits;
  limits.read_events_max = 4;
  EventStore* s = MakeStore(limits);
  ASSERT_NE(s, nullptr);
  AppendOk(*s, Req("ex-1", 1, Steps(10)));
  EXPECT_EQ(Seqs(Read(*s, "ex-1")), (std::vector<int64_t>{1, 2, 3, 4}));
  EXPECT_EQ(Seqs(Read(*s, "ex-1", 5)), (std::vector<int64_t>{5, 6, 7, 8}));
  EXPECT_EQ(Seqs(Read(*s, "ex-1", 9)), (std::vector<int64_t>{9, 10}));
  EXPECT_EQ(Seqs(Read(*s, "ex-1", 2, 3)), (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(ReadAll(*s, "ex-1").size(), 10u);
}

TEST_P(EventStoreConformance, ListExecutionsPagesInByteOrder) {
  // Byte order: 'B' (0x42) < 'a' < "a-1" < 'b' < 'c' < "é" (0xC3 0xA9).
  const std::vector<std::string> sorted = {"B", "a", "a-1", "b", "c", "é"};
  for (const std::string id : {"c", "a-1", "é", "b", "B", "a"})
    AppendOk(store(), Req(id, 1, Steps(1)));
  EXPECT_EQ(ListAll(store()), sorted);

  std::vector<std::vector<std::string>> pages;
  std::string after;
  for (int i = 0; i < 10; ++i) {
    Result<ExecutionPage> page = store().ListExecutions(after, 2);
    ASSERT_TRUE(page) << Describe(page.error());
    pages.push_back(page->execution_ids);
    if (page->next_after.empty()) break;
    EXPECT_EQ(page->next_after, page->execution_ids.back());
    after = page->next_after;
  }
  EXPECT_EQ(pages, (std::vector<std::vector<std::string>>{{"B", "a"}, {"a-1", "b"}, {"c", "é"}}));

  Result<ExecutionPage> from_a = store().ListExecutions("a", 100);
  ASSERT_TRUE(from_a);
  EXPECT_EQ(from_a->execution_ids, (std::vector<std::string>{"a-1", "b", "c", "é"}));
  EXPECT_TRUE(from_a->next_after.empty());
  Result<ExecutionPage> past_end = store().ListExecutions("é", 100);
  ASSERT_TRUE(past_end);
  EXPECT_TRUE(past_end->execution_ids.empty());
  EXPECT_TRUE(past_end->next_after.empty());
}

TEST_P(EventStoreConformance, ListExecutionsCapsTheLimit) {
  Limits limits;
  limits.list_page_executions_max = 3;
  EventStore* s = MakeStore(limits);
  ASSERT_NE(s, nullptr);
  for (const std::string id : {"e1", "e2", "e3", "e4", "e5"}) AppendOk(*s, Req(id, 1, Steps(1)));
  Result<ExecutionPage> page = s->ListExecutions("", 1000);
  ASSERT_TRUE(page) << Describe(page.error());
  EXPECT_EQ(page->execution_ids, (std::vector<std::string>{"e1", "e2", "e3"}));
  EXPECT_EQ(page->next_after, "e3");
  Result<ExecutionPage> rest = s->ListExecutions(page->next_after, 1000);
  ASSERT_TRUE(rest);
  EXPECT_EQ(rest->execution_ids, (std::vector<std::string>{"e4", "e5"}));
  EXPECT_TRUE(rest->next_after.empty());
}

TEST_P(EventStoreConformance, ListExecutionsRefusesALimitOfZero) {
  AppendOk(store(), Req("ex-1", 1, Steps(1)));
  EXPECT_TRUE(Fails(store().ListExecutions("", 0), ErrorCode::kInvalidArgument));
}

TEST_P(EventStoreConformance, ListExecutionsShowsOnlyExecutionsWithEvents) {
  AppendOk(store(), Req("has-events", 1, Steps(1)));
  if (Supports(Capability::kAcquireFence)) {
    ASSERT_TRUE(store().AcquireFence("only-fenced"));
  }
  AppendOk(store(), Req("deleted", 1, Steps(1)));
  ASSERT_TRUE(store().DeleteExecution("deleted"));
  EXPECT_EQ(ListAll(store()), (std::vector<std::string>{"has-events"}));
}

// ---- Core: delete ----------------------------------------------------------

TEST_P(EventStoreConformance, DeleteExecutionRemovesItsEvents) {
  AppendOk(store(), Req("doomed", 1, Steps(3)));
  AppendOk(store(), Req("kept", 1, Steps(2)));
  ASSERT_TRUE(store().DeleteExecution("doomed"));
  EXPECT_EQ(HeadOf(store(), "doomed"), 0);
  EXPECT_TRUE(Read(store(), "doomed").empty());
  EXPECT_EQ(ListAll(store()), (std::vector<std::string>{"kept"}));
  EXPECT_EQ(HeadOf(store(), "kept"), 2);
  // The id can be created again from sequence 1, and only from there.
  ExpectSequenceConflict(store().Append(Req("doomed", 4, Steps(1))).error(), 1, 4);
  EXPECT_EQ(AppendOk(store(), Req("doomed", 1, Steps(1, 50))), 1);
  EXPECT_EQ(Read(store(), "doomed")[0].payload["i"], 50);
  EXPECT_TRUE(store().DeleteExecution("never-existed"));
}

TEST_P(EventStoreConformance, DeleteKeepsAnAcquiredToken) {
  ONCE_REQUIRE_CAPABILITY(Capability::kAcquireFence);
  AppendOk(store(), Req("zombie", 1, Steps(2)));
  ASSERT_EQ(store().AcquireFence("zombie").value_or(-1), 1);
  ASSERT_TRUE(store().DeleteExecution("zombie"));
  EXPECT_EQ(FenceOf(store(), "zombie"), 1);
  // A zombie writer of the re-created id, holding no token, stays fenced out.
  Result<int64_t> r = store().Append(Req("zombie", 1, Steps(1), 0));
  ASSERT_FALSE(r);
  ExpectStale(r.error(), 0, 1);
  EXPECT_EQ(HeadOf(store(), "zombie"), 0);
  EXPECT_EQ(AppendOk(store(), Req("zombie", 1, Steps(1), 1)), 1);
}

TEST_P(EventStoreConformance, DeleteOfAnUnfencedParkLeavesNoToken) {
  ONCE_REQUIRE_CAPABILITY(Capability::kAcquireFence);
  Park(store(), "parked");  // some backends write a token-0 fence row for a park
  ASSERT_TRUE(store().DeleteExecution("parked"));
  EXPECT_EQ(FenceOf(store(), "parked"), 0);
  EXPECT_EQ(AppendOk(store(), Req("parked", 1, Steps(1), 0)), 1);
  EXPECT_EQ(store().AcquireFence("parked").value_or(-1), 1);
}

// ---- Retention: ListEnded, DeleteEnded --------------------------------------

// An execution started, stepped and ended by `kind` at ended_ms.
void End(EventStore& s, const std::string& id, KernelKind kind, int64_t ended_ms) {
  Envelope start = Kernel(KernelKind::kExecutionStarted);
  start.time_ms = ended_ms - 20;
  Envelope step = Step(1);
  step.time_ms = ended_ms - 10;
  Envelope end = Kernel(kind);
  end.time_ms = ended_ms;
  AppendOk(s, Req(id, 1, {start, step, end}));
}

void Running(EventStore& s, const std::string& id, int64_t started_ms) {
  Envelope start = Kernel(KernelKind::kExecutionStarted);
  start.time_ms = started_ms;
  AppendOk(s, Req(id, 1, {start}));
}

// "kind id@ms" of every execution ListEnded lists, page by page; a page
// over `limit` or more than 100 pages fail the case.
std::vector<std::string> ListEndedAll(EventStore& s, int64_t ended_ms_max, size_t limit) {
  std::vector<std::string> out;
  store::EndedCursor after;
  for (int pages = 0; pages < 100; ++pages) {
    Result<store::EndedPage> page = s.ListEnded(ended_ms_max, after, limit);
    if (!page) {
      ADD_FAILURE() << "ListEnded failed: " << Describe(page.error());
      return out;
    }
    EXPECT_LE(page->executions.size(), limit);
    for (const store::EndedExecution& e : page->executions) {
      out.push_back(e.kind + " " + e.execution_id + "@" + std::to_string(e.ended_ms));
    }
    if (!page->next_after) return out;
    after = *page->next_after;
  }
  ADD_FAILURE() << "ListEnded did not end";
  return out;
}

class Ended {
 public:
  explicit Ended(EventStore& s, int64_t base) : base_(base) {
    End(s, "a", KernelKind::kExecutionCompleted, base + 100);
    End(s, "b", KernelKind::kExecutionFailed, base + 50);
    End(s, "c", KernelKind::kExecutionCancelled, base + 100);
    End(s, "d", KernelKind::kExecutionContinued, base + 200);
    End(s, "e", KernelKind::kExecutionCompleted, base + 100);
    Running(s, "run", base);
    End(s, "late", KernelKind::kExecutionCompleted, base + 1'000);
  }
  std::string At(const char* kind, const char* id, int64_t offset) const {
    return std::string(kind) + " " + id + "@" + std::to_string(base_ + offset);
  }

 private:
  int64_t base_;
};

TEST_P(EventStoreConformance, ListEndedPagesEveryEndedExecutionOnceInOrder) {
  int64_t base = clock_.NowUnixMillis();
  Ended ended(store(), base);
  std::vector<std::string> want = {
      ended.At("EXECUTION_CANCELLED", "c", 100), ended.At("EXECUTION_COMPLETED", "a", 100),
      ended.At("EXECUTION_COMPLETED", "e", 100), ended.At("EXECUTION_CONTINUED", "d", 200),
      ended.At("EXECUTION_FAILED", "b", 50)};
  for (size_t limit : {1, 2, 3, 100}) {
    EXPECT_EQ(ListEndedAll(store(), base + 500, limit), want) << "limit " << limit;
  }
  Result<store::EndedPage> one = store().ListEnded(base + 500, {}, 100);
  ASSERT_TRUE(one);
  EXPECT_FALSE(one->next_after.has_value());
}

TEST_P(EventStoreConformance, ListEndedStopsAtTheCutoffInclusive) {
  int64_t base = clock_.NowUnixMillis();
  Ended ended(store(), base);
  EXPECT_EQ(
      ListEndedAll(store(), base + 100, 2),
      (std::vector<std::string>{
          ended.At("EXECUTION_CANCELLED", "c", 100), ended.At("EXECUTION_COMPLETED", "a", 100),
          ended.At("EXECUTION_COMPLETED", "e", 100), ended.At("EXECUTION_FAILED", "b", 50)}));
  EXPECT_TRUE(ListEndedAll(store(), base + 49, 2).empty());
  // An execution ending after the cutoff is not listed, however many arrive.
  for (int i = 0; i < 5; ++i) {
    End(store(), "new-" + std::to_string(i), KernelKind::kExecutionCompleted, base + 101 + i);
  }
  EXPECT_EQ(ListEndedAll(store(), base + 100, 2).size(), 4u);
}

TEST_P(EventStoreConformance, ListEndedRefusesALimitOfZeroAndCapsIt) {
  int64_t base = clock_.NowUnixMillis();
  EXPECT_TRUE(Fails(store().ListEnded(base, {}, 0), ErrorCode::kInvalidArgument));
  Limits small;
  small.list_page_executions_max = 2;
  EventStore* s = MakeStore(small);
  ASSERT_NE(s, nullptr);
  Ended ended(*s, base);
  Result<store::EndedPage> page = s->ListEnded(base + 500, {}, 100);
  ASSERT_TRUE(page);
  EXPECT_EQ(page->executions.size(), 2u);
  EXPECT_TRUE(page->next_after.has_value());
  EXPECT_EQ(ListEndedAll(*s, base + 500, 100).size(), 5u);
}

TEST_P(EventStoreConformance, DeleteEndedDeletesTheEndedAndRefusesTheRestPerExecution) {
  int64_t base = clock_.NowUnixMillis();
  Ended ended(store(), base);
  std::vector<std::string> ids = {"a", "", "run", "late", "ghost", "e"};
  Result<std::vector<Status>> r = store().DeleteEnded(ids, base + 500);
  ASSERT_TRUE(r) << Describe(r.error());
  ASSERT_EQ(r->size(), ids.size());
  EXPECT_TRUE((*r)[0]);
  EXPECT_TRUE(Fails((*r)[1], ErrorCode::kInvalidArgument));  // as DeleteExecution("") is
  EXPECT_TRUE(Fails((*r)[2], ErrorCode::kNotFound));         // still running
  EXPECT_TRUE(Fails((*r)[3], ErrorCode::kNotFound));         // ended after the cutoff
  EXPECT_TRUE(Fails((*r)[4], ErrorCode::kNotFound));         // unknown
  EXPECT_TRUE((*r)[5]);
  EXPECT_EQ((*r)[2].error().subject, "run");
  EXPECT_EQ(HeadOf(store(), "a"), 0);
  EXPECT_EQ(HeadOf(store(), "e"), 0);
  EXPECT_EQ(HeadOf(store(), "run"), 1);
  EXPECT_EQ(HeadOf(store(), "late"), 3);
  EXPECT_EQ(HeadOf(store(), "b"), 3);  // not named
  EXPECT_EQ(ListEndedAll(store(), base + 500, 10),
            (std::vector<std::string>{ended.At("EXECUTION_CANCELLED", "c", 100),
                                      ended.At("EXECUTION_CONTINUED", "d", 200),
                                      ended.At("EXECUTION_FAILED", "b", 50)}));
  EXPECT_EQ(ListAll(store()), (std::vector<std::string>{"b", "c", "d", "late", "run"}));
  // Deleted already: refused, as an unknown id.
  r = store().DeleteEnded(std::vector<std::string>{"a"}, base + 500);
  ASSERT_TRUE(r);
  EXPECT_TRUE(Fails((*r)[0], ErrorCode::kNotFound));
}

TEST_P(EventStoreConformance, DeleteEndedKeepsAnAcquiredTokenAsDeleteExecutionDoes) {
  ONCE_REQUIRE_CAPABILITY(Capability::kAcquireFence);
  int64_t base = clock_.NowUnixMillis();
  End(store(), "zombie", KernelKind::kExecutionCompleted, base);
  Park(store(), "parked");
  Envelope end = Kernel(KernelKind::kExecutionCancelled);
  end.time_ms = base;
  AppendOk(store(), Req("parked", HeadOf(store(), "parked") + 1, {end}));
  ASSERT_EQ(store().AcquireFence("zombie").value_or(-1), 1);
  Result<std::vector<Status>> r =
      store().DeleteEnded(std::vector<std::string>{"zombie", "parked"}, base);
  ASSERT_TRUE(r) << Describe(r.error());
  EXPECT_TRUE((*r)[0]);
  EXPECT_TRUE((*r)[1]);
  EXPECT_EQ(FenceOf(store(), "zombie"), 1);
  EXPECT_EQ(FenceOf(store(), "parked"), 0);
  ExpectStale(store().Append(Req("zombie", 1, Steps(1), 0)).error(), 0, 1);
  EXPECT_EQ(AppendOk(store(), Req("parked", 1, Steps(1), 0)), 1);
}

TEST_P(EventStoreConformance, DeleteEndedOfAnIdStartedAgainIsRefused) {
  int64_t base = clock_.NowUnixMillis();
  End(store(), "again", KernelKind::kExecutionCompleted, base);
  ASSERT_TRUE(store().DeleteExecution("again"));
  Running(store(), "again", base + 1);
  Result<std::vector<Status>> r = store().DeleteEnded(std::vector<std::string>{"again"}, base);
  ASSERT_TRUE(r);
  EXPECT_TRUE(Fails((*r)[0], ErrorCode::kNotFound));
  EXPECT_EQ(HeadOf(store(), "again"), 1);
}

TEST_P(EventStoreConformance, DeleteEndedRefusesTheWholeCallOverItsLimitOrNamingAnIdTwice) {
  int64_t base = clock_.NowUnixMillis();
  Limits small;
  small.delete_batch_executions_max = 2;
  EventStore* s = MakeStore(small);
  ASSERT_NE(s, nullptr);
  Ended ended(*s, base);
  Result<std::vector<Status>> r =
      s->DeleteEnded(std::vector<std::string>{"a", "b", "c"}, base + 500);
  ASSERT_FALSE(r);
  ExpectLimit(r.error(), "delete_batch_executions_max", 3, 2);
  EXPECT_TRUE(Fails(s->DeleteEnded(std::vector<std::string>{"a", "a"}, base + 500),
                    ErrorCode::kInvalidArgument));
  for (const char* id : {"a", "b", "c"}) EXPECT_EQ(HeadOf(*s, id), 3) << id;
  r = s->DeleteEnded(std::vector<std::string>{}, base + 500);
  ASSERT_TRUE(r);
  EXPECT_TRUE(r->empty());
}

// ---- Core: batches ---------------------------------------------------------

TEST_P(EventStoreConformance, AppendBatchCommitsManyExecutions) {
  std::vector<AppendRequest> batch;
  for (int i = 0; i < 20; ++i)
    batch.push_back(Req("b-" + std::to_string(100 + i), 1, Steps(1 + i % 3)));
  Result<std::vector<Result<int64_t>>> r = store().AppendBatch(batch);
  ASSERT_TRUE(r) << Describe(r.error());
  ASSERT_EQ(r->size(), batch.size());
  for (int i = 0; i < 20; ++i) {
    ASSERT_TRUE((*r)[i]) << Describe((*r)[i].error());
    EXPECT_EQ(*(*r)[i], 1 + i % 3);
    EXPECT_EQ(HeadOf(store(), batch[i].execution_id), 1 + i % 3);
  }
  EXPECT_EQ(ListAll(store()).size(), 20u);

  Result<std::vector<Result<int64_t>>> empty = store().AppendBatch({});
  ASSERT_TRUE(empty) << Describe(empty.error());
  EXPECT_TRUE(empty->empty());
}

TEST_P(EventStoreConformance, AppendBatchRefusedRequestsFailAlone) {
  const bool fences = Supports(Capability::kAcquireFence);
  AppendOk(store(), Req("seq", 1, Steps(1)));
  AppendOk(store(), Req("ok-2", 1, Steps(2)));
  if (fences) {
    AppendOk(store(), Req("fenced", 1, Steps(1)));
    ASSERT_EQ(store().AcquireFence("fenced").value_or(-1), 1);
  }
  std::vector<AppendRequest> batch = {
      Req("ok-1", 1, Steps(2)),
      Req("seq", 5, Steps(1)),                       // wrong sequence
      Req("invalid", 1, {AppEvent("bad kind", 1)}),  // invalid
      Req("ok-2", 3, Steps(1, 3)),
  };
  if (fences) batch.push_back(Req("fenced", 2, Steps(1), 0));  // fenced out
  Result<std::vector<Result<int64_t>>> r = store().AppendBatch(batch);
  ASSERT_TRUE(r) << Describe(r.error());
  ASSERT_EQ(r->size(), batch.size());
  EXPECT_EQ((*r)[0].value_or(-1), 2);
  ASSERT_FALSE((*r)[1]);
  ExpectSequenceConflict((*r)[1].error(), 2, 5);
  EXPECT_TRUE(Fails((*r)[2], ErrorCode::kInvalidArgument));
  EXPECT_EQ((*r)[3].value_or(-1), 3);
  if (fences) {
    ASSERT_FALSE((*r)[4]);
    ExpectStale((*r)[4].error(), 0, 1);
    EXPECT_EQ(HeadOf(store(), "fenced"), 1);
  }
  EXPECT_EQ(HeadOf(store(), "ok-1"), 2);
  EXPECT_EQ(HeadOf(store(), "seq"), 1);
  EXPECT_EQ(HeadOf(store(), "invalid"), 0);
  EXPECT_EQ(HeadOf(store(), "ok-2"), 3);
  EXPECT_EQ(Read(store(), "ok-2", 3)[0].payload["i"], 3);
}

TEST_P(EventStoreConformance, AppendBatchNamingAnExecutionTwiceIsRefusedWhole) {
  std::vector<AppendRequest> batch = {Req("a", 1, Steps(1)), Req("b", 1, Steps(1)),
                                      Req("a", 2, Steps(1))};
  EXPECT_TRUE(Fails(store().AppendBatch(batch), ErrorCode::kInvalidArgument));
  EXPECT_EQ(HeadOf(store(), "a"), 0);
  EXPECT_EQ(HeadOf(store(), "b"), 0);
  EXPECT_TRUE(ListAll(store()).empty());
}

// ---- Limits ----------------------------------------------------------------

TEST_P(EventStoreConformance, EventOverEventBytesMaxIsLimitExceeded) {
  Limits limits;
  limits.event_bytes_max = 100;
  EventStore* s = MakeStore(limits);
  ASSERT_NE(s, nullptr);
  EXPECT_EQ(AppendOk(*s, Req("ex-1", 1, {EventOfBytes(100)})), 1);  // exactly at the limit
  Result<int64_t> r = s->Append(Req("ex-1", 2, {Step(2), EventOfBytes(101)}));
  ASSERT_FALSE(r);
  ExpectLimit(r.error(), "event_bytes_max", 101, 100);
  EXPECT_EQ(HeadOf(*s, "ex-1"), 1);
}

// The limit counts metadata as its text: fields, the members of extra
// between and around them, their commas.
TEST_P(EventStoreConformance, EventBytesCountMetadataExactly) {
  Envelope e = AppEvent("blob", Json(""));
  e.metadata = events::Metadata::FromJson({{"a", 1}, {"fence", 3}, {"g", "x"}, {"kernel", true}});
  size_t bytes = e.payload.dump().size() + e.metadata.ToJson().dump().size();
  Limits limits;
  limits.event_bytes_max = bytes;
  EventStore* s = MakeStore(limits);
  ASSERT_NE(s, nullptr);
  EXPECT_EQ(AppendOk(*s, Req("ex-1", 1, {e})), 1);  // exactly at the limit
  limits.event_bytes_max = bytes - 1;
  s = MakeStore(limits);
  ASSERT_NE(s, nullptr);
  Result<int64_t> r = s->Append(Req("ex-2", 1, {e}));
  ASSERT_FALSE(r);
  ExpectLimit(r.error(), "event_bytes_max", static_cast<int64_t>(bytes),
              static_cast<int64_t>(bytes - 1));
}

// [[...[1]...]]: `depth` arrays, built without recursion.
Json Nested(size_t depth) {
  Json json = 1;
  for (size_t i = 0; i < depth; ++i) {
    Json outer = Json::array();
    outer.push_back(std::move(json));
    json = std::move(outer);
  }
  return json;
}

// One event, moved in: a braced list of Envelopes would copy the tree, and a
// copy recurses as deep as the tree goes.
AppendRequest OneEvent(std::string id, Envelope e) {
  AppendRequest req{.execution_id = std::move(id), .expected_next = 1};
  req.events.push_back(std::move(e));
  return req;
}

TEST_P(EventStoreConformance, JsonNestedPastJsonDepthMaxIsLimitExceeded) {
  Limits limits;
  limits.json_depth_max = 16;
  EventStore* s = MakeStore(limits);
  ASSERT_NE(s, nullptr);
  EXPECT_EQ(AppendOk(*s, OneEvent("ex-1", AppEvent("deep", Nested(16)))), 1);  // at the limit
  Result<std::vector<Envelope>> read = s->ReadRange("ex-1", 1, kToEnd);
  ASSERT_TRUE(read) << Describe(read.error());
  ASSERT_EQ(read->size(), 1u);
  EXPECT_EQ((*read)[0].payload, Nested(16));

  Result<int64_t> r = s->Append(OneEvent("ex-2", AppEvent("deep", Nested(17))));
  ASSERT_FALSE(r);
  ExpectLimit(r.error(), "json_depth_max", 17, 16);
  Envelope in_metadata = AppEvent("deep-metadata", Json());
  in_metadata.metadata.extra = Json::object({{"a", Nested(16)}});  // the object is a level
  r = s->Append(OneEvent("ex-3", in_metadata));
  ASSERT_FALSE(r);
  ExpectLimit(r.error(), "json_depth_max", 17, 16);

  std::vector<AppendRequest> batch;
  batch.push_back(OneEvent("ex-4", AppEvent("flat", Json(1))));
  batch.push_back(OneEvent("ex-5", AppEvent("deep", Nested(17))));
  Result<std::vector<Result<int64_t>>> many = s->AppendBatch(batch);
  ASSERT_TRUE(many) << Describe(many.error());
  ASSERT_EQ(many->size(), 2u);
  EXPECT_TRUE((*many)[0]);
  ASSERT_FALSE((*many)[1]);  // the deep request fails alone
  ExpectLimit((*many)[1].error(), "json_depth_max", 17, 16);
  EXPECT_EQ(ListAll(*s), (std::vector<std::string>{"ex-1", "ex-4"}));
}

// 300,000 nested arrays are 600 KB of JSON, under event_bytes_max. The
// stores' size walk and serializer recursed once a level and overflowed the
// stack: the process died on a caller's payload.
TEST_P(EventStoreConformance, HostileNestingIsRefusedNotACrash) {
  EventStore* s = MakeStore(Limits{});
  ASSERT_NE(s, nullptr);
  Result<int64_t> r = s->Append(OneEvent("ex-1", AppEvent("deep", Nested(300'000))));
  ASSERT_FALSE(r);
  auto depth_max = static_cast<int64_t>(s->limits().json_depth_max);
  ExpectLimit(r.error(), "json_depth_max", depth_max + 1, depth_max);
  EXPECT_EQ(ListAll(*s), std::vector<std::string>{});
}

TEST_P(EventStoreConformance, BatchOverBatchBytesMaxIsLimitExceeded) {
  Limits limits;
  limits.event_bytes_max = 100;
  limits.batch_bytes_max = 250;
  EventStore* s = MakeStore(limits);
  ASSERT_NE(s, nullptr);
  EXPECT_EQ(AppendOk(*s, Req("ex-0", 1, {EventOfBytes(100), EventOfBytes(100)})), 2);
  Result<int64_t> one =
      s->Append(Req("ex-1", 1, {EventOfBytes(100), EventOfBytes(100), EventOfBytes(100)}));
  ASSERT_FALSE(one);
  ExpectLimit(one.error(), "batch_bytes_max", 300, 250);

  std::vector<AppendRequest> batch = {Req("ex-1", 1, {EventOfBytes(100)}),
                                      Req("ex-2", 1, {EventOfBytes(100)}),
                                      Req("ex-3", 1, {EventOfBytes(100)})};
  Result<std::vector<Result<int64_t>>> many = s->AppendBatch(batch);
  ASSERT_FALSE(many);
  ExpectLimit(many.error(), "batch_bytes_max", 300, 250);
  EXPECT_EQ(ListAll(*s), (std::vector<std::string>{"ex-0"}));
}

TEST_P(EventStoreConformance, CountLimitsAreLimitExceeded) {
  Limits limits;
  limits.batch_events_max = 5;
  limits.batch_executions_max = 2;
  EventStore* s = MakeStore(limits);
  ASSERT_NE(s, nullptr);
  EXPECT_EQ(AppendOk(*s, Req("ex-0", 1, Steps(5))), 5);
  Result<int64_t> six = s->Append(Req("ex-1", 1, Steps(6)));
  ASSERT_FALSE(six);
  ExpectLimit(six.error(), "batch_events_max", 6, 5);

  std::vector<AppendRequest> events_batch = {Req("ex-1", 1, Steps(3)), Req("ex-2", 1, Steps(3))};
  Result<std::vector<Result<int64_t>>> r1 = s->AppendBatch(events_batch);
  ASSERT_FALSE(r1);
  ExpectLimit(r1.error(), "batch_events_max", 6, 5);

  std::vector<AppendRequest> wide = {Req("ex-1", 1, Steps(1)), Req("ex-2", 1, Steps(1)),
                                     Req("ex-3", 1, Steps(1))};
  Result<std::vector<Result<int64_t>>> r2 = s->AppendBatch(wide);
  ASSERT_FALSE(r2);
  ExpectLimit(r2.error(), "batch_executions_max", 3, 2);
  EXPECT_EQ(ListAll(*s), (std::vector<std::string>{"ex-0"}));
}

TEST_P(EventStoreConformance, ExecutionIdBytesMaxIsHonoured) {
  Limits limits;
  limits.execution_id_bytes_max = 8;
  EventStore* s = MakeStore(limits);
  ASSERT_NE(s, nullptr);
  EXPECT_EQ(AppendOk(*s, Req("12345678", 1, Steps(1))), 1);
  EXPECT_TRUE(Fails(s->Append(Req("123456789", 1, Steps(1))), ErrorCode::kInvalidArgument));
  EXPECT_EQ(ListAll(*s), (std::vector<std::string>{"12345678"}));
}

// ---- Fences ----------------------------------------------------------------

TEST_P(EventStoreConformance, UnsupportedCapabilitiesAnswerUnsupported) {
  int refused = 0;
  AppendRequest req = Req("ex-1", 1, Steps(1));
  auto check = [&](Capability c, ErrorCode got) {
    if (Supports(c)) return;
    ++refused;
    EXPECT_EQ(got, ErrorCode::kUnsupported) << store::CapabilityName(c);
  };
  auto code = [](const auto& r) { return r ? ErrorCode::kInternal : r.error().code; };
  check(Capability::kAcquireFence, code(store().AcquireFence("ex-1")));
  check(Capability::kAcquireFence, code(store().ReadFence("ex-1")));
  check(Capability::kAcquireFenceIf, code(store().AcquireFenceIf("ex-1", {})));
  check(Capability::kAcquireFenceIfReadTail, code(store().AcquireFenceIfReadTail("ex-1", {}, 0)));
  check(Capability::kAppendIfUnchanged, code(store().AppendIfUnchanged(req, 0)));
  check(Capability::kCopyPrefix, code(store().CopyPrefix("ex-1", "ex-2", 1)));
  check(Capability::kTruncatePrefixKeeping, code(store().TruncatePrefixKeeping("ex-1", 1)));
  int ran = 0;
  auto work = [&](store::SqlTransaction&) -> Result<AppendRequest> {
    ++ran;
    return req;
  };
  check(Capability::kTransaction, code(store().AppendInTransaction("ex-1", work)));
  if (!Supports(Capability::kTransaction)) {
    EXPECT_EQ(ran, 0);  // refused before any work
    EXPECT_EQ(HeadOf(store(), "ex-1"), 0);
  }
  if (refused == 0) GTEST_SKIP() << "the store supports every capability";
}

TEST_P(EventStoreConformance, AcquireFenceCountsUpFromOne) {
  ONCE_REQUIRE_CAPABILITY(Capability::kAcquireFence);
  EXPECT_EQ(FenceOf(store(), "ex-1"), 0);
  EXPECT_EQ(store().AcquireFence("ex-1").value_or(-1), 1);  // no events needed
  EXPECT_EQ(store().AcquireFence("ex-1").value_or(-1), 2);
  EXPECT_EQ(FenceOf(store(), "ex-1"), 2);
  EXPECT_EQ(FenceOf(store(), "ex-2"), 0);  // tokens are per execution
  EXPECT_TRUE(Fails(store().AcquireFence(""), ErrorCode::kInvalidArgument));
  EXPECT_TRUE(Fails(store().ReadFence("bad\xff"), ErrorCode::kInvalidArgument));
}

TEST_P(EventStoreConformance, OldHolderIsFencedOut) {
  ONCE_REQUIRE_CAPABILITY(Capability::kAcquireFence);
  AppendOk(store(), Req("ex-1", 1, Steps(1)));
  ASSERT_EQ(store().AcquireFence("ex-1").value_or(-1), 1);
  EXPECT_EQ(AppendOk(store(), Req("ex-1", 2, Steps(1, 2), 1)), 2);
  ASSERT_EQ(store().AcquireFence("ex-1").value_or(-1), 2);

  Result<int64_t> old_holder = store().Append(Req("ex-1", 3, Steps(1, 3), 1));
  ASSERT_FALSE(old_holder);
  ExpectStale(old_holder.error(), 1, 2);
  Result<int64_t> no_token = store().Append(Req("ex-1", 3, Steps(1, 3), 0));
  ASSERT_FALSE(no_token);
  ExpectStale(no_token.error(), 0, 2);
  EXPECT_EQ(HeadOf(store(), "ex-1"), 2);
  EXPECT_EQ(Read(store(), "ex-1").size(), 2u);

  EXPECT_EQ(AppendOk(store(), Req("ex-1", 3, Steps(1, 3), 2)), 3);
  EXPECT_EQ(FenceOf(store(), "ex-1"), 2);  // appending never moves the token
}

TEST_P(EventStoreConformance, StaleFenceIsCheckedBeforeTheSequence) {
  ONCE_REQUIRE_CAPABILITY(Capability::kAcquireFence);
  AppendOk(store(), Req("ex-1", 1, Steps(2)));
  ASSERT_EQ(store().AcquireFence("ex-1").value_or(-1), 1);
  // A fenced-out writer learns it is fenced out, whatever sequence it tried.
  Result<int64_t> r = store().Append(Req("ex-1", 2, Steps(1), 0));
  ASSERT_FALSE(r);
  ExpectStale(r.error(), 0, 1);
}

TEST_P(EventStoreConformance, UnguardedAppendIsNeverFencedOut) {
  ONCE_REQUIRE_CAPABILITY(Capability::kAcquireFence);
  Park(store(), "ex-1");
  ASSERT_EQ(store().AcquireFence("ex-1").value_or(-1), 1);
  ASSERT_EQ(store().AcquireFence("ex-1").value_or(-1), 2);
  Envelope denied = Kernel(KernelKind::kExecutionDenied, {{"reason", "not-allowed"}});
  EXPECT_EQ(AppendOk(store(), Req("ex-1", 4, {denied}, std::nullopt)), 4);
  EXPECT_EQ(FenceOf(store(), "ex-1"), 2);
  EXPECT_EQ(Read(store(), "ex-1", 4)[0].kind, "EXECUTION_DENIED");
}

// ---- AcquireFenceIf (ADR 0118 D1) ------------------------------------------

TEST_P(EventStoreConformance, AcquireFenceIfTakesTheNextTokenAndFencesTheOldHolder) {
  ONCE_REQUIRE_CAPABILITY(Capability::kAcquireFenceIf);
  Park(store(), "ex-1");
  EXPECT_EQ(FenceOf(store(), "ex-1"), 0);
  ConditionalAcquire first = AcquireIf(store(), "ex-1", 0, kParkSeq);  // first-ever acquire
  EXPECT_FALSE(first.stale);
  EXPECT_EQ(first.fence, 1);
  EXPECT_EQ(FenceOf(store(), "ex-1"), 1);
  Result<int64_t> zero_holder = store().Append(Req("ex-1", 4, Steps(1), 0));
  ASSERT_FALSE(zero_holder);
  ExpectStale(zero_holder.error(), 0, 1);

  ConditionalAcquire second = AcquireIf(store(), "ex-1", 1, kParkSeq);
  EXPECT_FALSE(second.stale);
  EXPECT_EQ(second.fence, 2);
  Result<int64_t> old_holder = store().Append(
      Req("ex-1", 4, {KernelEvent(KernelKind::kExecutionResumed, {{"v", 1}}, 1)}, 1));
  ASSERT_FALSE(old_holder);
  ExpectStale(old_holder.error(), 1, 2);
  EXPECT_EQ(HeadOf(store(), "ex-1"), kParkSeq);
  EXPECT_EQ(AppendOk(store(), Req("ex-1", 4,
                                  {KernelEvent(KernelKind::kExecutionResumed, {{"v", 2}}, 2)}, 2)),
            4);
}

TEST_P(EventStoreConformance, AcquireFenceIfWithAMovedTokenIsStaleAndChangesNothing) {
  ONCE_REQUIRE_CAPABILITY(Capability::kAcquireFenceIf);
  Park(store(), "ex-1");
  ASSERT_FALSE(AcquireIf(store(), "ex-1", 0, kParkSeq).stale);  // a dead acquirer: token 1
  ConditionalAcquire moved = AcquireIf(store(), "ex-1", 0, kParkSeq);
  EXPECT_TRUE(moved.stale);
  EXPECT_EQ(moved.fence, 1);
  EXPECT_EQ(FenceOf(store(), "ex-1"), 1);
  ConditionalAcquire ahead = AcquireIf(store(), "ex-1", 7, kParkSeq);  // a token never issued
  EXPECT_TRUE(ahead.stale);
  EXPECT_EQ(ahead.fence, 1);
  EXPECT_EQ(FenceOf(store(), "ex-1"), 1);
  // The retry with the returned token, same park, wins (D2).
  ConditionalAcquire retry = AcquireIf(store(), "ex-1", moved.fence, kParkSeq);
  EXPECT_FALSE(retry.stale);
  EXPECT_EQ(retry.fence, 2);
  EXPECT_EQ(HeadOf(store(), "ex-1"), kParkSeq);  // acquiring appends nothing
}

TEST_P(EventStoreConformance, AcquireFenceIfEightConcurrentCallersOneWinner) {
  ONCE_REQUIRE_CAPABILITY(Capability::kAcquireFenceIf);
  constexpr size_t kCallers = 8;
  constexpr int kRounds = 12;
  std::vector<std::unique_ptr<EventStore>> handles;
  for (size_t i = 0; i < kCallers; ++i) handles.push_back(OpenAnother());
  for (int round = 0; round < kRounds; ++round) {
    SCOPED_TRACE("round " + std::to_string(round));
    const std::string id = "contended-" + std::to_string(round);
    Park(store(), id);
    std::vector<Result<ConditionalAcquire>> results(kCallers, ConditionalAcquire{});
    std::atomic<size_t> ready{0};
    std::vector<std::thread> threads;
    for (size_t i = 0; i < kCallers; ++i) {
      threads.emplace_back([&, i] {
        ready.fetch_add(1);
        while (ready.load() < kCallers) std::this_thread::yield();
        results[i] = HandleFor(handles, i, store()).AcquireFenceIf(id, {0, kParkSeq});
      });
    }
    for (auto& t : threads) t.join();
    int winners = 0;
    for (const auto& r : results) {
      ASSERT_TRUE(r) << Describe(r.error());
      if (!r->stale) ++winners;
      EXPECT_EQ(r->fence, 1);  // the winner's new token, or the current one it moved to
    }
    EXPECT_EQ(winners, 1);
    EXPECT_EQ(FenceOf(store(), id), 1);
  }
}

struct KindCase {
  std::string what;
  Envelope event;
  std::optional<int64_t> fence;  // the answer's guard; kHolder = the acquired token
};
constexpr int64_t kHolder = -100;

std::vector<KindCase> AnsweringCases() {
  Envelope unstamped_resume = AppEvent("EXECUTION_RESUMED", {{"v", 1}});
  Envelope stamped_unknown = AppEvent("EXECUTION_REWOUND", {{"to", 2}});
  stamped_unknown.metadata =
      events::Metadata::FromJson({{"kernel", true}});  // a kernel kind from a newer node
  return {
      {"EXECUTION_RESUMED", Kernel(KernelKind::kExecutionResumed, {{"value", 1}}), kHolder},
      {"EXECUTION_RESUMED with a null payload", Kernel(KernelKind::kExecutionResumed), kHolder},
      {"EXECUTION_RESUMED without the kernel stamp", unstamped_resume, kHolder},
      {"EXECUTION_SUSPENDED", Kernel(KernelKind::kExecutionSuspended, {{"on", "child"}}), kHolder},
      {"EXECUTION_COMPLETED", Kernel(KernelKind::kExecutionCompleted, {{"out", 1}}), kHolder},
      {"EXECUTION_FAILED", Kernel(KernelKind::kExecutionFailed, {{"error", {{"code", "x"}}}}),
       kHolder},
      {"EXECUTION_CANCELLED", Kernel(KernelKind::kExecutionCancelled), kHolder},
      {"EXECUTION_CONTINUED", Kernel(KernelKind::kExecutionContinued, {{"next", "y"}}), kHolder},
      {"an unknown kind stamped kernel: true", stamped_unknown, kHolder},
      {"an unfenced EXECUTION_RESUMED", Kernel(KernelKind::kExecutionResumed), std::nullopt},
  };
}

std::vector<KindCase> IgnorableCases() {
  auto app = [](std::string kind, Json metadata) {
    Envelope e = AppEvent(std::move(kind), {{"x", 1}});
    e.metadata = events::Metadata::FromJson(std::move(metadata));
    return e;
  };
  return {
      {"an unfenced EXECUTION_DENIED", Kernel(KernelKind::kExecutionDenied), std::nullopt},
      {"EXECUTION_DENIED", Kernel(KernelKind::kExecutionDenied), kHolder},
      {"OUTCOME_RECORDED", Kernel(KernelKind::kOutcomeRecorded, {{"o", 1}}), kHolder},
      {"STEP_FAILED", Kernel(KernelKind::kStepFailed, {{"error", {{"code", "e"}}}}), kHolder},
      {"MESSAGE_CONSUMED", Kernel(KernelKind::kMessageConsumed, {{"m", 1}}), kHolder},
      {"EXECUTION_MIGRATED", Kernel(KernelKind::kExecutionMigrated), kHolder},
      {"STEP_COMPLETED", Kernel(KernelKind::kStepCompleted, {{"r", 1}}), kHolder},
      {"ANNOTATION", Kernel(KernelKind::kAnnotation, {{"note", "hi"}}), kHolder},
      {"CHILD_STARTED", Kernel(KernelKind::kChildStarted, {{"child", "c"}}), kHolder},
      {"an app event", app("order.shipped", Json::object()), kHolder},
      {"an unfenced app event", app("order.shipped", Json::object()), std::nullopt},
      {"an unknown kind without a stamp", app("EXECUTION_REWOUND", Json::object()), kHolder},
      {"an unknown kind stamped \"true\"", app("EXECUTION_REWOUND", {{"kernel", "true"}}), kHolder},
      {"an unknown kind stamped 1", app("EXECUTION_REWOUND", {{"kernel", 1}}), kHolder},
      {"an unknown kind stamped false", app("EXECUTION_REWOUND", {{"kernel", false}}), kHolder},
  };
}

// Parks, lets a resumer take token 1, appends `c.event` past the park, then
// asks a rival's AcquireFenceIf({1, park}).
ConditionalAcquire RivalAfter(EventStore& s, const std::string& id, const KindCase& c) {
  Park(s, id);
  ConditionalAcquire resumer = AcquireIf(s, id, 0, kParkSeq);
  EXPECT_FALSE(resumer.stale);
  std::optional<int64_t> fence = c.fence == kHolder ? std::optional<int64_t>(1) : std::nullopt;
  EXPECT_EQ(AppendOk(s, Req(id, kParkSeq + 1, {c.event}, fence)), kParkSeq + 1);
  return AcquireIf(s, id, 1, kParkSeq);
}

TEST_P(EventStoreConformance, AcquireFenceIfIsStaleForEachAnsweringKindPastThePark) {
  ONCE_REQUIRE_CAPABILITY(Capability::kAcquireFenceIf);
  int n = 0;
  for (const KindCase& c : AnsweringCases()) {
    SCOPED_TRACE(c.what);
    const std::string id = "answered-" + std::to_string(n++);
    ConditionalAcquire rival = RivalAfter(store(), id, c);
    EXPECT_TRUE(rival.stale);
    EXPECT_EQ(rival.fence, 1);
    EXPECT_EQ(FenceOf(store(), id), 1);  // unchanged: the resumer's body is not fenced out
  }
}

TEST_P(EventStoreConformance, AcquireFenceIfIgnoresIgnorableKindsPastThePark) {
  ONCE_REQUIRE_CAPABILITY(Capability::kAcquireFenceIf);
  int n = 0;
  for (const KindCase& c : IgnorableCases()) {
    SCOPED_TRACE(c.what);
    const std::string id = "ignored-" + std::to_string(n++);
    ConditionalAcquire rival = RivalAfter(store(), id, c);
    EXPECT_FALSE(rival.stale);
    EXPECT_EQ(rival.fence, 2);
    EXPECT_EQ(FenceOf(store(), id), 2);
  }
  // All of them at once, at token 0 (never acquired).
  Park(store(), "all-ignorable");
  std::vector<Envelope> tail;
  for (const KindCase& c : IgnorableCases()) tail.push_back(c.event);
  AppendOk(store(), Req("all-ignorable", kParkSeq + 1, tail, std::nullopt));
  ConditionalAcquire r = AcquireIf(store(), "all-ignorable", 0, kParkSeq);
  EXPECT_FALSE(r.stale);
  EXPECT_EQ(r.fence, 1);
}

TEST_P(EventStoreConformance, AcquireFenceIfIgnoresAnswersAtOrBeforeThePark) {
  ONCE_REQUIRE_CAPABILITY(Capability::kAcquireFenceIf);
  // STARTED(1) SUSPENDED(2) RESUMED(3) STEP_COMPLETED(4) SUSPENDED(5) DENIED(6)
  AppendOk(store(),
           Req("ex-1", 1,
               {Kernel(KernelKind::kExecutionStarted), Kernel(KernelKind::kExecutionSuspended),
                Kernel(KernelKind::kExecutionResumed), Kernel(KernelKind::kStepCompleted),
                Kernel(KernelKind::kExecutionSuspended), Kernel(KernelKind::kExecutionDenied)}));
  ConditionalAcquire earlier_park = AcquireIf(store(), "ex-1", 0, 2);  // answered at 3
  EXPECT_TRUE(earlier_park.stale);
  EXPECT_EQ(earlier_park.fence, 0);
  ConditionalAcquire before_answer = AcquireIf(store(), "ex-1", 0, 4);  // the park at 5 answers
  EXPECT_TRUE(before_answer.stale);
  EXPECT_EQ(FenceOf(store(), "ex-1"), 0);
  ConditionalAcquire latest = AcquireIf(store(), "ex-1", 0, 5);
  EXPECT_FALSE(latest.stale);
  EXPECT_EQ(latest.fence, 1);
}

TEST_P(EventStoreConformance, AcquireFenceIfIsNotHeadBased) {
  ONCE_REQUIRE_CAPABILITY(Capability::kAcquireFenceIf);
  // A fenced park followed by an unfenced denial: the head moved, the token
  // and the park did not, so the legitimate resumer still wins.
  AppendOk(store(), Req("ex-1", 1, {Kernel(KernelKind::kExecutionStarted)}));
  ConditionalAcquire runner = AcquireIf(store(), "ex-1", 0, 1);
  ASSERT_FALSE(runner.stale);
  ASSERT_EQ(runner.fence, 1);
  AppendOk(store(),
           Req("ex-1", 2, {KernelEvent(KernelKind::kExecutionSuspended, Json::object(), 1)}, 1));
  AppendOk(store(), Req("ex-1", 3, {Kernel(KernelKind::kExecutionDenied)}, std::nullopt));
  EXPECT_EQ(HeadOf(store(), "ex-1"), 3);
  ConditionalAcquire resumer = AcquireIf(store(), "ex-1", 1, 2);
  EXPECT_FALSE(resumer.stale);
  EXPECT_EQ(resumer.fence, 2);
}

TEST_P(EventStoreConformance, AcquireFenceIfRefusesBadInput) {
  ONCE_REQUIRE_CAPABILITY(Capability::kAcquireFenceIf);
  Park(store(), "ex-1");
  EXPECT_TRUE(Fails(store().AcquireFenceIf("", {0, 1}), ErrorCode::kInvalidArgument));
  EXPECT_TRUE(Fails(store().AcquireFenceIf("ex-1", {-1, 1}), ErrorCode::kInvalidArgument));
  EXPECT_TRUE(Fails(store().AcquireFenceIf("ex-1", {0, -1}), ErrorCode::kInvalidArgument));
  EXPECT_EQ(FenceOf(store(), "ex-1"), 0);
}

// ---- AcquireFenceIfReadTail -------------------------------------------------

TEST_P(EventStoreConformance, AcquireFenceIfReadTailReturnsTheTailUnderTheNewToken) {
  ONCE_REQUIRE_CAPABILITY(Capability::kAcquireFenceIfReadTail);
  EXPECT_TRUE(Supports(Capability::kAcquireFenceIf));  // it is that acquire, plus a read
  Park(store(), "ex-1");
  // An ignorable append past the park: no refusal, and the tail carries it.
  AppendOk(store(),
           Req("ex-1", kParkSeq + 1, {Kernel(KernelKind::kExecutionDenied)}, std::nullopt));
  AcquireWithTail got = AcquireIfRead(store(), "ex-1", 0, kParkSeq, kParkSeq);
  EXPECT_FALSE(got.acquire.stale);
  EXPECT_EQ(got.acquire.fence, 1);
  EXPECT_EQ(FenceOf(store(), "ex-1"), 1);
  EXPECT_EQ(got.tail, Read(store(), "ex-1", kParkSeq + 1));
  EXPECT_EQ(Kinds(got.tail), (std::vector<std::string>{"EXECUTION_DENIED"}));
  // read_after 0 is the whole log; at the head, nothing.
  AcquireWithTail whole = AcquireIfRead(store(), "ex-1", 1, kParkSeq, 0);
  EXPECT_FALSE(whole.acquire.stale);
  EXPECT_EQ(whole.acquire.fence, 2);
  EXPECT_EQ(whole.tail, Read(store(), "ex-1"));
  AcquireWithTail none = AcquireIfRead(store(), "ex-1", 2, kParkSeq, kParkSeq + 1);
  EXPECT_FALSE(none.acquire.stale);
  EXPECT_TRUE(none.tail.empty());
  // The token fences the old holder exactly as AcquireFenceIf's does.
  Result<int64_t> old_holder = store().Append(Req("ex-1", kParkSeq + 2, Steps(1), 2));
  ASSERT_FALSE(old_holder);
  ExpectStale(old_holder.error(), 2, 3);
}

TEST_P(EventStoreConformance, AcquireFenceIfReadTailWhenStaleChangesNothingAndShowsTheAnswer) {
  ONCE_REQUIRE_CAPABILITY(Capability::kAcquireFenceIfReadTail);
  Park(store(), "ex-1");
  ASSERT_FALSE(AcquireIf(store(), "ex-1", 0, kParkSeq).stale);  // a resumer: token 1
  AppendOk(store(),
           Req("ex-1", kParkSeq + 1, {KernelEvent(KernelKind::kExecutionResumed, {}, 1)}, 1));
  AcquireWithTail rival = AcquireIfRead(store(), "ex-1", 0, kParkSeq, kParkSeq);
  EXPECT_TRUE(rival.acquire.stale);
  EXPECT_EQ(rival.acquire.fence, 1);
  EXPECT_EQ(FenceOf(store(), "ex-1"), 1);
  EXPECT_EQ(Kinds(rival.tail), (std::vector<std::string>{"EXECUTION_RESUMED"}));
  EXPECT_EQ(HeadOf(store(), "ex-1"), kParkSeq + 1);
}

TEST_P(EventStoreConformance, AcquireFenceIfReadTailPagesAtReadEventsMax) {
  ONCE_REQUIRE_CAPABILITY(Capability::kAcquireFenceIfReadTail);
  Limits limits;
  limits.read_events_max = 4;
  EventStore* s = MakeStore(limits);
  ASSERT_NE(s, nullptr);
  Park(*s, "ex-1");
  AppendOk(*s, Req("ex-1", kParkSeq + 1, Steps(6), std::nullopt));  // head 9
  AcquireWithTail got = AcquireIfRead(*s, "ex-1", 0, kParkSeq, 1);
  EXPECT_FALSE(got.acquire.stale);
  EXPECT_EQ(Seqs(got.tail), (std::vector<int64_t>{2, 3, 4, 5}));  // exactly the limit
  EXPECT_EQ(Seqs(Read(*s, "ex-1", 6)), (std::vector<int64_t>{6, 7, 8, 9}));
}

// The batch answers each request as its own call would, in request order;
// a bad request fails alone; a second request of one execution sees the
// first's bump.
TEST_P(EventStoreConformance, AcquireFencesIfReadTailAnswersEachRequestAsItsOwnCall) {
  if (!Supports(Capability::kAcquireFenceIfReadTail)) {
    std::vector<store::AcquireIfRead> one = {{.execution_id = "ex-1", .expect = {0, kParkSeq}}};
    std::vector<Result<AcquireWithTail>> got = store().AcquireFencesIfReadTail(one);
    ASSERT_EQ(got.size(), 1u);
    EXPECT_TRUE(Fails(got[0], ErrorCode::kUnsupported));
    return;
  }
  EXPECT_TRUE(store().AcquireFencesIfReadTail({}).empty());
  Park(store(), "ex-1");
  Park(store(), "ex-2");
  Park(store(), "ex-3");
  ASSERT_FALSE(AcquireIf(store(), "ex-2", 0, kParkSeq).stale);  // a rival answers ex-2
  AppendOk(store(),
           Req("ex-2", kParkSeq + 1, {KernelEvent(KernelKind::kExecutionResumed, {}, 1)}, 1));
  std::vector<store::AcquireIfRead> batch = {
      {.execution_id = "ex-1", .expect = {0, kParkSeq}, .read_after = 0},
      {.execution_id = "ex-2", .expect = {0, kParkSeq}, .read_after = kParkSeq},
      {.execution_id = "", .expect = {0, kParkSeq}},
      {.execution_id = "ex-3", .expect = {0, kParkSeq}, .read_after = kParkSeq},
      {.execution_id = "ex-1", .expect = {0, kParkSeq}, .read_after = kParkSeq},
      {.execution_id = "ex-3", .expect = {-1, kParkSeq}},
  };
  std::vector<Result<AcquireWithTail>> got = store().AcquireFencesIfReadTail(batch);
  ASSERT_EQ(got.size(), batch.size());
  ASSERT_TRUE(got[0]) << Describe(got[0].error());
  EXPECT_FALSE(got[0]->acquire.stale);
  EXPECT_EQ(got[0]->acquire.fence, 1);
  EXPECT_EQ(got[0]->tail, Read(store(), "ex-1"));
  ASSERT_TRUE(got[1]) << Describe(got[1].error());
  EXPECT_TRUE(got[1]->acquire.stale);
  EXPECT_EQ(got[1]->acquire.fence, 1);
  EXPECT_EQ(Kinds(got[1]->tail), (std::vector<std::string>{"EXECUTION_RESUMED"}));
  EXPECT_TRUE(Fails(got[2], ErrorCode::kInvalidArgument));
  ASSERT_TRUE(got[3]) << Describe(got[3].error());
  EXPECT_FALSE(got[3]->acquire.stale);
  EXPECT_EQ(got[3]->acquire.fence, 1);
  EXPECT_TRUE(got[3]->tail.empty());
  ASSERT_TRUE(got[4]) << Describe(got[4].error());
  EXPECT_TRUE(got[4]->acquire.stale);  // the first request of ex-1 took token 1
  EXPECT_EQ(got[4]->acquire.fence, 1);
  EXPECT_TRUE(Fails(got[5], ErrorCode::kInvalidArgument));
  EXPECT_EQ(FenceOf(store(), "ex-1"), 1);
  EXPECT_EQ(FenceOf(store(), "ex-2"), 1);
  EXPECT_EQ(FenceOf(store(), "ex-3"), 1);
  // The tokens fence their old holders as single acquires' do.
  Result<int64_t> old_holder = store().Append(Req("ex-1", kParkSeq + 1, Steps(1), 0));
  ASSERT_FALSE(old_holder);
  ExpectStale(old_holder.error(), 0, 1);
}

// A batch larger than a store's group (PostgreSQL groups 64 acquires):
// every request is answered, each execution's tail with it.
TEST_P(EventStoreConformance, AcquireFencesIfReadTailAnswersABatchOfManyGroups) {
  ONCE_REQUIRE_CAPABILITY(Capability::kAcquireFenceIfReadTail);
  constexpr int kBatch = 150;
  std::vector<std::string> ids;
  for (int i = 0; i < kBatch; ++i) ids.push_back("many-" + std::to_string(i));
  for (const std::string& id : ids) Park(store(), id);
  std::vector<store::AcquireIfRead> batch;
  for (const std::string& id : ids) {
    batch.push_back({.execution_id = id, .expect = {0, kParkSeq}, .read_after = 0});
  }
  std::vector<Result<AcquireWithTail>> got = store().AcquireFencesIfReadTail(batch);
  ASSERT_EQ(got.size(), batch.size());
  for (int i = 0; i < kBatch; ++i) {
    SCOPED_TRACE(ids[i]);
    ASSERT_TRUE(got[i]) << Describe(got[i].error());
    EXPECT_FALSE(got[i]->acquire.stale);
    EXPECT_EQ(got[i]->acquire.fence, 1);
    EXPECT_EQ(Seqs(got[i]->tail), (std::vector<int64_t>{1, 2, 3}));
  }
}

TEST_P(EventStoreConformance, AcquireFenceIfReadTailRefusesBadInput) {
  ONCE_REQUIRE_CAPABILITY(Capability::kAcquireFenceIfReadTail);
  Park(store(), "ex-1");
  EXPECT_TRUE(Fails(store().AcquireFenceIfReadTail("", {0, 1}, 0), ErrorCode::kInvalidArgument));
  EXPECT_TRUE(
      Fails(store().AcquireFenceIfReadTail("ex-1", {-1, 1}, 0), ErrorCode::kInvalidArgument));
  EXPECT_TRUE(
      Fails(store().AcquireFenceIfReadTail("ex-1", {0, -1}, 0), ErrorCode::kInvalidArgument));
  EXPECT_TRUE(
      Fails(store().AcquireFenceIfReadTail("ex-1", {0, 1}, -1), ErrorCode::kInvalidArgument));
  EXPECT_EQ(FenceOf(store(), "ex-1"), 0);
}

// An answering append racing the conditional acquire: exactly one of them
// succeeds (the append lands and the acquire is stale, or the acquire wins
// and the append is fenced out), on both append paths, with and without a
// token acquired before the park was answered.
TEST_P(EventStoreConformance, AnsweringAppendRacingAcquireFenceIfExactlyOneWins) {
  ONCE_REQUIRE_CAPABILITY(Capability::kAcquireFenceIf);
  std::unique_ptr<EventStore> appender_handle = OpenAnother();
  std::unique_ptr<EventStore> acquirer_handle = OpenAnother();
  EventStore& appender = appender_handle ? *appender_handle : store();
  EventStore& acquirer = acquirer_handle ? *acquirer_handle : store();
  constexpr int kRounds = 48;
  int appends_won = 0;
  for (int round = 0; round < kRounds; ++round) {
    const bool batch_path = round % 2 == 1;
    const bool pre_acquired = round % 4 >= 2;
    const bool with_tail = round % 8 >= 4 && Supports(Capability::kAcquireFenceIfReadTail);
    SCOPED_TRACE("round " + std::to_string(round) + (batch_path ? " batch" : " single") +
                 (pre_acquired ? " token 1" : " token 0"));
    const std::string id = "race-" + std::to_string(round);
    Park(store(), id);
    const int64_t token = pre_acquired ? AcquireIf(store(), id, 0, kParkSeq).fence : 0;
    AppendRequest resume =
        Req(id, kParkSeq + 1, {KernelEvent(KernelKind::kExecutionResumed, {}, token)}, token);
    std::atomic<int> ready{0};
    Result<int64_t> appended = MakeError(ErrorCode::kInternal, "not run");
    Result<ConditionalAcquire> acquired = MakeError(ErrorCode::kInternal, "not run");
    std::vector<Envelope> tail;  // the combined acquire's, when with_tail
    std::thread a([&] {
      ready.fetch_add(1);
      while (ready.load() < 2) std::this_thread::yield();
      if (!batch_path) {
        appended = appender.Append(resume);
        return;
      }
      std::vector<AppendRequest> batch = {Req(id + "-sibling", 1, Steps(1)), resume};
      auto r = appender.AppendBatch(batch);
      appended = r ? (*r)[1] : std::unexpected(r.error());
    });
    std::thread b([&] {
      ready.fetch_add(1);
      while (ready.load() < 2) std::this_thread::yield();
      if (!with_tail) {
        acquired = acquirer.AcquireFenceIf(id, {token, kParkSeq});
        return;
      }
      auto r = acquirer.AcquireFenceIfReadTail(id, {token, kParkSeq}, kParkSeq);
      if (!r) {
        acquired = std::unexpected(r.error());
        return;
      }
      acquired = r->acquire;
      tail = std::move(r->tail);
    });
    a.join();
    b.join();
    ASSERT_TRUE(acquired) << Describe(acquired.error());
    if (appended) {
      ++appends_won;
      EXPECT_TRUE(acquired->stale) << "both the answer and the acquire succeeded";
      EXPECT_EQ(acquired->fence, token);
      EXPECT_EQ(FenceOf(store(), id), token);
      EXPECT_EQ(HeadOf(store(), id), kParkSeq + 1);
      // The acquire came after the answer: its read shows it.
      if (with_tail) {
        EXPECT_EQ(Kinds(tail), (std::vector<std::string>{"EXECUTION_RESUMED"}));
      }
    } else {
      ExpectStale(appended.error(), token, token + 1);
      EXPECT_FALSE(acquired->stale);
      EXPECT_EQ(acquired->fence, token + 1);
      EXPECT_EQ(HeadOf(store(), id), kParkSeq);
      EXPECT_TRUE(tail.empty());
    }
  }
  RecordProperty("appends_won", appends_won);
}

// ---- AppendIfUnchanged -----------------------------------------------------

TEST_P(EventStoreConformance, AppendIfUnchangedNeedsTheCurrentTokenAndNeverBumpsIt) {
  ONCE_REQUIRE_CAPABILITY(Capability::kAppendIfUnchanged);
  Result<int64_t> fresh = store().AppendIfUnchanged(Req("ex-1", 1, Steps(1)), 0);
  ASSERT_TRUE(fresh) << Describe(fresh.error());
  EXPECT_EQ(*fresh, 1);
  EXPECT_TRUE(
      Fails(store().AppendIfUnchanged(Req("ex-1", 5, Steps(1)), 0), ErrorCode::kSequenceConflict));
  EXPECT_TRUE(
      Fails(store().AppendIfUnchanged(Req("", 1, Steps(1)), 0), ErrorCode::kInvalidArgument));
  if (!Supports(Capability::kAcquireFence)) return;

  EXPECT_EQ(FenceOf(store(), "ex-1"), 0);
  ASSERT_EQ(store().AcquireFence("ex-1").value_or(-1), 1);
  // req.fence is ignored: only the observed token counts.
  Result<int64_t> current = store().AppendIfUnchanged(Req("ex-1", 2, Steps(1, 2), 0), 1);
  ASSERT_TRUE(current) << Describe(current.error());
  EXPECT_EQ(*current, 2);
  EXPECT_EQ(FenceOf(store(), "ex-1"), 1);

  ASSERT_EQ(store().AcquireFence("ex-1").value_or(-1), 2);  // someone acquired
  Result<int64_t> behind = store().AppendIfUnchanged(Req("ex-1", 3, Steps(1, 3), 2), 1);
  ASSERT_FALSE(behind);
  ExpectStale(behind.error(), 1, 2);
  Result<int64_t> ahead = store().AppendIfUnchanged(Req("ex-1", 3, Steps(1, 3)), 5);
  ASSERT_FALSE(ahead);
  ExpectStale(ahead.error(), 5, 2);
  EXPECT_EQ(HeadOf(store(), "ex-1"), 2);
  EXPECT_EQ(AppendOk(store(), Req("ex-1", 3, Steps(1, 3), 2)), 3);
  EXPECT_EQ(store().AppendIfUnchanged(Req("ex-1", 4, Steps(1, 4)), 2).value_or(-1), 4);
  EXPECT_EQ(FenceOf(store(), "ex-1"), 2);
}

// ---- CopyPrefix ------------------------------------------------------------

TEST_P(EventStoreConformance, CopyPrefixCopiesEventsExactly) {
  ONCE_REQUIRE_CAPABILITY(Capability::kCopyPrefix);
  std::vector<Envelope> evs = {Kernel(KernelKind::kExecutionStarted, {{"input", "ü"}}), Step(2),
                               Step(3), Kernel(KernelKind::kExecutionSuspended), Step(5)};
  evs[1].time_ms = 1111;
  evs[2].metadata = events::Metadata::FromJson({{"fence", 0}, {"trace", "t"}});
  AppendOk(store(), Req("from", 1, evs));
  ASSERT_TRUE(store().CopyPrefix("from", "to", 3));
  std::vector<Envelope> src = Read(store(), "from");
  std::vector<Envelope> dst = Read(store(), "to");
  ASSERT_EQ(src.size(), 5u);
  ASSERT_EQ(dst.size(), 3u);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(dst[i].execution_id, "to");
    EXPECT_EQ(dst[i].sequence, src[i].sequence);
    EXPECT_EQ(dst[i].kind, src[i].kind);
    EXPECT_EQ(dst[i].payload, src[i].payload);
    EXPECT_EQ(dst[i].metadata, src[i].metadata);
    EXPECT_EQ(dst[i].time_ms, src[i].time_ms);
  }
  EXPECT_EQ(dst[1].time_ms, 1111);
  EXPECT_EQ(HeadOf(store(), "to"), 3);
  EXPECT_EQ(HeadOf(store(), "from"), 5);
  EXPECT_EQ(ListAll(store()), (std::vector<std::string>{"from", "to"}));
  EXPECT_EQ(AppendOk(store(), Req("to", 4, Steps(1, 4))), 4);  // the copy continues normally

  ASSERT_TRUE(store().CopyPrefix("from", "whole", 5));  // through == head
  EXPECT_EQ(Read(store(), "whole").size(), 5u);
}

TEST_P(EventStoreConformance, CopyPrefixRefusesAnOccupiedTargetOrAMissingPrefix) {
  ONCE_REQUIRE_CAPABILITY(Capability::kCopyPrefix);
  AppendOk(store(), Req("from", 1, Steps(3)));
  AppendOk(store(), Req("occupied", 1, Steps(1, 70)));
  EXPECT_TRUE(Fails(store().CopyPrefix("from", "occupied", 2), ErrorCode::kSequenceConflict));
  EXPECT_EQ(Read(store(), "occupied").size(), 1u);
  EXPECT_EQ(Read(store(), "occupied")[0].payload["i"], 70);

  EXPECT_TRUE(Fails(store().CopyPrefix("from", "to", 4), ErrorCode::kInvalidArgument));
  EXPECT_TRUE(Fails(store().CopyPrefix("from", "to", 0), ErrorCode::kInvalidArgument));
  EXPECT_TRUE(Fails(store().CopyPrefix("nothing", "to", 1), ErrorCode::kInvalidArgument));
  EXPECT_TRUE(Fails(store().CopyPrefix("from", "", 1), ErrorCode::kInvalidArgument));
  EXPECT_EQ(HeadOf(store(), "to"), 0);
  EXPECT_EQ(ListAll(store()), (std::vector<std::string>{"from", "occupied"}));
}

// ---- TruncatePrefixKeeping -------------------------------------------------

TEST_P(EventStoreConformance, TruncatePrefixKeepingDropsThePrefixAndKeepsNumbers) {
  ONCE_REQUIRE_CAPABILITY(Capability::kTruncatePrefixKeeping);
  AppendOk(store(), Req("ex-1", 1, Steps(6)));
  AppendOk(store(), Req("other", 1, Steps(3)));
  ASSERT_TRUE(store().TruncatePrefixKeeping("ex-1", 4));
  EXPECT_EQ(Seqs(Read(store(), "ex-1")), (std::vector<int64_t>{4, 5, 6}));
  EXPECT_TRUE(Read(store(), "ex-1", 1, 3).empty());
  EXPECT_EQ(Read(store(), "ex-1", 4)[0].payload["i"], 4);
  EXPECT_EQ(HeadOf(store(), "ex-1"), 6);
  EXPECT_EQ(HeadOf(store(), "other"), 3);

  ASSERT_TRUE(store().TruncatePrefixKeeping("ex-1", 2));  // already gone: no-op
  ASSERT_TRUE(store().TruncatePrefixKeeping("ex-1", 1));
  EXPECT_EQ(Seqs(Read(store(), "ex-1")), (std::vector<int64_t>{4, 5, 6}));

  ExpectSequenceConflict(store().Append(Req("ex-1", 1, Steps(1))).error(), 7, 1);
  EXPECT_EQ(AppendOk(store(), Req("ex-1", 7, Steps(1, 7))), 7);
  ASSERT_TRUE(store().TruncatePrefixKeeping("ex-1", 7));  // keep only the head
  EXPECT_EQ(Seqs(Read(store(), "ex-1")), (std::vector<int64_t>{7}));
  EXPECT_EQ(HeadOf(store(), "ex-1"), 7);

  EXPECT_TRUE(store().TruncatePrefixKeeping("unknown", 3));
  EXPECT_TRUE(Fails(store().TruncatePrefixKeeping("ex-1", 0), ErrorCode::kInvalidArgument));
  EXPECT_TRUE(Fails(store().TruncatePrefixKeeping("", 2), ErrorCode::kInvalidArgument));
}

// What a truncation keeps reads back whole (kinds, payloads, metadata), and
// the log goes on taking appends after it.
TEST_P(EventStoreConformance, TruncatePrefixKeepingKeepsTheKeptEventsWhole) {
  ONCE_REQUIRE_CAPABILITY(Capability::kTruncatePrefixKeeping);
  std::vector<Envelope> evs = {Kernel(KernelKind::kExecutionStarted, {{"input", 1}}), Step(2),
                               AppEvent("order.shipped", Json{{"n", 3}}), Step(4),
                               Kernel(KernelKind::kExecutionSuspended)};
  evs[1].metadata = events::Metadata::FromJson({{"trace", "t2"}});
  evs[3].metadata = events::Metadata::FromJson({{"trace", "t4"}});
  AppendOk(store(), Req("ex-1", 1, evs));
  std::vector<Envelope> before = Read(store(), "ex-1");
  ASSERT_TRUE(store().TruncatePrefixKeeping("ex-1", 3));
  AppendOk(store(), Req("ex-1", 6, {AppEvent("order.billed", Json{{"n", 6}})}));
  std::vector<Envelope> after = Read(store(), "ex-1");
  ASSERT_EQ(after.size(), 4u);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(after[i].kind, before[i + 2].kind);
    EXPECT_EQ(after[i].payload, before[i + 2].payload);
    EXPECT_EQ(after[i].metadata, before[i + 2].metadata);
  }
  EXPECT_EQ(after[1].metadata.ToJson(), (Json{{"trace", "t4"}}));
  EXPECT_EQ(Kinds(after), (std::vector<std::string>{"order.shipped", "step.done",
                                                    "EXECUTION_SUSPENDED", "order.billed"}));
}

// The contract's choice for a first_kept past the head: the newest event
// stays, so the log is never emptied and its head, listing and next append
// are those of a log that still holds its head event.
TEST_P(EventStoreConformance, TruncatingPastTheHeadKeepsTheNewestEvent) {
  ONCE_REQUIRE_CAPABILITY(Capability::kTruncatePrefixKeeping);
  AppendOk(store(), Req("ex-1", 1, Steps(3)));
  ASSERT_TRUE(store().TruncatePrefixKeeping("ex-1", 100));
  auto kept = Read(store(), "ex-1");
  EXPECT_EQ(Seqs(kept), (std::vector<int64_t>{3}));
  ASSERT_EQ(kept.size(), 1u);
  EXPECT_EQ(kept[0].payload["i"], 3);
  EXPECT_EQ(HeadOf(store(), "ex-1"), 3);
  EXPECT_EQ(ListAll(store()), (std::vector<std::string>{"ex-1"}));
  ExpectSequenceConflict(store().Append(Req("ex-1", 1, Steps(1))).error(), 4, 1);
  EXPECT_EQ(AppendOk(store(), Req("ex-1", 4, Steps(1, 4))), 4);
  ASSERT_TRUE(store().TruncatePrefixKeeping("ex-1", 5));  // one past the head
  EXPECT_EQ(Seqs(Read(store(), "ex-1")), (std::vector<int64_t>{4}));
  ASSERT_TRUE(store().DeleteExecution("ex-1"));
  EXPECT_EQ(HeadOf(store(), "ex-1"), 0);
}

TEST_P(EventStoreConformance, TruncatedLogStillAnswersAcquireFenceIf) {
  ONCE_REQUIRE_CAPABILITY(Capability::kTruncatePrefixKeeping);
  ONCE_REQUIRE_CAPABILITY(Capability::kAcquireFenceIf);
  Park(store(), "ex-1");
  AppendOk(store(), Req("ex-1", 4, {Kernel(KernelKind::kExecutionResumed)}));
  ASSERT_TRUE(store().TruncatePrefixKeeping("ex-1", 3));
  EXPECT_TRUE(AcquireIf(store(), "ex-1", 0, kParkSeq).stale);
  AppendOk(store(), Req("ex-1", 5, {Kernel(KernelKind::kExecutionSuspended)}));
  EXPECT_FALSE(AcquireIf(store(), "ex-1", 0, 5).stale);
}

// ---- Concurrency -----------------------------------------------------------

// Threads append to their own executions and race on one with the same
// expected_next each round: exactly one wins per sequence, no gaps, no
// duplicates, and the losers learn the next free sequence.
TEST_P(EventStoreConformance, ConcurrentAppendersOneWinnerPerSequence) {
  constexpr size_t kThreads = 4;
  constexpr int kRounds = 25;
  std::vector<std::unique_ptr<EventStore>> handles;
  for (size_t i = 0; i < kThreads; ++i) handles.push_back(OpenAnother());
  std::vector<std::vector<int>> won(kThreads);
  std::vector<std::vector<std::string>> errors(kThreads);
  std::barrier sync(static_cast<std::ptrdiff_t>(kThreads));
  std::vector<std::thread> threads;
  for (size_t t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      EventStore& s = HandleFor(handles, t, store());
      const std::string own = "own-" + std::to_string(t);
      for (int round = 0; round < kRounds; ++round) {
        sync.arrive_and_wait();
        Envelope e = AppEvent("race", {{"thread", t}, {"round", round}});
        Result<int64_t> r = s.Append(Req("hot", round + 1, {e}));
        if (r) {
          won[t].push_back(round);
        } else if (r.error().code != ErrorCode::kSequenceConflict ||
                   r.error().As<SequenceDetail>() == nullptr ||
                   r.error().As<SequenceDetail>()->expected != round + 2) {
          errors[t].push_back(Describe(r.error()));
        }
        Result<int64_t> mine = s.Append(Req(own, round + 1, {Step(round)}));
        if (!mine) errors[t].push_back(Describe(mine.error()));
        sync.arrive_and_wait();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (size_t t = 0; t < kThreads; ++t) {
    EXPECT_TRUE(errors[t].empty()) << errors[t].front();
    EXPECT_EQ(HeadOf(store(), "own-" + std::to_string(t)), kRounds);
  }
  std::vector<Envelope> hot = ReadAll(store(), "hot");
  ASSERT_EQ(hot.size(), static_cast<size_t>(kRounds));
  std::vector<int> winner_of(kRounds, -1);
  for (size_t t = 0; t < kThreads; ++t) {
    for (int round : won[t]) {
      EXPECT_EQ(winner_of[round], -1) << "two winners in round " << round;
      winner_of[round] = static_cast<int>(t);
    }
  }
  for (int round = 0; round < kRounds; ++round) {
    EXPECT_EQ(hot[round].sequence, round + 1);
    EXPECT_EQ(hot[round].payload["round"], round);
    EXPECT_EQ(hot[round].payload["thread"], winner_of[round]) << "round " << round;
  }
}

// ---- Run ownership (kOwnership; issue 15) ------------------------------------

std::optional<std::string> OwnerOf(EventStore& s, std::string_view id) {
  Result<std::optional<store::RunOwner>> r = s.RunOwnerOf(id);
  if (!r) {
    ADD_FAILURE() << "RunOwnerOf failed: " << Describe(r.error());
    return std::nullopt;
  }
  if (!*r) return std::nullopt;
  return (*r)->owner;
}

AppendRequest Owned(AppendRequest req, std::string_view owner) {
  req.owner = owner;
  return req;
}

// An append that names an owner moves the run row in the same step: a
// request that leaves the execution running names the owner, one that parks
// or ends it deletes the row; an append naming no owner leaves it alone.
TEST_P(EventStoreConformance, OwnedAppendsKeepTheRunRow) {
  ONCE_REQUIRE_CAPABILITY(Capability::kOwnership);
  EXPECT_EQ(OwnerOf(store(), "ex-1"), std::nullopt);
  AppendOk(store(), Owned(Req("ex-1", 1, {Kernel(KernelKind::kExecutionStarted)}), "node-a"));
  EXPECT_EQ(OwnerOf(store(), "ex-1"), "node-a");
  Result<std::optional<store::RunOwner>> row = store().RunOwnerOf("ex-1");
  ASSERT_TRUE(row && *row);
  EXPECT_GT((*row)->since_ms, 0);
  AppendOk(store(), Req("ex-1", 2, {Kernel(KernelKind::kStepCompleted)}));  // no owner named
  EXPECT_EQ(OwnerOf(store(), "ex-1"), "node-a");
  AppendOk(store(), Owned(Req("ex-1", 3, {Kernel(KernelKind::kStepCompleted)}), "node-b"));
  EXPECT_EQ(OwnerOf(store(), "ex-1"), "node-b");
  AppendOk(store(),
           Owned(Req("ex-1", 4,
                     {Kernel(KernelKind::kStepCompleted), Kernel(KernelKind::kExecutionSuspended)}),
                 "node-b"));
  EXPECT_EQ(OwnerOf(store(), "ex-1"), std::nullopt);  // a park ends the run
  AppendOk(store(), Owned(Req("ex-1", 6, {Kernel(KernelKind::kExecutionResumed)}), "node-a"));
  EXPECT_EQ(OwnerOf(store(), "ex-1"), "node-a");
  AppendOk(store(), Owned(Req("ex-1", 7, {Kernel(KernelKind::kExecutionCompleted)}), "node-a"));
  EXPECT_EQ(OwnerOf(store(), "ex-1"), std::nullopt);
  // Start and end in one append: no row at any moment.
  AppendOk(
      store(),
      Owned(Req("ex-2", 1,
                {Kernel(KernelKind::kExecutionStarted), Kernel(KernelKind::kExecutionCompleted)}),
            "node-a"));
  EXPECT_EQ(OwnerOf(store(), "ex-2"), std::nullopt);
  // An application event and an audit append leave the execution running.
  AppendOk(store(), Owned(Req("ex-3", 1, {Kernel(KernelKind::kExecutionStarted), Step(1)}), "n"));
  EXPECT_EQ(OwnerOf(store(), "ex-3"), "n");
}

TEST_P(EventStoreConformance, ARefusedAppendLeavesTheRunRowAlone) {
  ONCE_REQUIRE_CAPABILITY(Capability::kOwnership);
  AppendOk(store(), Owned(Req("ex-1", 1, {Kernel(KernelKind::kExecutionStarted)}), "node-a"));
  EXPECT_FALSE(store().Append(Owned(Req("ex-1", 5, Steps(1)), "node-b")));  // a gap
  EXPECT_FALSE(store().Append(Owned(Req("ex-1", 1, Steps(1)), "node-b")));  // a duplicate
  EXPECT_EQ(OwnerOf(store(), "ex-1"), "node-a");
  if (Supports(Capability::kAcquireFence)) {
    ASSERT_EQ(store().AcquireFence("ex-1").value_or(-1), 1);
    EXPECT_FALSE(store().Append(
        Owned(Req("ex-1", 2, {Kernel(KernelKind::kExecutionCompleted)}, 0), "node-b")));
    EXPECT_EQ(OwnerOf(store(), "ex-1"), "node-a");
  }
  // In a batch each request moves its own row, or not when it is refused.
  AppendOk(store(), Owned(Req("ex-2", 1, {Kernel(KernelKind::kExecutionStarted)}), "node-a"));
  std::vector<AppendRequest> batch = {
      Owned(Req("ex-2", 2, Steps(1)), "node-c"),
      Owned(Req("ex-3", 7, Steps(1)), "node-c"),  // a gap: refused
      Owned(Req("ex-4", 1, {Kernel(KernelKind::kExecutionStarted)}), "node-c"),
  };
  Result<std::vector<Result<int64_t>>> r = store().AppendBatch(batch);
  ASSERT_TRUE(r) << Describe(r.error());
  EXPECT_TRUE((*r)[0]);
  EXPECT_FALSE((*r)[1]);
  EXPECT_TRUE((*r)[2]);
  EXPECT_EQ(OwnerOf(store(), "ex-2"), "node-c");
  EXPECT_EQ(OwnerOf(store(), "ex-3"), std::nullopt);
  EXPECT_EQ(OwnerOf(store(), "ex-4"), "node-c");
}

// A park or an end releases the run row whoever appends it (another owner,
// or no owner at all): a row names a node only while the log says its run
// runs. What follows the release does not bring the row back unless it names
// an owner again.
TEST_P(EventStoreConformance, AParkOrAnEndReleasesTheRunRowWhoeverAppendsIt) {
  ONCE_REQUIRE_CAPABILITY(Capability::kOwnership);
  AppendOk(store(), Owned(Req("ex-1", 1, {Kernel(KernelKind::kExecutionStarted)}), "node-b"));
  AppendOk(store(), Owned(Req("ex-1", 2, {Kernel(KernelKind::kExecutionCompleted)}, std::nullopt),
                          "node-a"));
  EXPECT_EQ(OwnerOf(store(), "ex-1"), std::nullopt);
  AppendOk(store(), Owned(Req("ex-2", 1, {Kernel(KernelKind::kExecutionStarted)}), "node-b"));
  AppendOk(store(), Req("ex-2", 2, {Kernel(KernelKind::kExecutionSuspended)}, std::nullopt));
  EXPECT_EQ(OwnerOf(store(), "ex-2"), std::nullopt);
  AppendOk(store(), Req("ex-2", 3, Steps(1), std::nullopt));  // after the park, no owner named
  EXPECT_EQ(OwnerOf(store(), "ex-2"), std::nullopt);
  AppendOk(store(), Owned(Req("ex-2", 4, Steps(1), std::nullopt), "node-c"));
  EXPECT_EQ(OwnerOf(store(), "ex-2"), "node-c");
  // In a batch, each request is judged alone: a run that keeps running keeps
  // its row beside the ends.
  AppendOk(store(), Owned(Req("ex-3", 1, {Kernel(KernelKind::kExecutionStarted)}), "node-a"));
  AppendOk(store(), Owned(Req("ex-4", 1, {Kernel(KernelKind::kExecutionStarted)}), "node-b"));
  AppendOk(store(), Owned(Req("ex-5", 1, {Kernel(KernelKind::kExecutionStarted)}), "node-b"));
  std::vector<AppendRequest> batch = {
      Owned(Req("ex-3", 2, {Kernel(KernelKind::kExecutionCompleted)}), "node-a"),
      Req("ex-4", 2, {Kernel(KernelKind::kExecutionCompleted)}, std::nullopt),
      Req("ex-5", 2, Steps(1), std::nullopt),
  };
  Result<std::vector<Result<int64_t>>> r = store().AppendBatch(batch);
  ASSERT_TRUE(r) << Describe(r.error());
  EXPECT_TRUE((*r)[0] && (*r)[1] && (*r)[2]);
  EXPECT_EQ(OwnerOf(store(), "ex-3"), std::nullopt);
  EXPECT_EQ(OwnerOf(store(), "ex-4"), std::nullopt);
  EXPECT_EQ(OwnerOf(store(), "ex-5"), "node-b");
}

// A released row is no one's to expect: a conditional acquire that expects
// the owner it named is stale, and one that expects no owner wins and
// records its own.
TEST_P(EventStoreConformance, AReleasedRunRowIsExpectedAsNoOwner) {
  ONCE_REQUIRE_CAPABILITY(Capability::kOwnership);
  ONCE_REQUIRE_CAPABILITY(Capability::kAcquireFenceIf);
  AppendOk(store(), Owned(Req("ex-1", 1, {Kernel(KernelKind::kExecutionStarted)}), "dead"));
  AppendOk(store(), Owned(Req("ex-1", 2, {Kernel(KernelKind::kExecutionSuspended)}), "dead"));
  Result<ConditionalAcquire> old = store().AcquireFenceIf(
      "ex-1",
      {.fence = 0, .park_seq = 2, .owner = "node-b", .expected_owner = std::string_view("dead")});
  ASSERT_TRUE(old) << Describe(old.error());
  EXPECT_TRUE(old->stale);
  EXPECT_EQ(OwnerOf(store(), "ex-1"), std::nullopt);
  Result<ConditionalAcquire> none = store().AcquireFenceIf(
      "ex-1",
      {.fence = 0, .park_seq = 2, .owner = "node-b", .expected_owner = std::string_view("")});
  ASSERT_TRUE(none) << Describe(none.error());
  EXPECT_FALSE(none->stale);
  EXPECT_EQ(OwnerOf(store(), "ex-1"), "node-b");
}

TEST_P(EventStoreConformance, DeleteExecutionDeletesTheRunRow) {
  ONCE_REQUIRE_CAPABILITY(Capability::kOwnership);
  AppendOk(store(), Owned(Req("ex-1", 1, {Kernel(KernelKind::kExecutionStarted)}), "node-a"));
  ASSERT_TRUE(store().DeleteExecution("ex-1"));
  EXPECT_EQ(OwnerOf(store(), "ex-1"), std::nullopt);
  // A re-created id starts without an owner.
  AppendOk(store(), Req("ex-1", 1, {Kernel(KernelKind::kExecutionStarted)}));
  EXPECT_EQ(OwnerOf(store(), "ex-1"), std::nullopt);
}

TEST_P(EventStoreConformance, OwnersAreValidated) {
  ONCE_REQUIRE_CAPABILITY(Capability::kOwnership);
  const std::string too_long(store().limits().execution_id_bytes_max + 1, 'n');
  for (std::string_view bad : {std::string_view("a\nb"), std::string_view(too_long)}) {
    EXPECT_TRUE(
        Fails(store().Append(Owned(Req("ex-1", 1, Steps(1)), bad)), ErrorCode::kInvalidArgument));
    if (Supports(Capability::kAcquireFenceIf)) {
      EXPECT_TRUE(Fails(store().AcquireFenceIf("ex-1", {.fence = 0, .owner = bad}),
                        ErrorCode::kInvalidArgument));
    }
  }
  EXPECT_EQ(HeadOf(store(), "ex-1"), 0);
  EXPECT_EQ(OwnerOf(store(), "ex-1"), std::nullopt);
}

// A conditional acquire that names an owner records it with the new token;
// one that names an expected owner is stale unless the run row names it
// (and changes nothing), so two takers of a dead node's run cannot both win
// even when the second reads the token after the first moved it.
TEST_P(EventStoreConformance, AcquireFenceIfRecordsAndChecksTheOwner) {
  ONCE_REQUIRE_CAPABILITY(Capability::kOwnership);
  ONCE_REQUIRE_CAPABILITY(Capability::kAcquireFenceIf);
  AppendOk(store(),
           Owned(Req("ex-1", 1, {Kernel(KernelKind::kExecutionStarted), Step(2)}), "dead"));
  // Expecting another owner: stale, nothing changes.
  ConditionalAcquire wrong =
      store()
          .AcquireFenceIf(
              "ex-1", {.fence = 0, .park_seq = 2, .owner = "b", .expected_owner = "someone-else"})
          .value();
  EXPECT_TRUE(wrong.stale);
  EXPECT_EQ(wrong.fence, 0);
  EXPECT_EQ(OwnerOf(store(), "ex-1"), "dead");
  // Expecting no row while there is one: stale.
  EXPECT_TRUE(store()
                  .AcquireFenceIf("ex-1", {.fence = 0, .park_seq = 2, .expected_owner = ""})
                  .value()
                  .stale);
  // The first taker wins and names itself.
  ConditionalAcquire first =
      store()
          .AcquireFenceIf("ex-1",
                          {.fence = 0, .park_seq = 2, .owner = "b", .expected_owner = "dead"})
          .value();
  EXPECT_FALSE(first.stale);
  EXPECT_EQ(first.fence, 1);
  EXPECT_EQ(OwnerOf(store(), "ex-1"), "b");
  // A second taker that read the new token still expects the dead owner: stale.
  ConditionalAcquire second =
      store()
          .AcquireFenceIf("ex-1",
                          {.fence = 1, .park_seq = 2, .owner = "c", .expected_owner = "dead"})
          .value();
  EXPECT_TRUE(second.stale);
  EXPECT_EQ(second.fence, 1);
  EXPECT_EQ(OwnerOf(store(), "ex-1"), "b");
  // A stale acquire records nothing; one naming no owner leaves the row.
  EXPECT_TRUE(
      store().AcquireFenceIf("ex-1", {.fence = 0, .park_seq = 2, .owner = "c"}).value().stale);
  EXPECT_FALSE(store().AcquireFenceIf("ex-1", {.fence = 1, .park_seq = 2}).value().stale);
  EXPECT_EQ(OwnerOf(store(), "ex-1"), "b");
  // Expecting no row where there is none (an ownerless run) succeeds.
  AppendOk(store(), Req("ownerless", 1, {Kernel(KernelKind::kExecutionStarted)}));
  ConditionalAcquire claimed =
      store()
          .AcquireFenceIf("ownerless",
                          {.fence = 0, .park_seq = 1, .owner = "b", .expected_owner = ""})
          .value();
  EXPECT_FALSE(claimed.stale);
  EXPECT_EQ(OwnerOf(store(), "ownerless"), "b");
  if (Supports(Capability::kAcquireFenceIfReadTail)) {
    AcquireWithTail with_tail =
        store()
            .AcquireFenceIfReadTail(
                "ex-1", {.fence = 2, .park_seq = 2, .owner = "d", .expected_owner = "b"}, 1)
            .value();
    EXPECT_FALSE(with_tail.acquire.stale);
    EXPECT_EQ(with_tail.tail.size(), 1u);
    EXPECT_EQ(OwnerOf(store(), "ex-1"), "d");
  }
}

// The resume's path: the conditional acquire names the owner, the body's
// ending append releases it, in a batch of other executions' appends, and
// leaves the token (the fence still refuses an older one). Deleting an
// execution whose fence moved releases its owner too.
TEST_P(EventStoreConformance, TheEndingAppendReleasesTheOwnerTheAcquireRecorded) {
  ONCE_REQUIRE_CAPABILITY(Capability::kOwnership);
  ONCE_REQUIRE_CAPABILITY(Capability::kAcquireFenceIf);
  for (std::string id : {"ex-1", "ex-2", "ex-3"}) {
    AppendOk(
        store(),
        Owned(Req(id, 1,
                  {Kernel(KernelKind::kExecutionStarted), Kernel(KernelKind::kExecutionSuspended)}),
              "node-a"));
    EXPECT_EQ(OwnerOf(store(), id), std::nullopt);
    ConditionalAcquire got =
        store().AcquireFenceIf(id, {.fence = 0, .park_seq = 2, .owner = "node-b"}).value();
    ASSERT_FALSE(got.stale);
    EXPECT_EQ(got.fence, 1);
    EXPECT_EQ(OwnerOf(store(), id), "node-b");
  }
  std::vector<AppendRequest> batch = {
      Owned(Req("ex-1", 3,
                {Kernel(KernelKind::kExecutionResumed),
                 Kernel(KernelKind::kExecutionCompleted, Json{{"value", 1}})},
                1),
            "node-b"),
      Owned(Req("ex-2", 3, {Kernel(KernelKind::kExecutionResumed), Step(1)}, 1), "node-b"),
  };
  Result<std::vector<Result<int64_t>>> r = store().AppendBatch(batch);
  ASSERT_TRUE(r) << Describe(r.error());
  ASSERT_TRUE((*r)[0] && (*r)[1]);
  EXPECT_EQ(OwnerOf(store(), "ex-1"), std::nullopt);  // ended: released
  EXPECT_EQ(OwnerOf(store(), "ex-2"), "node-b");      // still running
  if (Supports(Capability::kAcquireFence)) {
    EXPECT_EQ(store().ReadFence("ex-1").value_or(-1), 1);
  }
  EXPECT_TRUE(Fails(store().Append(Req("ex-1", 5, Steps(1), 0)), ErrorCode::kStaleFence));
  ASSERT_TRUE(store().DeleteExecution("ex-3"));
  EXPECT_EQ(OwnerOf(store(), "ex-3"), std::nullopt);
}

TEST_P(EventStoreConformance, TakersOfOneDeadRunOneWinner) {
  ONCE_REQUIRE_CAPABILITY(Capability::kOwnership);
  ONCE_REQUIRE_CAPABILITY(Capability::kAcquireFenceIf);
  constexpr size_t kTakers = 6;
  constexpr int kRounds = 8;
  std::vector<std::unique_ptr<EventStore>> handles;
  for (size_t i = 0; i < kTakers; ++i) handles.push_back(OpenAnother());
  const std::vector<std::string> names = {"t0", "t1", "t2", "t3", "t4", "t5"};
  for (int round = 0; round < kRounds; ++round) {
    SCOPED_TRACE("round " + std::to_string(round));
    const std::string id = "orphan-" + std::to_string(round);
    AppendOk(store(), Owned(Req(id, 1, {Kernel(KernelKind::kExecutionStarted)}), "dead"));
    std::vector<char> won(kTakers, 0);  // one byte each: vector<bool>'s bits share words
    std::atomic<size_t> ready{0};
    std::vector<std::thread> threads;
    for (size_t i = 0; i < kTakers; ++i) {
      threads.emplace_back([&, i] {
        EventStore& s = HandleFor(handles, i, store());
        ready.fetch_add(1);
        while (ready.load() < kTakers) std::this_thread::yield();
        // Each taker reads the token, as a takeover pass does, then claims.
        Result<int64_t> token = s.ReadFence(id);
        if (!token) return;
        Result<ConditionalAcquire> r = s.AcquireFenceIf(
            id, {.fence = *token, .park_seq = 1, .owner = names[i], .expected_owner = "dead"});
        won[i] = r && !r->stale;
      });
    }
    for (auto& t : threads) t.join();
    int winners = 0;
    std::string winner;
    for (size_t i = 0; i < kTakers; ++i) {
      if (won[i]) {
        ++winners;
        winner = names[i];
      }
    }
    EXPECT_EQ(winners, 1);
    EXPECT_EQ(OwnerOf(store(), id), winner);
    EXPECT_EQ(FenceOf(store(), id), 1);
  }
}

// ---- Transactions (kTransaction) -------------------------------------------
//
// The SQL below is the dialect SQLite and PostgreSQL share; $N parameters.

constexpr char kCreateEffects[] =
    "CREATE TABLE IF NOT EXISTS conformance_effects (k TEXT PRIMARY KEY, v INTEGER)";
constexpr char kInsertEffect[] = "INSERT INTO conformance_effects (k, v) VALUES ($1, $2)";

// AppendInTransaction: sql(t), then `req`.
template <class Sql>
Result<int64_t> Transact(EventStore& s, const AppendRequest& req, Sql&& sql) {
  auto work = [&](store::SqlTransaction& t) -> Result<AppendRequest> {
    ONCE_RETURN_IF_ERROR(sql(t));
    return req;
  };
  return s.AppendInTransaction(req.execution_id, work);
}

Status InsertEffect(store::SqlTransaction& t, std::string k, int64_t v) {
  ONCE_ASSIGN_OR_RETURN(store::SqlRows rows, t.Exec(kInsertEffect, {Json(k), Json(v)}));
  if (rows.changed != 1) return MakeError(ErrorCode::kInternal, "insert changed no row");
  return Ok();
}

// The rows of `query`, read in a transaction that commits nothing.
std::vector<std::vector<std::optional<std::string>>> Query(EventStore& s, std::string query) {
  store::SqlRows rows;
  auto work = [&](store::SqlTransaction& t) -> Result<AppendRequest> {
    ONCE_ASSIGN_OR_RETURN(rows, t.Exec(query));
    return MakeError(ErrorCode::kCancelled, "read only");
  };
  Result<int64_t> r = s.AppendInTransaction("reader", work);
  EXPECT_TRUE(Fails(r, ErrorCode::kCancelled));
  return rows.rows;
}

int64_t CountEffects(EventStore& s) {
  auto rows = Query(s, "SELECT count(*) FROM conformance_effects");
  if (rows.size() != 1 || rows[0].size() != 1 || !rows[0][0]) return -1;
  return std::stoll(*rows[0][0]);
}

// Creates the effects table (committed with the first event of "setup").
void CreateEffects(EventStore& s) {
  Result<int64_t> r =
      Transact(s, Req("setup", 1, Steps(1)), [](store::SqlTransaction& t) -> Status {
        ONCE_RETURN_IF_ERROR(t.Exec(kCreateEffects));
        return Ok();
      });
  ASSERT_TRUE(r) << Describe(r.error());
}

TEST_P(EventStoreConformance, TransactionCommitsItsSqlWithItsEvents) {
  ONCE_REQUIRE_CAPABILITY(Capability::kTransaction);
  CreateEffects(store());
  Result<int64_t> r = Transact(store(), Req("ex-1", 1, Steps(2)),
                               [](store::SqlTransaction& t) { return InsertEffect(t, "a", 7); });
  ASSERT_TRUE(r) << Describe(r.error());
  EXPECT_EQ(*r, 2);
  EXPECT_EQ(Seqs(Read(store(), "ex-1")), (std::vector<int64_t>{1, 2}));
  auto rows = Query(store(), "SELECT k, v FROM conformance_effects");
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_EQ(rows[0], (std::vector<std::optional<std::string>>{"a", "7"}));  // text form
  // The next append sees the head the transaction left.
  EXPECT_EQ(AppendOk(store(), Req("ex-1", 3, Steps(1, 3))), 3);
}

TEST_P(EventStoreConformance, TransactionRefusedByTheFenceRollsBackItsSql) {
  ONCE_REQUIRE_CAPABILITY(Capability::kTransaction);
  ONCE_REQUIRE_CAPABILITY(Capability::kAcquireFence);
  CreateEffects(store());
  EXPECT_EQ(AppendOk(store(), Req("ex-1", 1, Steps(1))), 1);
  ASSERT_EQ(store().AcquireFence("ex-1").value_or(-1), 1);  // another writer took the turn
  Result<int64_t> r = Transact(store(), Req("ex-1", 2, Steps(1, 2), /*fence=*/0),
                               [](store::SqlTransaction& t) { return InsertEffect(t, "a", 1); });
  EXPECT_TRUE(Fails(r, ErrorCode::kStaleFence));
  EXPECT_EQ(CountEffects(store()), 0);  // the write went with the record
  EXPECT_EQ(HeadOf(store(), "ex-1"), 1);
  // Under the current token both commit.
  r = Transact(store(), Req("ex-1", 2, Steps(1, 2), /*fence=*/1),
               [](store::SqlTransaction& t) { return InsertEffect(t, "a", 1); });
  ASSERT_TRUE(r) << Describe(r.error());
  EXPECT_EQ(CountEffects(store()), 1);
}

TEST_P(EventStoreConformance, TransactionRefusedBySequenceRollsBackItsSql) {
  ONCE_REQUIRE_CAPABILITY(Capability::kTransaction);
  CreateEffects(store());
  EXPECT_EQ(AppendOk(store(), Req("ex-1", 1, Steps(1))), 1);
  Result<int64_t> r = Transact(store(), Req("ex-1", 1, Steps(1)),
                               [](store::SqlTransaction& t) { return InsertEffect(t, "a", 1); });
  EXPECT_TRUE(Fails(r, ErrorCode::kSequenceConflict));
  EXPECT_EQ(CountEffects(store()), 0);
  EXPECT_EQ(HeadOf(store(), "ex-1"), 1);
}

TEST_P(EventStoreConformance, TransactionWorkErrorRollsBackAndIsReturned) {
  ONCE_REQUIRE_CAPABILITY(Capability::kTransaction);
  CreateEffects(store());
  auto work = [](store::SqlTransaction& t) -> Result<AppendRequest> {
    ONCE_RETURN_IF_ERROR(InsertEffect(t, "a", 1));
    return MakeError(ErrorCode::kNotFound, "the work's own error");
  };
  Result<int64_t> r = store().AppendInTransaction("ex-1", work);
  ASSERT_TRUE(Fails(r, ErrorCode::kNotFound));
  EXPECT_EQ(r.error().message, "the work's own error");
  EXPECT_EQ(CountEffects(store()), 0);
  EXPECT_EQ(HeadOf(store(), "ex-1"), 0);
}

TEST_P(EventStoreConformance, TransactionAppendMustNameItsExecution) {
  ONCE_REQUIRE_CAPABILITY(Capability::kTransaction);
  CreateEffects(store());
  auto work = [](store::SqlTransaction& t) -> Result<AppendRequest> {
    ONCE_RETURN_IF_ERROR(InsertEffect(t, "a", 1));
    return Req("ex-2", 1, Steps(1));
  };
  EXPECT_TRUE(Fails(store().AppendInTransaction("ex-1", work), ErrorCode::kInvalidArgument));
  EXPECT_EQ(CountEffects(store()), 0);
  EXPECT_EQ(HeadOf(store(), "ex-2"), 0);
  // An invalid append (bad id in the request) rolls back too.
  auto bad = [](store::SqlTransaction& t) -> Result<AppendRequest> {
    ONCE_RETURN_IF_ERROR(InsertEffect(t, "b", 1));
    return Req("ex-1", 1, {});
  };
  EXPECT_TRUE(Fails(store().AppendInTransaction("ex-1", bad), ErrorCode::kInvalidArgument));
  EXPECT_EQ(CountEffects(store()), 0);
}

TEST_P(EventStoreConformance, TransactionSqlErrorsAreTypedAndTheStoreServesOn) {
  ONCE_REQUIRE_CAPABILITY(Capability::kTransaction);
  CreateEffects(store());
  struct Case {
    std::string sql;
    std::vector<Json> params;
    ErrorCode code;
  };
  const std::vector<Case> cases = {
      {"SELEC 1", {}, ErrorCode::kInvalidArgument},
      {"SELECT * FROM no_such_table", {}, ErrorCode::kInvalidArgument},
      {kInsertEffect, {Json("dup"), Json(1)}, ErrorCode::kAlreadyExists},  // after one "dup"
      {"COMMIT", {}, ErrorCode::kInvalidArgument},
      {"  /* c */ rollback", {}, ErrorCode::kInvalidArgument},
      {"SAVEPOINT s", {}, ErrorCode::kInvalidArgument},
      {"BEGIN", {}, ErrorCode::kInvalidArgument},
      {"SET search_path TO elsewhere", {}, ErrorCode::kInvalidArgument},
      {"SELECT 1; SELECT 2", {}, ErrorCode::kInvalidArgument},
      {"", {}, ErrorCode::kInvalidArgument},
      {kInsertEffect, {Json("one")}, ErrorCode::kInvalidArgument},  // too few parameters
      {kInsertEffect, {Json("obj"), Json::object()}, ErrorCode::kInvalidArgument},
  };
  int64_t head = 0;
  for (const Case& c : cases) {
    SCOPED_TRACE(c.sql);
    // The work runs "dup" first, then the case; it returns its request
    // even after a failed Exec (swallowing the error): still refused.
    ErrorCode got = ErrorCode::kInternal;
    auto work = [&](store::SqlTransaction& t) -> Result<AppendRequest> {
      if (Status s = InsertEffect(t, "dup", 0); !s) return std::unexpected(s.error());
      Result<store::SqlRows> r = t.Exec(c.sql, std::span<const Json>(c.params));
      if (r) {
        ADD_FAILURE() << "the statement ran";
      } else {
        got = r.error().code;
        // A spoiled transaction answers every later Exec with the same error.
        EXPECT_TRUE(Fails(t.Exec("SELECT 1"), got));
      }
      return Req("ex-1", head + 1, Steps(1, static_cast<int>(head + 1)));
    };
    Result<int64_t> r = store().AppendInTransaction("ex-1", work);
    EXPECT_EQ(got, c.code);
    EXPECT_TRUE(Fails(r, c.code));
    EXPECT_EQ(CountEffects(store()), 0);  // "dup" rolled back with it
    EXPECT_EQ(HeadOf(store(), "ex-1"), head);
    // The store serves on: a plain append and a good transaction.
    head = AppendOk(store(), Req("ex-1", head + 1, Steps(1, static_cast<int>(head + 1))));
  }
  Result<int64_t> ok =
      Transact(store(), Req("ex-1", head + 1, Steps(1, static_cast<int>(head + 1))),
               [](store::SqlTransaction& t) { return InsertEffect(t, "fine", 1); });
  ASSERT_TRUE(ok) << Describe(ok.error());
  EXPECT_EQ(CountEffects(store()), 1);
}

TEST_P(EventStoreConformance, TransactionParametersAreBoundNeverSpliced) {
  ONCE_REQUIRE_CAPABILITY(Capability::kTransaction);
  CreateEffects(store());
  const std::string hostile = "x', 1); DROP TABLE conformance_effects; --";
  Result<int64_t> r =
      Transact(store(), Req("ex-1", 1, Steps(1)), [&](store::SqlTransaction& t) -> Status {
        ONCE_RETURN_IF_ERROR(InsertEffect(t, hostile, 1));
        ONCE_RETURN_IF_ERROR(t.Exec(kInsertEffect, {Json("null"), Json(nullptr)}));
        return Ok();
      });
  ASSERT_TRUE(r) << Describe(r.error());
  auto rows = Query(store(), "SELECT k, v FROM conformance_effects ORDER BY k DESC");
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[0], (std::vector<std::optional<std::string>>{hostile, "1"}));
  EXPECT_EQ(rows[1], (std::vector<std::optional<std::string>>{"null", std::nullopt}));
}

TEST_P(EventStoreConformance, TransactionSqlLimitsAreHonoured) {
  ONCE_REQUIRE_CAPABILITY(Capability::kTransaction);
  Limits limits;
  limits.sql_statement_bytes_max = 100;
  limits.sql_params_max = 2;
  limits.sql_statements_max = 4;
  limits.sql_result_rows_max = 2;
  limits.sql_result_bytes_max = 10;
  EventStore* s = MakeStore(limits);
  ASSERT_NE(s, nullptr);
  CreateEffects(*s);
  auto refused = [&](auto&& sql) -> Error {
    Error seen{ErrorCode::kInternal, "not refused", {}, {}};
    auto work = [&](store::SqlTransaction& t) -> Result<AppendRequest> {
      Status st = sql(t);
      if (!st) seen = st.error();
      return Req("ex-1", 1, Steps(1));
    };
    Result<int64_t> r = s->AppendInTransaction("ex-1", work);
    EXPECT_FALSE(r);
    return seen;
  };
  auto exec = [](store::SqlTransaction& t, std::string q, std::vector<Json> p = {}) -> Status {
    ONCE_RETURN_IF_ERROR(t.Exec(q, std::span<const Json>(p)));
    return Ok();
  };
  ExpectLimit(refused([&](store::SqlTransaction& t) {
                return exec(t, "SELECT 1 " + std::string(100, ' '));
              }),
              "sql_statement_bytes_max", 109, 100);
  ExpectLimit(refused([&](store::SqlTransaction& t) {
                return exec(t, "SELECT $1, $2, $3", {Json(1), Json(2), Json(3)});
              }),
              "sql_params_max", 3, 2);
  ExpectLimit(refused([&](store::SqlTransaction& t) -> Status {
                for (int i = 0; i < 5; ++i) ONCE_RETURN_IF_ERROR(exec(t, "SELECT 1"));
                return Ok();
              }),
              "sql_statements_max", 5, 4);
  ExpectLimit(
      refused([&](store::SqlTransaction& t) -> Status {
        for (int i = 0; i < 3; ++i) {
          ONCE_RETURN_IF_ERROR(exec(t, kInsertEffect, {Json("k" + std::to_string(i)), Json(i)}));
        }
        return exec(t, "SELECT k FROM conformance_effects");
      }),
      "sql_result_rows_max", 3, 2);
  ExpectLimit(refused([&](store::SqlTransaction& t) {
                return exec(t, "SELECT $1", {Json(std::string(11, 'x'))});
              }),
              "sql_result_bytes_max", 11, 10);
  // At the limits, everything runs.
  Result<int64_t> r =
      Transact(*s, Req("ex-1", 1, Steps(1)), [&](store::SqlTransaction& t) -> Status {
        ONCE_RETURN_IF_ERROR(exec(t, "SELECT $1, $2", {Json("12345"), Json("12345")}));
        return exec(t, "SELECT 1 UNION ALL SELECT 2");
      });
  EXPECT_TRUE(r) << Describe(r.error());
}

// Racing transactions for the same sequence (as two runners of one
// execution would): in every round exactly one commits its SQL with its
// event; the others are refused and their SQL rolls back.
TEST_P(EventStoreConformance, RacingTransactionsCommitExactlyOneEffect) {
  ONCE_REQUIRE_CAPABILITY(Capability::kTransaction);
  CreateEffects(store());
  constexpr size_t kThreads = 4;
  constexpr int kRounds = 6;
  std::vector<std::unique_ptr<EventStore>> handles;
  for (size_t i = 0; i < kThreads; ++i) handles.push_back(OpenAnother());
  for (int round = 0; round < kRounds; ++round) {
    SCOPED_TRACE("round " + std::to_string(round));
    std::vector<std::optional<ErrorCode>> outcome(kThreads);
    std::barrier sync(static_cast<std::ptrdiff_t>(kThreads));
    std::vector<std::thread> threads;
    for (size_t t = 0; t < kThreads; ++t) {
      threads.emplace_back([&, t] {
        EventStore& s = HandleFor(handles, t, store());
        sync.arrive_and_wait();
        std::string key = std::to_string(round) + "/" + std::to_string(t);
        Result<int64_t> r =
            Transact(s, Req("ex-1", round + 1, Steps(1, round + 1)),
                     [&](store::SqlTransaction& sql) { return InsertEffect(sql, key, round); });
        outcome[t] = r ? std::nullopt : std::optional<ErrorCode>(r.error().code);
      });
    }
    for (auto& th : threads) th.join();
    int won = 0;
    for (size_t t = 0; t < kThreads; ++t) {
      if (!outcome[t]) {
        ++won;
      } else {
        // The loser saw the winner's event (or waited past the lock timeout).
        EXPECT_TRUE(*outcome[t] == ErrorCode::kSequenceConflict || *outcome[t] == ErrorCode::kBusy)
            << ErrorCodeName(*outcome[t]);
      }
    }
    EXPECT_EQ(won, 1);
    EXPECT_EQ(HeadOf(store(), "ex-1"), round + 1);
    EXPECT_EQ(CountEffects(store()), round + 1);  // one effect per landed event
  }
}

}  // namespace
}  // namespace once::store_testing
