// The web UI's files, embedded at build time (ui/embed.cmake).
#pragma once

#include <string_view>
#include <vector>

namespace once::loom_app {

struct UiAsset {
  std::string_view path;          // "/index.html"
  std::string_view content_type;  // "text/html; charset=utf-8"
  std::string_view body;
};
const std::vector<UiAsset>& UiAssets();

}  // namespace once::loom_app
