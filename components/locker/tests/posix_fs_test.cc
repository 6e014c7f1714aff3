// PosixFs and the locker on a real temporary folder: the answers of each
// operation, files at mode 0600, the flock that refuses a second opener, a
// write/read round trip and the removal of a leftover temp file.

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cstdlib>
#include <filesystem>
#include <string_view>

#include "once/locker/fs.h"
#include "once/locker/locker.h"

namespace once::locker {
namespace {

namespace fsys = std::filesystem;

Bytes B(std::string_view text) { return Bytes(text.begin(), text.end()); }

uint32_t ModeOf(const fsys::path& path) {
  struct stat st;
  EXPECT_EQ(::stat(path.c_str(), &st), 0) << path;
  return st.st_mode & 07777;
}

class PosixFsTest : public ::testing::Test {
 protected:
  PosixFsTest() {
    std::string pattern = (fsys::path(::testing::TempDir()) / "locker-XXXXXX").string();
    root_ = ::mkdtemp(pattern.data());
    d0_ = root_ / "m2a";
    d1_ = root_ / "m2b";
    fsys::create_directories(d0_);
    fsys::create_directories(d1_);
  }
  ~PosixFsTest() override { fsys::remove_all(root_); }

  LockerOptions Options() { return {.slots = {d0_, d1_}, .fs = &fs_, .rng = &rng_}; }

