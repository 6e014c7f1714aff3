// The locker on MemoryFs: every verdict under every fault. Each scenario is a
// row: a state the drives are left in by earlier processes, a fault, and what
// the next Open (and the one after the fault is healed) must decide. A
// trusted Open must leave both drives equal; a discarded one must write
// nothing; a tear by one process must never be discarded and never adopt
// anything but the old or the new record.

#include "once/locker/locker.h"

#include <gtest/gtest.h>

#include <ostream>
#include <string_view>

namespace once::locker {
namespace {

const std::filesystem::path kD0 = "/m2a/sush";
const std::filesystem::path kD1 = "/m2b/sush";
const std::array<std::filesystem::path, kSlots> kDrives = {kD0, kD1};

Bytes B(std::string_view text) { return Bytes(text.begin(), text.end()); }

// The records of the scenarios, by letter; '-' is none.
std::optional<Bytes> Rec(char name) {
  if (name == '-') return std::nullopt;
  return B(std::string("boundary ") + name);
}

class LockerTest : public ::testing::Test {
 protected:
  LockerTest() {
    fs_.MakeDirs(kD0);
    fs_.MakeDirs(kD1);
  }

  LockerOptions Options() { return {.slots = {kD0, kD1}, .fs = &fs_, .rng = &rng_}; }

  // A process starting up: Open must not fail (only configuration errors do).
  Opened Open() {
    auto opened = Locker::Open(Options());
    EXPECT_TRUE(opened) << opened.error().ToString();
    if (!opened) return {};
    EXPECT_NE(opened->locker, nullptr);
    return std::move(*opened);
  }

  // A process that opens and writes `records` in turn, then exits.
  void Life(std::initializer_list<char> records) {
    Opened opened = Open();
    ASSERT_NE(opened.verdict, Verdict::kDiscarded) << opened.reason;
    for (char r : records) ASSERT_TRUE(opened.locker->Write(*Rec(r)));
  }

  // What a drive's record file holds: nullopt if there is none; fails the
  // test if it does not decode.
  std::optional<Envelope> OnDrive(size_t drive) {
    auto read = fs_.Read(kDrives[drive] / "record", kEnvelopeBytesMax);
    EXPECT_TRUE(read) << read.error().ToString();
    if (!read || !*read) return std::nullopt;
    auto envelope = DecodeEnvelope(**read);
    EXPECT_TRUE(envelope) << envelope.error().ToString();
    if (!envelope) return std::nullopt;
    return *envelope;
  }

  // A trusted Open leaves both drives holding the same envelope: the adopted
  // record under this locker's nonce and sequence (or no record at all).
  void ExpectSettled(const Opened& opened) {
    ASSERT_NE(opened.verdict, Verdict::kDiscarded);
    const auto e0 = OnDrive(0);
    const auto e1 = OnDrive(1);
    EXPECT_EQ(e0, e1);
    if (opened.verdict == Verdict::kEmpty) {
      EXPECT_FALSE(e0.has_value());
      return;
    }
    ASSERT_TRUE(e0.has_value());
    EXPECT_EQ(e0->record, opened.record);
    EXPECT_EQ(e0->nonce, opened.locker->nonce());
    EXPECT_EQ(e0->sequence, opened.locker->sequence());
    for (const DriveHealth& drive : opened.drives) {
      EXPECT_EQ(drive.state, DriveState::kOk);
      EXPECT_EQ(drive.sequence, e0->sequence);
    }
    for (const auto& dir : kDrives) {
      for (const std::string& name : fs_.List(dir)) EXPECT_NE(name, "record.tmp");
    }
  }

  // Writes an envelope from a writer this test never ran (another nonce)
  // straight onto a drive, durably.
  void Plant(size_t drive, uint64_t sequence, char record) {
    Nonce stranger{};
    stranger.fill(0xee);
    auto bytes = EncodeEnvelope({.nonce = stranger, .sequence = sequence, .record = *Rec(record)});
    ASSERT_TRUE(bytes);
    ASSERT_TRUE(fs_.WriteSynced(kDrives[drive] / "record", *bytes, 0600));
    ASSERT_TRUE(fs_.SyncDir(kDrives[drive]));
  }

