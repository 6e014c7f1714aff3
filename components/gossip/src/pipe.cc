#include <algorithm>
#include <condition_variable>
#include <deque>
#include <mutex>

#include "once/gossip/stream.h"

namespace once::gossip {
namespace {

// One direction of a pipe: an unbounded byte queue with a cut point.
struct Channel {
  std::deque<uint8_t> bytes;
  uint64_t written = 0;
  uint64_t cut_after = UINT64_MAX;
};

struct PipeState {
  std::mutex mu;
  std::condition_variable cv;
  Channel channels[2];
  bool broken = false;
};

class PipeEnd final : public Stream {
 public:
  PipeEnd(std::shared_ptr<PipeState> state, int out) : state_(std::move(state)), out_(out) {}
  ~PipeEnd() override { Close(); }

  Status Read(std::span<uint8_t> out, Deadline deadline) override {
    std::unique_lock lock(state_->mu);
    Channel& in = state_->channels[1 - out_];
    size_t done = 0;
    while (done < out.size()) {
      while (in.bytes.empty() && !state_->broken) {
        if (state_->cv.wait_until(lock, deadline) == std::cv_status::timeout && in.bytes.empty() &&
            !state_->broken) {
          return MakeError(ErrorCode::kTimeout, "pipe read timed out");
        }
      }
      if (in.bytes.empty()) return MakeError(ErrorCode::kUnavailable, "pipe closed");
      const size_t n = std::min(out.size() - done, in.bytes.size());
      std::copy_n(in.bytes.begin(), n, out.begin() + done);
      in.bytes.erase(in.bytes.begin(), in.bytes.begin() + n);
      done += n;
    }
    return Ok();
  }

  Status Write(std::span<const uint8_t> bytes, Deadline) override {
    std::lock_guard lock(state_->mu);
    if (state_->broken) return MakeError(ErrorCode::kUnavailable, "pipe closed");
    Channel& out = state_->channels[out_];
    const uint64_t room = out.cut_after - out.written;
    const size_t n = room < bytes.size() ? static_cast<size_t>(room) : bytes.size();
    out.bytes.insert(out.bytes.end(), bytes.begin(), bytes.begin() + n);
    out.written += n;
    state_->cv.notify_all();
    if (n < bytes.size()) {
      state_->broken = true;
      return MakeError(ErrorCode::kUnavailable, "pipe cut");
    }
    return Ok();
  }

  void Close() override {
    std::lock_guard lock(state_->mu);
    state_->broken = true;
    state_->cv.notify_all();
  }

 private:
  std::shared_ptr<PipeState> state_;
  int out_;
};

}  // namespace

std::pair<std::unique_ptr<Stream>, std::unique_ptr<Stream>> MakePipe(PipeFaults a_to_b,
                                                                     PipeFaults b_to_a) {
  auto state = std::make_shared<PipeState>();
  state->channels[0].cut_after = a_to_b.cut_after_bytes;
  state->channels[1].cut_after = b_to_a.cut_after_bytes;
  return {std::make_unique<PipeEnd>(state, 0), std::make_unique<PipeEnd>(state, 1)};
}

}  // namespace once::gossip
