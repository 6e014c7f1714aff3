// A progress bar on stderr for commands that may take longer than a second:
// count, rate and ETA, redrawn at most every 200 ms, only when stderr is a
// terminal (or LOOM_PROGRESS=1), so pipes and --json output stay clean.
//
//   Progress bar("retention");
//   for (...) bar.Update(done, total);
//   bar.Finish();
#pragma once

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

namespace once::loom_app {

class Progress {
 public:
  explicit Progress(std::string label)
      : label_(std::move(label)),
        enabled_(::isatty(STDERR_FILENO) || (std::getenv("LOOM_PROGRESS") &&
                                             std::string(std::getenv("LOOM_PROGRESS")) == "1")),
        start_(std::chrono::steady_clock::now()) {}
  ~Progress() { Finish(); }

  void Update(int64_t done, int64_t total) {
    done_ = done;
    total_ = total;
    auto now = std::chrono::steady_clock::now();
    if (!enabled_ || now - last_ < std::chrono::milliseconds(200)) return;
    last_ = now;
    Draw(now, false);
  }

  void Finish() {
    if (!enabled_ || finished_) return;
    finished_ = true;
    Draw(std::chrono::steady_clock::now(), true);
  }

 private:
  void Draw(std::chrono::steady_clock::time_point now, bool last) {
    double seconds = std::chrono::duration<double>(now - start_).count();
    double rate = seconds > 0 ? done_ / seconds : 0;
    std::string bar;
    if (total_ > 0) {
      const int filled =
          std::clamp(static_cast<int>(20.0 * std::min<int64_t>(done_, total_) / total_), 0, 20);
      bar.append(1, '[').append(filled, '#').append(20 - filled, '.').append("] ");
    }
    std::string eta = "";
    if (total_ > 0 && rate > 0 && done_ < total_) {
      eta = " ETA " + std::to_string(static_cast<int64_t>((total_ - done_) / rate)) + " s";
    }
    std::fprintf(stderr, "\r%s: %s%lld%s%lld  %.0f/s%s%s", label_.c_str(), bar.c_str(),
                 static_cast<long long>(done_), total_ > 0 ? "/" : "",
                 static_cast<long long>(total_ > 0 ? total_ : 0), rate, eta.c_str(),
                 last ? "\n" : "   ");
    if (total_ <= 0) std::fprintf(stderr, "%s", "");
    std::fflush(stderr);
  }

  std::string label_;
  bool enabled_;
  bool finished_ = false;
  int64_t done_ = 0, total_ = 0;
  std::chrono::steady_clock::time_point start_, last_{};
};

}  // namespace once::loom_app