  MemoryFs fs_;
  SeededRng rng_{20240613};
};

// ---------------------------------------------------------------------------
// The matrix: starting state x fault.

enum class Start { kAdopted, kRestored, kEmpty, kTorn, kDiscarded };
enum class Fault {
  kNone,
  kFlip0,
  kFlip1,
  kWipe0,
  kWipe1,
  kWipeBoth,
  kMissing0,
  kMissing1,
  kEio0,
  kEio1,
  kNoSpace0,
  kNoSpace1,
};

std::string_view StartName(Start s) {
  constexpr std::string_view kNames[] = {"adopted", "restored", "empty", "torn", "discarded"};
  return kNames[static_cast<int>(s)];
}
std::string_view FaultName(Fault f) {
  constexpr std::string_view kNames[] = {"none",  "flip0",    "flip1",    "wipe0",
                                         "wipe1", "wipeboth", "missing0", "missing1",
                                         "eio0",  "eio1",     "nospace0", "nospace1"};
  return kNames[static_cast<int>(f)];
}

// The drive a fault hits (2: both or none).
size_t FaultDrive(Fault f) {
  switch (f) {
    case Fault::kFlip0:
    case Fault::kWipe0:
    case Fault::kMissing0:
    case Fault::kEio0:
    case Fault::kNoSpace0:
      return 0;
    case Fault::kFlip1:
    case Fault::kWipe1:
    case Fault::kMissing1:
    case Fault::kEio1:
    case Fault::kNoSpace1:
      return 1;
    default:
      return 2;
  }
}

struct MatrixRow {
  Start start;
  Fault fault;
  Verdict verdict;  // of the Open under the fault
  char record;
  Verdict healed_verdict;  // of the Open after that process exits and the fault is healed
  char healed_record;
};

constexpr Verdict kAdo = Verdict::kAdopted;
constexpr Verdict kRes = Verdict::kRestored;
constexpr Verdict kEmp = Verdict::kEmpty;
constexpr Verdict kTor = Verdict::kTorn;
constexpr Verdict kDis = Verdict::kDiscarded;

// Adopted: both drives (n1, 1, A). Restored: drive 0 (n1, 1, A), drive 1 no
// file. Empty: no files. Torn: drive 0 (n1, 2, B), drive 1 (n1, 1, A).
// Discarded: drive 0 (n1, 1, A), drive 1 (stranger, 5, C). A flip hits drive
// N's record file; a wipe deletes its files; missing removes its folder (healed:
// an empty folder, a replaced drive); EIO fails every operation on it; no
// space fails its writes (the claim). Rows that need a file a state lacks
// (a flip in an empty slot) are left out.
const MatrixRow kMatrix[] = {
    {Start::kAdopted, Fault::kNone, kAdo, 'A', kAdo, 'A'},
    {Start::kAdopted, Fault::kFlip0, kDis, '-', kDis, '-'},
    {Start::kAdopted, Fault::kFlip1, kDis, '-', kDis, '-'},
    {Start::kAdopted, Fault::kWipe0, kRes, 'A', kAdo, 'A'},
    {Start::kAdopted, Fault::kWipe1, kRes, 'A', kAdo, 'A'},
    {Start::kAdopted, Fault::kWipeBoth, kEmp, '-', kEmp, '-'},
    {Start::kAdopted, Fault::kMissing0, kDis, '-', kRes, 'A'},
    {Start::kAdopted, Fault::kMissing1, kDis, '-', kRes, 'A'},
    {Start::kAdopted, Fault::kEio0, kDis, '-', kAdo, 'A'},
    {Start::kAdopted, Fault::kEio1, kDis, '-', kAdo, 'A'},
    {Start::kAdopted, Fault::kNoSpace0, kDis, '-', kAdo, 'A'},
    {Start::kAdopted, Fault::kNoSpace1, kDis, '-', kAdo, 'A'},

    {Start::kRestored, Fault::kNone, kRes, 'A', kAdo, 'A'},
    {Start::kRestored, Fault::kFlip0, kDis, '-', kDis, '-'},
    {Start::kRestored, Fault::kWipe0, kEmp, '-', kEmp, '-'},
    {Start::kRestored, Fault::kWipe1, kRes, 'A', kAdo, 'A'},
    {Start::kRestored, Fault::kWipeBoth, kEmp, '-', kEmp, '-'},
    {Start::kRestored, Fault::kMissing0, kDis, '-', kEmp, '-'},
    {Start::kRestored, Fault::kMissing1, kDis, '-', kRes, 'A'},
    {Start::kRestored, Fault::kEio0, kDis, '-', kRes, 'A'},
    {Start::kRestored, Fault::kEio1, kDis, '-', kRes, 'A'},
    // The claim repairs drive 1 first: it lands, then drive 0 fails.
    {Start::kRestored, Fault::kNoSpace0, kDis, '-', kAdo, 'A'},
    {Start::kRestored, Fault::kNoSpace1, kDis, '-', kRes, 'A'},

    {Start::kEmpty, Fault::kNone, kEmp, '-', kEmp, '-'},
    {Start::kEmpty, Fault::kWipe0, kEmp, '-', kEmp, '-'},
    {Start::kEmpty, Fault::kWipe1, kEmp, '-', kEmp, '-'},
    {Start::kEmpty, Fault::kWipeBoth, kEmp, '-', kEmp, '-'},
    {Start::kEmpty, Fault::kMissing0, kDis, '-', kEmp, '-'},
    {Start::kEmpty, Fault::kMissing1, kDis, '-', kEmp, '-'},
    {Start::kEmpty, Fault::kEio0, kDis, '-', kEmp, '-'},
    {Start::kEmpty, Fault::kEio1, kDis, '-', kEmp, '-'},
    {Start::kEmpty, Fault::kNoSpace0, kEmp, '-', kEmp, '-'},  // nothing to write
    {Start::kEmpty, Fault::kNoSpace1, kEmp, '-', kEmp, '-'},

    {Start::kTorn, Fault::kNone, kTor, 'B', kAdo, 'B'},
    {Start::kTorn, Fault::kFlip0, kDis, '-', kDis, '-'},
    {Start::kTorn, Fault::kFlip1, kDis, '-', kDis, '-'},
    {Start::kTorn, Fault::kWipe0, kRes, 'A', kAdo, 'A'},  // the newer copy is gone with its drive
    {Start::kTorn, Fault::kWipe1, kRes, 'B', kAdo, 'B'},
    {Start::kTorn, Fault::kWipeBoth, kEmp, '-', kEmp, '-'},
    {Start::kTorn, Fault::kMissing0, kDis, '-', kRes, 'A'},
    {Start::kTorn, Fault::kMissing1, kDis, '-', kRes, 'B'},
    {Start::kTorn, Fault::kEio0, kDis, '-', kTor, 'B'},
    {Start::kTorn, Fault::kEio1, kDis, '-', kTor, 'B'},
    // The claim repairs the older drive 1 first.
    {Start::kTorn, Fault::kNoSpace0, kDis, '-', kAdo, 'B'},
    {Start::kTorn, Fault::kNoSpace1, kDis, '-', kTor, 'B'},

    {Start::kDiscarded, Fault::kNone, kDis, '-', kDis, '-'},
    {Start::kDiscarded, Fault::kFlip0, kDis, '-', kDis, '-'},
    {Start::kDiscarded, Fault::kFlip1, kDis, '-', kDis, '-'},
    {Start::kDiscarded, Fault::kWipe0, kRes, 'C', kAdo, 'C'},
    {Start::kDiscarded, Fault::kWipe1, kRes, 'A', kAdo, 'A'},
    {Start::kDiscarded, Fault::kWipeBoth, kEmp, '-', kEmp, '-'},
    {Start::kDiscarded, Fault::kMissing0, kDis, '-', kRes, 'C'},
    {Start::kDiscarded, Fault::kMissing1, kDis, '-', kRes, 'A'},
    {Start::kDiscarded, Fault::kEio0, kDis, '-', kDis, '-'},
    {Start::kDiscarded, Fault::kEio1, kDis, '-', kDis, '-'},
    {Start::kDiscarded, Fault::kNoSpace0, kDis, '-', kDis, '-'},
    {Start::kDiscarded, Fault::kNoSpace1, kDis, '-', kDis, '-'},
};

// Builds the starting states, applies and heals the faults, checks an Open.
class ScenarioTest : public LockerTest {
 protected:
  void Build(Start start) {
    if (start == Start::kEmpty) return;
    Life({'A'});
    switch (start) {
      case Start::kRestored:
        fs_.Wipe(kD1);
        break;
      case Start::kTorn: {
        Opened opened = Open();
        fs_.CrashAfter(3);  // drive 0 done, drive 1 not begun
        ASSERT_FALSE(opened.locker->Write(*Rec('B')));
        fs_.Crash();
        break;
      }
      case Start::kDiscarded:
        Plant(1, 5, 'C');
        break;
      default:
        break;
    }
  }

