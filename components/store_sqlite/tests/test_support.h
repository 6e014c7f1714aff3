// Test helpers: a temporary directory per database, removed afterwards.

#pragma once

#include <string>

namespace once::store::testing {

// A fresh directory under $TMPDIR (or /tmp) that is removed with its files.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::string& path() const { return path_; }
  std::string File(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

}  // namespace once::store::testing
