// libFuzzer target for the boundary record decoder (DecodeBoundary: what a
// restarting sled reads from its two M.2 drives, inside the locker's
// envelope). Every input is either refused with a typed error or decodes to
// a record whose re-encoding is exactly the input (the decoder accepts only
// what EncodeBoundary writes), and on which the execution gate's rules run
// without harm. Seeds: components/rack/fuzz/corpus/rack_boundary_fuzz (records
// of the boundary rules' own steps and the worst case; kept by rack_test).

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <span>

#include "once/rack/boundary.h"

namespace {

using namespace once;
using namespace once::rack;

void Check(bool ok) {
  if (!ok) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::span<const uint8_t> input(data, size);
  auto record = DecodeBoundary(input);
  if (!record) {
    Check(record.error().code == ErrorCode::kInvalidArgument ||
          record.error().code == ErrorCode::kLimitExceeded);
    return 0;
  }
  auto again = EncodeBoundary(*record);
  Check(again && *again == Bytes(input.begin(), input.end()));
  auto back = DecodeBoundary(*again);
  Check(back && *back == *record);
  // The rules read every field; an arrival in a universe of the record, and
  // in a new one, must classify without harm.
  NetworkId fresh;
  fresh.bytes.fill(0xa5);
  (void)ClassifyArrival(*record, fresh, BoundaryOptions{});
  if (record->network) (void)ClassifyArrival(*record, *record->network, BoundaryOptions{});
  for (const LeftUniverse& left : record->left)
    Check(BoundaryFor(*record, left.network) != nullptr);
  // A job of the recorded session, one past V, judged and executed: the next
  // record encodes, or is refused as too large (the drives would refuse it).
  if (record->network) {
    const UniverseBoundary& here = record->here;
    const SessionId session = here.session.value_or(SessionId{});
    const SessionVerdict verdict = JudgeSession(*record, *record->network, session, here.executed);
    (void)JobMayRun(*record, *record->network, verdict, here.executed, nullptr);
    JobId job;
    job.bytes.fill(0x5a);
    BoundaryRecord next = AfterExecution(*record, *record->network, session, here.executed, job,
                                         here.executed, job, BoundaryOptions{});
    auto encoded = EncodeBoundary(next);
    Check(encoded || encoded.error().code == ErrorCode::kLimitExceeded);
  }
  return 0;
}