  void Apply(Fault fault) {
    const size_t d = FaultDrive(fault);
    switch (fault) {
      case Fault::kFlip0:
      case Fault::kFlip1:
        ASSERT_TRUE(fs_.FlipBit(kDrives[d] / "record", 8 * 40 + 3));
        break;
      case Fault::kWipe0:
      case Fault::kWipe1:
        fs_.Wipe(kDrives[d]);
        break;
      case Fault::kWipeBoth:
        fs_.Wipe(kD0);
        fs_.Wipe(kD1);
        break;
      case Fault::kMissing0:
      case Fault::kMissing1:
        fs_.RemoveDir(kDrives[d]);
        break;
      case Fault::kEio0:
      case Fault::kEio1:
        fs_.Fail(kDrives[d], true);
        break;
      case Fault::kNoSpace0:
      case Fault::kNoSpace1:
        fs_.NoSpace(kDrives[d], true);
        break;
      default:
        break;
    }
  }

  void Heal(Fault fault) {
    const size_t d = FaultDrive(fault);
    if (fault == Fault::kMissing0 || fault == Fault::kMissing1) fs_.MakeDirs(kDrives[d]);
    if (fault == Fault::kEio0 || fault == Fault::kEio1) fs_.Fail(kDrives[d], false);
    if (fault == Fault::kNoSpace0 || fault == Fault::kNoSpace1) fs_.NoSpace(kDrives[d], false);
  }

  // What a discard says about the faulted drive.
  void ExpectBlamed(const Opened& opened, Fault fault) {
    const size_t d = FaultDrive(fault);
    if (d == kSlots) return;
    const std::string label = "drive " + std::to_string(d) + " (" + kDrives[d].string() + ")";
    EXPECT_NE(opened.reason.find(label), std::string::npos) << opened.reason;
    const DriveHealth& health = opened.drives[d];
    EXPECT_FALSE(health.message.empty());
    switch (fault) {
      case Fault::kFlip0:
      case Fault::kFlip1:
        EXPECT_EQ(health.state, DriveState::kCorrupt);
        EXPECT_NE(opened.reason.find("digest mismatch"), std::string::npos);
        break;
      case Fault::kMissing0:
      case Fault::kMissing1:
        EXPECT_EQ(health.state, DriveState::kMissingFolder);
        EXPECT_NE(opened.reason.find("folder missing"), std::string::npos);
        break;
      case Fault::kEio0:
      case Fault::kEio1:
        EXPECT_EQ(health.state, DriveState::kIoError);
        EXPECT_NE(opened.reason.find("EIO"), std::string::npos);
        break;
      case Fault::kNoSpace0:
      case Fault::kNoSpace1:
        EXPECT_EQ(health.state, DriveState::kIoError);
        EXPECT_TRUE(health.last_write_error.has_value());
        EXPECT_NE(opened.reason.find("claim failed"), std::string::npos);
        EXPECT_NE(opened.reason.find("ENOSPC"), std::string::npos);
        break;
      default:
        break;
    }
  }

