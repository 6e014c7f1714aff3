// File: seeds.h
//
// A fuzzer's seed corpus, kept current by the component's unit test: the
// test makes real encodings with the production encoders and ExpectSeeds
// compares them with the committed files of the corpus folder (one file a
// seed, named after it; no other file). So a format change cannot leave a
// corpus of stale bytes behind. After a deliberate change,
// ONCE_WRITE_FUZZ_SEEDS=1 in the environment makes the test write the
// folder instead (and say so); commit what it wrote.
//
//   std::map<std::string, std::string> seeds;
//   seeds["job-start"] = AsString(*Encode(Message{*Sign(job, keys)}));
//   fuzz_corpus::ExpectSeeds(ONCE_RACK_MESSAGES_CORPUS_DIR, seeds);
//
// Seed names are plain file names ([a-z0-9-]); each seed at most
// kSeedBytesMax (libFuzzer's -max_len in scripts/fuzz).

#pragma once

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <span>
#include <string>

#include "once/base/result.h"

namespace once::fuzz_corpus {

inline constexpr size_t kSeedBytesMax = 65536;

inline std::string AsString(std::span<const uint8_t> bytes) {
  return std::string(bytes.begin(), bytes.end());
}

inline std::string ReadFile(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

inline void ExpectSeeds(const std::filesystem::path& dir,
                        const std::map<std::string, std::string>& seeds) {
  ASSERT_FALSE(seeds.empty());
  for (const auto& [name, bytes] : seeds) {
    ASSERT_FALSE(name.empty() || name.find('/') != std::string::npos) << name;
    EXPECT_LE(bytes.size(), kSeedBytesMax) << name;
  }
  const char* write = std::getenv("ONCE_WRITE_FUZZ_SEEDS");
  if (write != nullptr && std::string(write) == "1") {
    std::filesystem::remove_all(dir);
    std::filesystem::create_directories(dir);
    for (const auto& [name, bytes] : seeds) {
      std::ofstream(dir / name, std::ios::binary) << bytes;
    }
    std::printf("fuzz_corpus: wrote %zu seeds to %s\n", seeds.size(), dir.c_str());
    return;
  }
  ASSERT_TRUE(std::filesystem::is_directory(dir))
      << dir << " is missing: run the test with ONCE_WRITE_FUZZ_SEEDS=1";
  size_t files = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    ++files;
    const std::string name = entry.path().filename().string();
    auto it = seeds.find(name);
    if (it == seeds.end()) {
      ADD_FAILURE() << dir << ": " << name << " is no seed the test makes (stale?)";
      continue;
    }
    EXPECT_TRUE(ReadFile(entry.path()) == it->second)
        << dir << ": " << name
        << " is not the current encoding (ONCE_WRITE_FUZZ_SEEDS=1 rewrites the corpus)";
  }
  EXPECT_EQ(files, seeds.size()) << dir << ": a seed file is missing";
}

}  // namespace once::fuzz_corpus
