// File: rng.h
//
// Randomness is injected. Components take an Rng&; tests pass a SeededRng so a
// failing run replays from its seed, production passes a SystemRng.

#pragma once

#include <cstdint>
#include <mutex>

namespace once {

class Rng {
 public:
  virtual ~Rng() = default;
  // 64 uniformly random bits.
  virtual uint64_t Next() = 0;

  // Uniform in [0, 1).
  double NextDouble() { return static_cast<double>(Next() >> 11) * 0x1.0p-53; }
  // Uniform in [0, bound); bound > 0.
  uint64_t Below(uint64_t bound);
  // Fills `size` bytes.
  void Fill(void* out, size_t size);
};

// xoshiro256** seeded through splitmix64: fast, deterministic, not for keys.
// Not thread-safe: give each thread (or each simulated actor) its own.
class SeededRng final : public Rng {
 public:
  explicit SeededRng(uint64_t seed);
  uint64_t Next() override;
  uint64_t seed() const { return seed_; }

 private:
  uint64_t seed_;
  uint64_t s_[4];
};

// Seeded once from the operating system's entropy; thread-safe.
class SystemRng final : public Rng {
 public:
  SystemRng();
  uint64_t Next() override;

 private:
  std::mutex mu_;
  SeededRng inner_;
};

}  // namespace once