  // Checks one Open against the row's expectation.
  void Expect(const Opened& opened, Verdict verdict, char record, size_t ops_before) {
    EXPECT_EQ(VerdictName(opened.verdict), VerdictName(verdict)) << opened.reason;
    EXPECT_EQ(opened.record, Rec(record));
    if (opened.verdict != Verdict::kDiscarded) {
      EXPECT_TRUE(opened.locker->trusted());
      ExpectSettled(opened);
      return;
    }
    EXPECT_FALSE(opened.locker->trusted());
    EXPECT_FALSE(opened.reason.empty());
    EXPECT_EQ(opened.locker->reason(), opened.reason);
    // A discard writes nothing, unless it comes from a claim that failed.
    if (opened.reason.find("claim failed") == std::string::npos) {
      EXPECT_EQ(fs_.mutating_ops(), ops_before) << opened.reason;
    }
    // And refuses every write.
    const size_t ops = fs_.mutating_ops();
    Status refused = opened.locker->Write(B("anything"));
    ASSERT_FALSE(refused);
    EXPECT_EQ(refused.error().code, ErrorCode::kPermissionDenied);
    EXPECT_EQ(fs_.mutating_ops(), ops);
  }
};

void PrintTo(const MatrixRow& row, std::ostream* os) {
  *os << StartName(row.start) << " under " << FaultName(row.fault);
}

class MatrixTest : public ScenarioTest, public ::testing::WithParamInterface<MatrixRow> {};

TEST_P(MatrixTest, VerdictUnderFaultThenHealed) {
  const MatrixRow& row = GetParam();
  Build(row.start);
  Apply(row.fault);
  {
    size_t ops = fs_.mutating_ops();
    Opened opened = Open();
    Expect(opened, row.verdict, row.record, ops);
    // Drives that disagree are discarded before any write: no space is never seen.
    const bool no_space = row.fault == Fault::kNoSpace0 || row.fault == Fault::kNoSpace1;
    if (opened.verdict == Verdict::kDiscarded && !(row.start == Start::kDiscarded && no_space)) {
      ExpectBlamed(opened, row.fault);
    }
    if (row.start == Start::kDiscarded && row.fault == Fault::kNone) {
      EXPECT_NE(opened.reason.find("drives disagree: different writers"), std::string::npos)
          << opened.reason;
    }
  }  // the process exits
  Heal(row.fault);
  size_t ops = fs_.mutating_ops();
  Opened healed = Open();
  Expect(healed, row.healed_verdict, row.healed_record, ops);
}

INSTANTIATE_TEST_SUITE_P(EveryStartUnderEveryFault, MatrixTest, ::testing::ValuesIn(kMatrix),
                         [](const auto& info) {
                           return std::string(StartName(info.param.start)) + "_" +
                                  std::string(FaultName(info.param.fault));
                         });

// ---------------------------------------------------------------------------
// A write torn at every point, then a power loss.

struct TearRow {
  bool from_empty;  // the locker opened on empty drives (no claim), else on A
  size_t crash_after;
  bool keep_volatile;  // CrashKeepingVolatile instead of Crash
  Verdict verdict;
  char record;
};

// The write of B is WriteSynced(tmp), Rename, SyncDir on drive 0, then the
// same on drive 1: 1 tears between write and rename on drive 0, 3 between
// the drives, 4 between write and rename on drive 1, 6 lets it finish.
const TearRow kTears[] = {
    {false, 0, false, kAdo, 'A'},
    {false, 1, false, kAdo, 'A'},
    {false, 2, false, kAdo, 'A'},
    {false, 3, false, kTor, 'B'},
    {false, 4, false, kTor, 'B'},
    {false, 5, false, kTor, 'B'},
    {false, 6, false, kAdo, 'B'},
    // The file system kept every unsynced entry: the rename counts from op 2.
    {false, 0, true, kAdo, 'A'},
    {false, 1, true, kAdo, 'A'},
    {false, 2, true, kTor, 'B'},
    {false, 3, true, kTor, 'B'},
    {false, 4, true, kTor, 'B'},
    {false, 5, true, kAdo, 'B'},
    {false, 6, true, kAdo, 'B'},
    // The very first write of a new sled.
    {true, 0, false, kEmp, '-'},
    {true, 1, false, kEmp, '-'},
    {true, 2, false, kEmp, '-'},
    {true, 3, false, kRes, 'B'},
    {true, 4, false, kRes, 'B'},
    {true, 5, false, kRes, 'B'},
    {true, 6, false, kAdo, 'B'},
    {true, 0, true, kEmp, '-'},
    {true, 1, true, kEmp, '-'},
    {true, 2, true, kRes, 'B'},
    {true, 3, true, kRes, 'B'},
    {true, 4, true, kRes, 'B'},
    {true, 5, true, kAdo, 'B'},
    {true, 6, true, kAdo, 'B'},
};

void PrintTo(const TearRow& row, std::ostream* os) {
  *os << (row.from_empty ? "first write" : "later write") << " torn after " << row.crash_after
      << (row.keep_volatile ? ", volatile entries kept" : ", volatile entries dropped");
}

class TearTest : public LockerTest, public ::testing::WithParamInterface<TearRow> {};

TEST_P(TearTest, TheNextOpenAdoptsTheOldOrTheNewRecord) {
  const TearRow& row = GetParam();
  if (!row.from_empty) Life({'A'});
  {
    Opened opened = Open();
    const size_t before = fs_.mutating_ops();
    fs_.CrashAfter(row.crash_after);
    Status written = opened.locker->Write(*Rec('B'));
    EXPECT_EQ(written.has_value(), row.crash_after >= 6);
    if (!written) {
      EXPECT_EQ(written.error().code, ErrorCode::kUnavailable);
      EXPECT_NE(written.error().message.find("crashed"), std::string::npos);
      EXPECT_EQ(fs_.mutating_ops() - before, row.crash_after);
    }
    if (row.keep_volatile) {
      fs_.CrashKeepingVolatile();
    } else {
      fs_.Crash();
    }
  }
  Opened opened = Open();
  EXPECT_EQ(VerdictName(opened.verdict), VerdictName(row.verdict)) << opened.reason;
  EXPECT_EQ(opened.record, Rec(row.record));
  ExpectSettled(opened);
}

INSTANTIATE_TEST_SUITE_P(EveryCrashPoint, TearTest, ::testing::ValuesIn(kTears),
                         [](const auto& info) {
                           return std::string(info.param.from_empty ? "first" : "later") +
                                  "_after" + std::to_string(info.param.crash_after) +
                                  (info.param.keep_volatile ? "_kept" : "_dropped");
                         });

// ---------------------------------------------------------------------------
// Open's own claim torn at every point: Remove(tmp) twice, then the claim's
// six operations, the repaired drive first.

struct ClaimTearRow {
  Start start;
  Verdict dropped[9];  // the next Open's verdict after CrashAfter(k), k = 0..8, then Crash
  Verdict kept[9];     // the same with CrashKeepingVolatile
  char record;
};

const ClaimTearRow kClaimTears[] = {
    {Start::kAdopted,
     {kAdo, kAdo, kAdo, kAdo, kAdo, kAdo, kAdo, kAdo, kAdo},
     {kAdo, kAdo, kAdo, kAdo, kAdo, kAdo, kAdo, kAdo, kAdo},
     'A'},
    {Start::kRestored,
     {kRes, kRes, kRes, kRes, kRes, kAdo, kAdo, kAdo, kAdo},
     {kRes, kRes, kRes, kRes, kAdo, kAdo, kAdo, kAdo, kAdo},
     'A'},
    {Start::kTorn,
     {kTor, kTor, kTor, kTor, kTor, kAdo, kAdo, kAdo, kAdo},
     {kTor, kTor, kTor, kTor, kAdo, kAdo, kAdo, kAdo, kAdo},
     'B'},
    {Start::kEmpty,
     {kEmp, kEmp, kEmp, kEmp, kEmp, kEmp, kEmp, kEmp, kEmp},
     {kEmp, kEmp, kEmp, kEmp, kEmp, kEmp, kEmp, kEmp, kEmp},
     '-'},
};

TEST_F(ScenarioTest, ACrashInsideOpenNeverTurnsIntoADiscard) {
  for (const ClaimTearRow& row : kClaimTears) {
    for (bool keep : {false, true}) {
      for (size_t k = 0; k <= 8; ++k) {
        SCOPED_TRACE(std::string(StartName(row.start)) + " k=" + std::to_string(k) +
                     (keep ? " kept" : " dropped"));
        fs_.RemoveDir("/m2a");
        fs_.RemoveDir("/m2b");
        fs_.Crash();
        fs_.MakeDirs(kD0);
        fs_.MakeDirs(kD1);
        Build(row.start);
        fs_.CrashAfter(k);
        {
          Opened first = Open();
          const size_t ops_max = row.start == Start::kEmpty ? 2 : 8;
          EXPECT_EQ(first.verdict == Verdict::kDiscarded, k < ops_max) << first.reason;
          if (keep) {
            fs_.CrashKeepingVolatile();
          } else {
            fs_.Crash();
          }
        }
        Opened next = Open();
        const Verdict expected = keep ? row.kept[k] : row.dropped[k];
        EXPECT_EQ(VerdictName(next.verdict), VerdictName(expected)) << next.reason;
        EXPECT_EQ(next.record, Rec(row.record));
        ExpectSettled(next);
      }
    }
  }
}

// ---------------------------------------------------------------------------
// Bit flips anywhere in either drive's file.

TEST_F(LockerTest, EveryBitFlipInEitherDriveIsADiscardNamingIt) {
  Life({'A'});
  const size_t bits = 8 * (kEnvelopeOverheadBytes + Rec('A')->size());
  for (size_t d = 0; d < kSlots; ++d) {
    for (size_t bit = 0; bit < bits; ++bit) {
      ASSERT_TRUE(fs_.FlipBit(kDrives[d] / "record", bit));
      {
        Opened opened = Open();
        ASSERT_EQ(opened.verdict, Verdict::kDiscarded) << "drive " << d << " bit " << bit;
        EXPECT_EQ(opened.drives[d].state, DriveState::kCorrupt);
        EXPECT_EQ(opened.drives[1 - d].state, DriveState::kOk);
        EXPECT_EQ(
            opened.reason.find("drive " + std::to_string(d) + " (" + kDrives[d].string() + "): "),
            0u)
            << opened.reason;
      }
      ASSERT_TRUE(fs_.FlipBit(kDrives[d] / "record", bit));  // flip it back
    }
  }
  Opened opened = Open();
  EXPECT_EQ(opened.verdict, Verdict::kAdopted);
}

TEST_F(LockerTest, AnOversizeRecordFileIsCorrupt) {
  Life({'A'});
  ASSERT_TRUE(fs_.WriteSynced(kD1 / "record", Bytes(kEnvelopeBytesMax + 1), 0600));
  Opened opened = Open();
  EXPECT_EQ(opened.verdict, Verdict::kDiscarded);
  EXPECT_EQ(opened.drives[1].state, DriveState::kCorrupt);
  EXPECT_NE(opened.reason.find("envelope_bytes_max"), std::string::npos);
}

// ---------------------------------------------------------------------------
// Writes that fail on a drive (no crash): the error, and the next Open.

struct WriteFaultRow {
  bool no_space;  // ENOSPC, else EIO
  size_t drive;
  Verdict while_faulty;  // the next Open's verdict with the fault still on
  Verdict healed;        // and once it is healed
  char healed_record;
};

const WriteFaultRow kWriteFaults[] = {
    {true, 0, kDis, kAdo, 'A'},   // nothing reached drive 0; the claim cannot write it
    {true, 1, kDis, kTor, 'B'},   // drive 0 holds B; the repair of drive 1 cannot write
    {false, 0, kDis, kAdo, 'A'},  // drive 0 cannot be read
    {false, 1, kDis, kTor, 'B'},
};

void PrintTo(const WriteFaultRow& row, std::ostream* os) {
  *os << (row.no_space ? "ENOSPC" : "EIO") << " on drive " << row.drive;
}

class WriteFaultTest : public LockerTest, public ::testing::WithParamInterface<WriteFaultRow> {};

TEST_P(WriteFaultTest, WriteErrorsAndTheNextOpenDecides) {
  const WriteFaultRow& row = GetParam();
  Life({'A'});
  const std::filesystem::path& dir = kDrives[row.drive];
  auto inject = [&](bool on) { row.no_space ? fs_.NoSpace(dir, on) : fs_.Fail(dir, on); };
  {
    Opened opened = Open();
    inject(true);
    Status written = opened.locker->Write(*Rec('B'));
    ASSERT_FALSE(written);
    EXPECT_EQ(written.error().code, ErrorCode::kUnavailable);
    const std::string label = "drive " + std::to_string(row.drive) + " (" + dir.string() + "): ";
    EXPECT_EQ(written.error().message.find(label), 0u) << written.error().message;
    EXPECT_NE(written.error().message.find(row.no_space ? "ENOSPC" : "EIO"), std::string::npos);
    const DriveHealth& health = opened.locker->drives()[row.drive];
    EXPECT_EQ(health.state, DriveState::kIoError);
    ASSERT_TRUE(health.last_write_error.has_value());
    EXPECT_EQ(health.last_write_error->message, written.error().message);
    EXPECT_TRUE(opened.locker->trusted());  // a failed write is the caller's to handle
  }
  {
    Opened opened = Open();
    EXPECT_EQ(VerdictName(opened.verdict), VerdictName(row.while_faulty)) << opened.reason;
    EXPECT_NE(opened.reason.find("drive " + std::to_string(row.drive)), std::string::npos);
  }
  inject(false);
  Opened opened = Open();
  EXPECT_EQ(VerdictName(opened.verdict), VerdictName(row.healed)) << opened.reason;
  EXPECT_EQ(opened.record, Rec(row.healed_record));
  ExpectSettled(opened);
}

INSTANTIATE_TEST_SUITE_P(NoSpaceAndEio, WriteFaultTest, ::testing::ValuesIn(kWriteFaults),
                         [](const auto& info) {
                           return std::string(info.param.no_space ? "enospc" : "eio") + "_drive" +
                                  std::to_string(info.param.drive);
                         });

TEST_F(LockerTest, AWriteAfterAFailedOneUsesAHigherSequenceAndSettlesBothDrives) {
  Life({'A'});
  Opened opened = Open();
  fs_.NoSpace(kD1, true);
  ASSERT_FALSE(opened.locker->Write(*Rec('B')));
  const uint64_t consumed = opened.locker->sequence();
  EXPECT_EQ(OnDrive(0)->sequence, consumed);  // drive 0 took B
  fs_.NoSpace(kD1, false);
  ASSERT_TRUE(opened.locker->Write(*Rec('C')));
  EXPECT_EQ(opened.locker->sequence(), consumed + 1);
  EXPECT_EQ(OnDrive(0), OnDrive(1));
  EXPECT_EQ(opened.locker->drives()[1].state, DriveState::kOk);
  opened.locker.reset();
  Opened next = Open();
  EXPECT_EQ(next.verdict, Verdict::kAdopted);
  EXPECT_EQ(next.record, Rec('C'));
}

// ---------------------------------------------------------------------------
// Writers, resets, sequences, limits.

TEST_F(LockerTest, ADriveRestoredFromAnOlderBackupIsADiscard) {
  Life({'A'});
  const Bytes backup = **fs_.Read(kD1 / "record", kEnvelopeBytesMax);
  Life({'B'});  // a later process: its claim and B carry another nonce
  ASSERT_TRUE(fs_.WriteSynced(kD1 / "record", backup, 0600));
  Opened opened = Open();
  EXPECT_EQ(opened.verdict, Verdict::kDiscarded);
  EXPECT_EQ(opened.record, std::nullopt);
  EXPECT_NE(opened.reason.find("drives disagree: different writers"), std::string::npos)
      << opened.reason;
}

TEST_F(LockerTest, OneWriterWithTwoRecordsAtOneSequenceIsADiscard) {
  Life({'A'});
  const Envelope e0 = *OnDrive(0);
  auto other = EncodeEnvelope({.nonce = e0.nonce, .sequence = e0.sequence, .record = *Rec('Z')});
  ASSERT_TRUE(fs_.WriteSynced(kD1 / "record", *other, 0600));
  Opened opened = Open();
  EXPECT_EQ(opened.verdict, Verdict::kDiscarded);
  EXPECT_NE(opened.reason.find("one writer, two records at one sequence"), std::string::npos)
      << opened.reason;
}

TEST_F(LockerTest, EqualRecordsUnderDifferentWritersAreAdoptedAndEqualized) {
  Life({'A'});
  Plant(1, 99, 'A');
  Opened opened = Open();
  EXPECT_EQ(opened.verdict, Verdict::kAdopted);
  EXPECT_EQ(opened.record, Rec('A'));
  EXPECT_GT(opened.locker->sequence(), 99u);  // above both drives'
  ExpectSettled(opened);
}

TEST_F(LockerTest, ResetAfterADiscardMakesTheLockerHealthyAndTheNextOpenAdopts) {
  Life({'A'});
  Plant(1, 50, 'C');
  {
    Opened opened = Open();
    ASSERT_EQ(opened.verdict, Verdict::kDiscarded);
    ASSERT_TRUE(opened.locker->Reset(*Rec('R')));
    EXPECT_TRUE(opened.locker->trusted());
    EXPECT_TRUE(opened.locker->reason().empty());
    EXPECT_GT(opened.locker->sequence(), 50u);
    EXPECT_EQ(OnDrive(0), OnDrive(1));
    EXPECT_EQ(OnDrive(0)->nonce, opened.locker->nonce());
    ASSERT_TRUE(opened.locker->Write(*Rec('S')));
  }
  Opened opened = Open();
  EXPECT_EQ(opened.verdict, Verdict::kAdopted);
  EXPECT_EQ(opened.record, Rec('S'));
}

TEST_F(LockerTest, ResetWaitsForAMissingDriveToBeReplaced) {
  Life({'A'});
  fs_.RemoveDir(kD1);
  Opened opened = Open();
  ASSERT_EQ(opened.verdict, Verdict::kDiscarded);
  Status refused = opened.locker->Reset(*Rec('R'));
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().code, ErrorCode::kNotFound);
  EXPECT_NE(refused.error().message.find("drive 1 (/m2b/sush): folder missing"), std::string::npos)
      << refused.error().message;
  EXPECT_FALSE(opened.locker->trusted());
  fs_.MakeDirs(kD1);  // a new drive
  ASSERT_TRUE(opened.locker->Reset(*Rec('R')));
  opened.locker.reset();
  Opened next = Open();
  EXPECT_EQ(next.verdict, Verdict::kAdopted);
  EXPECT_EQ(next.record, Rec('R'));
}

TEST_F(LockerTest, AResetThatFailsLeavesTheLockerUntrusted) {
  Life({'A'});
  Plant(1, 5, 'C');
  Opened opened = Open();
  ASSERT_EQ(opened.verdict, Verdict::kDiscarded);
  fs_.Fail(kD1, true);
  EXPECT_FALSE(opened.locker->Reset(*Rec('R')));
  EXPECT_FALSE(opened.locker->trusted());
  EXPECT_FALSE(opened.locker->Write(*Rec('S')));
  fs_.Fail(kD1, false);
  EXPECT_TRUE(opened.locker->Reset(*Rec('R')));
  EXPECT_TRUE(opened.locker->Write(*Rec('S')));
}

TEST_F(LockerTest, SequencesOnTheDrivesOnlyEverGrow) {
  uint64_t last = 0;
  auto observe = [&] {
    for (size_t d = 0; d < kSlots; ++d) {
      if (auto e = OnDrive(d)) {
        EXPECT_GE(e->sequence, last);
      }
    }
    const auto e0 = OnDrive(0);
    const auto e1 = OnDrive(1);
    const uint64_t now = std::max(e0 ? e0->sequence : 0, e1 ? e1->sequence : 0);
    EXPECT_GT(now, last);
    last = now;
  };
  for (int life = 0; life < 12; ++life) {
    Opened opened = Open();
    ASSERT_NE(opened.verdict, Verdict::kDiscarded) << opened.reason;
    if (opened.verdict != Verdict::kEmpty) observe();  // the claim
    for (int w = 0; w < 3; ++w) {
      if (life % 4 == 3 && w == 1) fs_.CrashAfter(3 + life % 3);  // now and then a torn write
      Status written =
          opened.locker->Write(B("life " + std::to_string(life) + " write " + std::to_string(w)));
      if (!written) break;
      observe();
    }
    fs_.Crash();
  }
}

TEST_F(LockerTest, RecordsUpToTheLimitAreKeptAndLargerOnesRefusedBeforeAnyWrite) {
  Opened opened = Open();
  Bytes biggest(kRecordBytesMax);
  for (size_t i = 0; i < biggest.size(); ++i) biggest[i] = static_cast<uint8_t>(i ^ (i >> 8));
  ASSERT_TRUE(opened.locker->Write(biggest));
  const size_t ops = fs_.mutating_ops();
  const uint64_t sequence = opened.locker->sequence();
  Status refused = opened.locker->Write(Bytes(kRecordBytesMax + 1));
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().code, ErrorCode::kLimitExceeded);
  EXPECT_EQ(refused.error().As<LimitDetail>()->limit, "record_bytes_max");
  EXPECT_EQ(fs_.mutating_ops(), ops);
  EXPECT_EQ(opened.locker->sequence(), sequence);
  opened.locker.reset();
  Opened next = Open();
  EXPECT_EQ(next.verdict, Verdict::kAdopted);
  EXPECT_EQ(next.record, biggest);
}

