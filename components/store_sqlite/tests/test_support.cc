#include "test_support.h"

#include <stdlib.h>

#include <cstdlib>
#include <filesystem>
#include <vector>

#include "once/base/result.h"

namespace once::store::testing {

TempDir::TempDir() {
  const char* base = std::getenv("TMPDIR");
  std::string pattern =
      std::string(base != nullptr && *base != '\0' ? base : "/tmp") + "/once_store_sqlite_XXXXXX";
  std::vector<char> buf(pattern.begin(), pattern.end());
  buf.push_back('\0');
  ONCE_CHECK(mkdtemp(buf.data()) != nullptr);
  path_ = buf.data();
}

TempDir::~TempDir() {
  std::error_code ec;
  std::filesystem::remove_all(path_, ec);
}

}  // namespace once::store::testing