  PosixFs fs_;
  SeededRng rng_{11};
  fsys::path root_, d0_, d1_;
};

TEST_F(PosixFsTest, WriteSyncedWritesAllOfItAtTheGivenMode) {
  const fsys::path file = d0_ / "a";
  ASSERT_TRUE(fs_.WriteSynced(file, B("hello"), 0600));
  EXPECT_EQ(ModeOf(file), 0600u);
  EXPECT_EQ(fs_.Read(file, 100).value(), B("hello"));
  // An existing file is truncated and takes the mode too.
  fsys::permissions(file, fsys::perms::owner_all | fsys::perms::group_read);
  ASSERT_TRUE(fs_.WriteSynced(file, B("hi"), 0600));
  EXPECT_EQ(ModeOf(file), 0600u);
  EXPECT_EQ(fs_.Read(file, 100).value(), B("hi"));
  Bytes big(1 << 20, 0x5a);
  ASSERT_TRUE(fs_.WriteSynced(file, big, 0600));
  EXPECT_EQ(fs_.Read(file, big.size()).value(), big);
}

TEST_F(PosixFsTest, EveryOperationAnswersWithATypedError) {
  EXPECT_EQ(fs_.WriteSynced(root_ / "none" / "a", B("x"), 0600).error().code, ErrorCode::kNotFound);
  EXPECT_EQ(fs_.Rename(d0_ / "none", d0_ / "b").error().code, ErrorCode::kNotFound);
  EXPECT_EQ(fs_.SyncDir(root_ / "none").error().code, ErrorCode::kNotFound);
  EXPECT_EQ(fs_.Read(d0_ / "none", 10).value(), std::nullopt);
  EXPECT_TRUE(fs_.Remove(d0_ / "none"));
  ASSERT_TRUE(fs_.WriteSynced(d0_ / "a", Bytes(11), 0600));
  auto read = fs_.Read(d0_ / "a", 10);
  ASSERT_FALSE(read);
  EXPECT_EQ(read.error().code, ErrorCode::kLimitExceeded);
  EXPECT_EQ(fs_.IsDir(d0_).value(), true);
  EXPECT_EQ(fs_.IsDir(d0_ / "a").value(), false);
  EXPECT_EQ(fs_.IsDir(root_ / "none").value(), false);
  EXPECT_EQ(fs_.IsDir(d0_ / "a" / "b").value(), false);  // ENOTDIR
  const Status into_dir = fs_.WriteSynced(d0_, B("x"), 0600);
  ASSERT_FALSE(into_dir);
  EXPECT_EQ(into_dir.error().code, ErrorCode::kUnavailable);
  EXPECT_NE(into_dir.error().message.find("EISDIR"), std::string::npos) << into_dir.error().message;
}

TEST_F(PosixFsTest, RenameReplacesAndRemoveUnlinks) {
  ASSERT_TRUE(fs_.WriteSynced(d0_ / "r", B("old"), 0600));
  ASSERT_TRUE(fs_.WriteSynced(d0_ / "r.tmp", B("new"), 0600));
  ASSERT_TRUE(fs_.Rename(d0_ / "r.tmp", d0_ / "r"));
  ASSERT_TRUE(fs_.SyncDir(d0_));
  EXPECT_EQ(fs_.Read(d0_ / "r", 10).value(), B("new"));
  EXPECT_FALSE(fsys::exists(d0_ / "r.tmp"));
  ASSERT_TRUE(fs_.Remove(d0_ / "r"));
  EXPECT_FALSE(fsys::exists(d0_ / "r"));
}

TEST_F(PosixFsTest, ALockRefusesASecondHolderUntilReleased) {
  auto first = fs_.LockExclusive(d0_ / "lock");
  ASSERT_TRUE(first) << first.error().ToString();
  EXPECT_EQ(ModeOf(d0_ / "lock"), 0600u);
  auto second = fs_.LockExclusive(d0_ / "lock");  // a second open file description
  ASSERT_FALSE(second);
  EXPECT_EQ(second.error().code, ErrorCode::kPermissionDenied);
  EXPECT_NE(second.error().message.find("held by another process"), std::string::npos);
  first->reset();
  EXPECT_TRUE(fs_.LockExclusive(d0_ / "lock"));
}

TEST_F(PosixFsTest, TheLockerRoundTripsOnRealDrives) {
  {
    auto opened = Locker::Open(Options());
    ASSERT_TRUE(opened) << opened.error().ToString();
    EXPECT_EQ(opened->verdict, Verdict::kEmpty);
    ASSERT_TRUE(opened->locker->Write(B("boundary 1")));
    ASSERT_TRUE(opened->locker->Write(B("boundary 2")));
    for (const auto& dir : {d0_, d1_}) {
      EXPECT_EQ(ModeOf(dir / "record"), 0600u);
      EXPECT_EQ(ModeOf(dir / "record.lock"), 0600u);
      EXPECT_FALSE(fsys::exists(dir / "record.tmp"));
    }
    // A second opener (another server on the same drives) is refused.
    auto second = Locker::Open(Options());
    ASSERT_FALSE(second);
    EXPECT_EQ(second.error().code, ErrorCode::kPermissionDenied);
  }
  auto opened = Locker::Open(Options());
  ASSERT_TRUE(opened) << opened.error().ToString();
  EXPECT_EQ(opened->verdict, Verdict::kAdopted);
  EXPECT_EQ(opened->record, B("boundary 2"));
  EXPECT_EQ(fs_.Read(d0_ / "record", kEnvelopeBytesMax).value(),
            fs_.Read(d1_ / "record", kEnvelopeBytesMax).value());
}

TEST_F(PosixFsTest, TheLockerRemovesALeftoverTempFileAndRestoresAWipedDrive) {
  {
    auto opened = Locker::Open(Options());
    ASSERT_TRUE(opened);
    ASSERT_TRUE(opened->locker->Write(B("boundary 1")));
  }
  ASSERT_TRUE(fs_.WriteSynced(d0_ / "record.tmp", B("half a write"), 0600));
  fsys::remove(d1_ / "record");
  auto opened = Locker::Open(Options());
  ASSERT_TRUE(opened);
  EXPECT_EQ(opened->verdict, Verdict::kRestored);
  EXPECT_EQ(opened->record, B("boundary 1"));
  EXPECT_FALSE(fsys::exists(d0_ / "record.tmp"));
  EXPECT_TRUE(fsys::exists(d1_ / "record"));
}

TEST_F(PosixFsTest, AMissingDriveFolderIsADiscardNamingIt) {
  fsys::remove_all(d1_);
  auto opened = Locker::Open(Options());
  ASSERT_TRUE(opened);
  EXPECT_EQ(opened->verdict, Verdict::kDiscarded);
  EXPECT_EQ(opened->reason, "drive 1 (" + d1_.string() + "): folder missing");
  EXPECT_EQ(opened->drives[1].state, DriveState::kMissingFolder);
}

}  // namespace
}  // namespace once::locker