TEST_F(LockerTest, AWriteCostsFourSyncsAndTwoRenames) {
  Opened opened = Open();
  const size_t ops = fs_.mutating_ops();
  ASSERT_TRUE(opened.locker->Write(*Rec('A')));
  EXPECT_EQ(fs_.mutating_ops() - ops, 6u);  // 2 x (WriteSynced, Rename, SyncDir)
}

// ---------------------------------------------------------------------------
// Open's housekeeping and its configuration errors.

TEST_F(LockerTest, LeftoverTempFilesAreRemovedAtOpenButNotInADiscard) {
  for (const auto& dir : kDrives) {
    ASSERT_TRUE(fs_.WriteSynced(dir / "record.tmp", B("half a write"), 0600));
    ASSERT_TRUE(fs_.SyncDir(dir));
  }
  {
    Opened opened = Open();
    EXPECT_EQ(opened.verdict, Verdict::kEmpty);
    EXPECT_EQ(fs_.List(kD0), std::vector<std::string>{"record.lock"});
    EXPECT_EQ(fs_.List(kD1), std::vector<std::string>{"record.lock"});
  }
  Life({'A'});
  Plant(1, 5, 'C');
  ASSERT_TRUE(fs_.WriteSynced(kD0 / "record.tmp", B("half a write"), 0600));
  Opened opened = Open();
  ASSERT_EQ(opened.verdict, Verdict::kDiscarded);
  EXPECT_TRUE(fs_.Read(kD0 / "record.tmp", 100).value().has_value());
}

