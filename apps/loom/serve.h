// loom serve: the operator's HTTP API, the web UI and /metrics over one
// store (docs/operations.md). Reads need nothing; acts need the bearer token
// of token_file (created 0600 at first start). Binds 127.0.0.1 by default;
// sends no CORS headers.
#pragma once

#include <string>
#include <vector>

#include "cli.h"

namespace once::loom_app {

struct ServeOptions {
  std::string listen = "127.0.0.1:8420";
  std::string token_file = "loom-serve.token";
  std::string rack_dir;                // a `sush rack up --dir` folder (its rack.json)
  std::vector<std::string> sled_urls;  // or sleds by URL (http://127.0.0.1:7100)
  std::string log_format = "text";     // text | json (one JSON object a line)
  std::string log_level = "info";
  int64_t counts_refresh_ms = 5'000;  // status counts are recomputed this often
  size_t connections_max = 4;         // store connections for requests
  size_t request_body_bytes_max = 1 << 20;
};

int RunServe(const StoreFlags& flags, const ServeOptions& options);

}  // namespace once::loom_app
