// File: scenario.h
//
// Rack scenarios as data: one step a line, `#` starts a comment, blank lines
// are ignored (docs/sush-simulator.md is the reference).
//
//   sleds 4                          # s0..s3 (cubbies 0..3), all linked, cold boot
//   sleds 4 split s0,s1 | s2,s3      # cold boot split-brained: two universes
//   partition s0,s1 | s2,s3          # only these groups talk; `heal` links everyone
//   crash s1 / boot s1 / wipe s1     # wipe: s1's data folder (gossip bookmark) is lost
//   move s1 to s2,s3                 # while s1 is down: relink it to only these sleds
//   link s1 s0 / unlink s1 s0
//   session start A via s0           # A labels the session
//   session stop A via s0
//   job J1 in A via s0 target s0,s1 cmd true   # targets: *, sleds, cubbies
//   job stop J1 via s0
//   reset s1                         # an operator's `sush sled reset -T s1`
//   settle                           # gossip until quiescent within the links
//   wait 500ms                       # let virtual time pass (ms or s)
//   drive s1 0 fail|corrupt|wipe|tear [POINT]|heal|enospc|missing
//   left-cap 0                       # the boundary's map of left universes (sim only)
//   session-cap 0                    # its left sessions per universe (sim only)
//   expect ran J1 on s0 once|never|twice
//   expect status J2 on s1 skipped|stopped|interrupted|queued|started|cancelled|error|none
//   expect refused s1                # s1 is untrusted: it refuses every job
//   expect trusted s1
//
// Parse reads hostile text: a malformed line is kInvalidArgument naming its
// line number; every count and size has a named limit (kLimitExceeded). A
// line may end in one CR (CRLF files); any other control byte but the tab
// outside a comment is refused.
// Format(Parse(text)) is canonical: it parses back to the same steps.

#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "once/base/result.h"

namespace once::sim {

// Most sleds in a rack (a rack has 32 cubbies).
inline constexpr size_t kSledsMax = 32;
// Most steps one scenario holds.
inline constexpr size_t kScenarioStepsMax = 100000;
// Longest scenario file, and longest line.
inline constexpr size_t kScenarioBytesMax = 4 << 20;
inline constexpr size_t kLineBytesMax = 4096;
// Longest label (session or job).
inline constexpr size_t kLabelBytesMax = 64;
// Longest wait, in virtual milliseconds.
inline constexpr int64_t kWaitMsMax = 24 * 3600 * 1000;

using SledSet = std::vector<int>;  // sled indices, ascending, no duplicates

struct Sleds {  // must be the first step
  int count = 0;
  std::vector<SledSet> split;  // empty: one group
};
struct Partition {
  std::vector<SledSet> groups;
};
struct Heal {};
struct Crash {
  int sled = 0;
};
struct Boot {
  int sled = 0;
};
struct WipeData {
  int sled = 0;
};
struct Move {
  int sled = 0;
  SledSet to;
};
struct Link {
  int a = 0, b = 0;
  bool up = true;  // false: unlink
};
struct SessionStart {
  std::string label;
  int via = 0;
};
struct SessionStop {
  std::string label;
  int via = 0;
};
struct JobStart {
  std::string label;
  std::string session;
  int via = 0;
  std::string target = "*";  // in the rack's own syntax: "*", or baseboards and cubbies
  std::string command = "true";
};
struct JobStop {
  std::string label;
  int via = 0;
};
struct Reset {
  int sled = 0;
};
struct Settle {};
struct Wait {
  int64_t ms = 0;
};
enum class DriveFault : uint8_t { kFail, kCorrupt, kWipe, kTear, kHeal, kNoSpace, kMissing };
struct Drive {
  int sled = 0;
  int drive = 0;  // 0 or 1
  DriveFault fault = DriveFault::kFail;
  // kTear: where the next locker write stops (0: drawn by the world's Rng).
  // Drive 0: 1 after the temporary file is written (before the rename), 2
  // after the rename (before the folder's fsync), 3 between the drives.
  // Drive 1: 1 before its rename, 2 before its folder's fsync.
  int point = 0;
};
struct LeftCap {  // `left-cap N`, or `session-cap N` (sessions: true)
  int cap = 0;
  bool sessions = false;
};
enum class RanCount : uint8_t { kNever, kOnce, kTwice };
struct ExpectRan {
  std::string job;
  int sled = 0;
  RanCount count = RanCount::kOnce;
};
struct ExpectStatus {
  std::string job;
  int sled = 0;
  std::string state;  // lowercase JobStateName, or "none"
};
struct ExpectTrust {
  int sled = 0;
  bool trusted = false;  // `expect refused` is false
};

using Step = std::variant<Sleds, Partition, Heal, Crash, Boot, WipeData, Move, Link, SessionStart,
                          SessionStop, JobStart, JobStop, Reset, Settle, Wait, Drive, LeftCap,
                          ExpectRan, ExpectStatus, ExpectTrust>;

struct Scenario {
  std::vector<Step> steps;
  std::vector<int> lines;  // the source line of each step (1-based), when parsed
};

Result<Scenario> ParseScenario(std::string_view text);
std::string FormatStep(const Step& step);
std::string FormatScenario(const Scenario& scenario);
std::string SledName(int sled);
std::string_view DriveFaultName(DriveFault fault);

}  // namespace once::sim