TEST_F(LockerTest, ASecondLockerOnTheSameDrivesIsRefused) {
  Opened first = Open();
  auto second = Locker::Open(Options());
  ASSERT_FALSE(second);
  EXPECT_EQ(second.error().code, ErrorCode::kPermissionDenied);
  EXPECT_NE(second.error().message.find("drive 0 (/m2a/sush)"), std::string::npos)
      << second.error().message;
  // Sharing only drive 1 is refused as well.
  fs_.MakeDirs("/m2c/sush");
  auto third = Locker::Open({.slots = {"/m2c/sush", kD1}, .fs = &fs_, .rng = &rng_});
  ASSERT_FALSE(third);
  EXPECT_EQ(third.error().code, ErrorCode::kPermissionDenied);
  EXPECT_NE(third.error().message.find("drive 1 (/m2b/sush)"), std::string::npos);
  first.locker.reset();
  EXPECT_TRUE(Locker::Open(Options()));
}

TEST_F(LockerTest, ConfigurationErrorsAreInvalidArgument) {
  std::vector<LockerOptions> bad;
  bad.push_back({.slots = {kD0}, .fs = &fs_, .rng = &rng_});
  bad.push_back({.slots = {kD0, kD1, "/m2c"}, .fs = &fs_, .rng = &rng_});
  bad.push_back({.slots = {kD0, kD1}, .fs = nullptr, .rng = &rng_});
  bad.push_back({.slots = {kD0, kD1}, .fs = &fs_, .rng = nullptr});
  bad.push_back({.slots = {kD0, "/m2a/sush/"}, .fs = &fs_, .rng = &rng_});
  bad.push_back({.slots = {kD0, ""}, .fs = &fs_, .rng = &rng_});
  for (const char* name : {"", ".", "..", "a/b"}) {
    bad.push_back({.slots = {kD0, kD1}, .fs = &fs_, .rng = &rng_, .record_name = name});
  }
  for (const LockerOptions& options : bad) {
    auto opened = Locker::Open(options);
    ASSERT_FALSE(opened);
    EXPECT_EQ(opened.error().code, ErrorCode::kInvalidArgument) << opened.error().ToString();
  }
}

