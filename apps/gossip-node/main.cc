// gossip-node: one gossip Node as a process, driven by a line protocol.
//
//   gossip-node --port 7000 --peers 7001,7002 --interval-ms 100 --bookmark /tmp/n0.bm
//
// stdin (one command a line):   stdout (one event a line):
//   send TEXT                     sent PATHHEX
//   status                        status NETWORKHEX SIZE MINTICKS ROUNDS BOOTSTRAPS PARTYHEX
//   quit                          recv PATHHEX STEADY_NS   (each message observed)
//                                 reset OLDHEX NEWHEX      (universe dropped)
//                                 ready PORT               (once, at start)

#include <atomic>
#include <cstdio>
#include <iostream>
#include <mutex>
#include <string>
#include <thread>

#include "once/base/decimal.h"
#include "once/gossip/node.h"

namespace {

using namespace once;
using namespace once::gossip;

std::mutex out_mu;

void Emit(const std::string& line) {
  std::lock_guard lock(out_mu);
  std::fwrite(line.data(), 1, line.size(), stdout);
  std::fputc('\n', stdout);
  std::fflush(stdout);
}

// The decimal value `flag` was given, or why it is not one.
template <class T>
Result<T> Number(const std::string& flag, std::string_view text) {
  if (std::optional<T> v = ParseDecimal<T>(text)) return *v;
  return MakeError(ErrorCode::kInvalidArgument,
                   flag + " takes a decimal number in range, not '" + std::string(text) + "'");
}

Result<NodeOptions> ParseArgs(int argc, char** argv) {
  NodeOptions options;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i], value = argv[i + 1];
    if (flag == "--port") {
      ONCE_ASSIGN_OR_RETURN(options.port, Number<uint16_t>(flag, value));
    } else if (flag == "--peers") {
      for (size_t start = 0; start < value.size();) {
        size_t comma = value.find(',', start);
        if (comma == std::string::npos) comma = value.size();
        ONCE_ASSIGN_OR_RETURN(uint16_t port, Number<uint16_t>(flag, std::string_view(value).substr(
                                                                        start, comma - start)));
        options.peers.push_back(PeerAddress{"127.0.0.1", port});
        start = comma + 1;
      }
    } else if (flag == "--interval-ms") {
      ONCE_ASSIGN_OR_RETURN(uint64_t ms, Number<uint64_t>(flag, value));
      options.gossip_interval_ms = std::chrono::milliseconds(ms);
    } else if (flag == "--session-timeout-ms") {
      ONCE_ASSIGN_OR_RETURN(uint64_t ms, Number<uint64_t>(flag, value));
      options.session_timeout_ms = std::chrono::milliseconds(ms);
    } else if (flag == "--bookmark") {
      options.bookmark_path = value;
    } else if (flag == "--seed") {
      ONCE_ASSIGN_OR_RETURN(options.rng_seed, Number<uint64_t>(flag, value));
    } else {
      return MakeError(ErrorCode::kInvalidArgument, "unknown flag " + flag);
    }
  }
  return options;
}

}  // namespace

int main(int argc, char** argv) {
  auto options = ParseArgs(argc, argv);
  if (!options) {
    std::fprintf(stderr, "gossip-node: %s\n", options.error().ToString().c_str());
    return 2;
  }
  std::atomic<bool> reset{false};
  options->on_reset = [&](const NetworkId& from, const NetworkId& to) {
    reset = true;
    Emit("reset " + from.ToHex() + " " + to.ToHex());
  };
  auto node = Node::Start(std::move(*options));
  if (!node) {
    std::fprintf(stderr, "gossip-node: %s\n", node.error().ToString().c_str());
    return 1;
  }
  Host& host = (*node)->host();
  std::atomic<bool> done{false};
  std::thread observer([&] {
    itc::Version checkpoint;
    while (!done) {
      if (reset.exchange(false)) checkpoint = itc::Version{};
      Observation seen = host.Observe(checkpoint);
      const auto now = std::chrono::steady_clock::now().time_since_epoch();
      for (const Message& m : seen.messages) {
        Emit("recv " + HexEncode(m.path) + " " +
             std::to_string(std::chrono::duration_cast<std::chrono::nanoseconds>(now).count()));
      }
      checkpoint = std::move(seen.checkpoint);
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  });
  Emit("ready " + std::to_string((*node)->port()));
  std::string line;
  while (std::getline(std::cin, line)) {
    if (line.rfind("send ", 0) == 0) {
      auto v = host.Send(Bytes(line.begin() + 5, line.end()));
      Emit(v ? "sent " + HexEncode(PathOf(*v)) : "error " + v.error().ToString());
    } else if (line == "status") {
      const auto [network, size, min_ticks, party] = host.Read([](const Replica& r) {
        return std::tuple(r.network(), r.size(), itc::MinTicks(r.ceiling()).value_or(0),
                          r.party() ? HexEncode(r.party()->Encode()) : std::string("-"));
      });
      const NodeStats stats = (*node)->stats();
      Emit("status " + network.ToHex() + " " + std::to_string(size) + " " +
           std::to_string(min_ticks) + " " + std::to_string(stats.rounds) + " " +
           std::to_string(stats.bootstraps) + " " + party);
    } else if (line == "quit") {
      break;
    }
  }
  done = true;
  observer.join();
  (*node)->Stop();
  return 0;
}