TEST_F(LockerTest, TheRecordNameNamesEveryFile) {
  LockerOptions options = Options();
  options.record_name = "boundary";
  auto opened = Locker::Open(options);
  ASSERT_TRUE(opened);
  ASSERT_TRUE(opened->locker->Write(B("x")));
  EXPECT_EQ(fs_.List(kD0), (std::vector<std::string>{"boundary", "boundary.lock"}));
}

TEST_F(LockerTest, TheSameSeedWritesTheSameBytes) {
  auto run = [](uint64_t seed) {
    MemoryFs fs;
    fs.MakeDirs(kD0);
    fs.MakeDirs(kD1);
    SeededRng rng(seed);
    for (int life = 0; life < 3; ++life) {
      auto opened = Locker::Open({.slots = {kD0, kD1}, .fs = &fs, .rng = &rng});
      EXPECT_TRUE(opened && opened->locker->Write(B("r" + std::to_string(life))));
    }
    return **fs.Read(kD1 / "record", kEnvelopeBytesMax);
  };
  EXPECT_EQ(run(1), run(1));
  EXPECT_NE(run(1), run(2));  // the nonce comes from the Rng
}

TEST_F(LockerTest, DriveHealthReportsWhatOpenSaw) {
  Life({'A'});
  fs_.Wipe(kD1);
  Opened opened = Open();
  ASSERT_EQ(opened.verdict, Verdict::kRestored);
  EXPECT_EQ(opened.drives[0].path, kD0);
  EXPECT_EQ(opened.drives[1].path, kD1);
  // Both repaired by the claim.
  EXPECT_EQ(opened.drives[0].state, DriveState::kOk);
  EXPECT_EQ(opened.drives[1].state, DriveState::kOk);
  EXPECT_EQ(opened.drives[1].sequence, opened.locker->sequence());
  EXPECT_EQ(DriveStateName(DriveState::kMissingFolder), "missing folder");
  EXPECT_EQ(VerdictName(Verdict::kTorn), "torn");
}

}  // namespace
}  // namespace once::locker
