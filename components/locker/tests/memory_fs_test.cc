// MemoryFs, the disk the locker's tests and the rack simulator run on: crash
// semantics (durable content after WriteSynced, directory entries durable only
// after SyncDir), the CrashAfter counter, per-folder faults and locks.

#include <gtest/gtest.h>

#include <string_view>

#include "once/locker/fs.h"

namespace once::locker {
namespace {

Bytes B(std::string_view text) { return Bytes(text.begin(), text.end()); }

class MemoryFsTest : public ::testing::Test {
 protected:
  MemoryFsTest() {
    fs_.MakeDirs("/d0");
    fs_.MakeDirs("/d1");
  }

  // The file's content, or "<none>".
  std::string Content(std::string_view path) {
    auto read = fs_.Read(std::string(path), 1 << 20);
    EXPECT_TRUE(read) << read.error().ToString();
    if (!read || !*read) return "<none>";
    return std::string((*read)->begin(), (*read)->end());
  }

  MemoryFs fs_;
};

TEST_F(MemoryFsTest, ANewFileIsLostInACrashUntilItsFolderIsSynced) {
  ASSERT_TRUE(fs_.WriteSynced("/d0/a", B("one"), 0600));
  EXPECT_EQ(Content("/d0/a"), "one");
  fs_.Crash();
  EXPECT_EQ(Content("/d0/a"), "<none>");

  ASSERT_TRUE(fs_.WriteSynced("/d0/a", B("two"), 0600));
  ASSERT_TRUE(fs_.SyncDir("/d0"));
  fs_.Crash();
  EXPECT_EQ(Content("/d0/a"), "two");
}

TEST_F(MemoryFsTest, RewritingAnExistingFileIsDurableAtOnce) {
  ASSERT_TRUE(fs_.WriteSynced("/d0/a", B("one"), 0600));
  ASSERT_TRUE(fs_.SyncDir("/d0"));
  ASSERT_TRUE(fs_.WriteSynced("/d0/a", B("two"), 0600));  // the same inode, fsynced
  fs_.Crash();
  EXPECT_EQ(Content("/d0/a"), "two");
}

TEST_F(MemoryFsTest, ARenameIsVolatileUntilItsFolderIsSynced) {
  ASSERT_TRUE(fs_.WriteSynced("/d0/r", B("old"), 0600));
  ASSERT_TRUE(fs_.SyncDir("/d0"));
  ASSERT_TRUE(fs_.WriteSynced("/d0/r.tmp", B("new"), 0600));
  ASSERT_TRUE(fs_.Rename("/d0/r.tmp", "/d0/r"));
  EXPECT_EQ(Content("/d0/r"), "new");
  EXPECT_EQ(Content("/d0/r.tmp"), "<none>");
  fs_.Crash();
  EXPECT_EQ(Content("/d0/r"), "old");
  EXPECT_EQ(Content("/d0/r.tmp"), "<none>");  // its entry was never synced either

  ASSERT_TRUE(fs_.WriteSynced("/d0/r.tmp", B("new"), 0600));
  ASSERT_TRUE(fs_.Rename("/d0/r.tmp", "/d0/r"));
  ASSERT_TRUE(fs_.SyncDir("/d0"));
  fs_.Crash();
  EXPECT_EQ(Content("/d0/r"), "new");
}

TEST_F(MemoryFsTest, CrashKeepingVolatileKeepsEveryEntry) {
  ASSERT_TRUE(fs_.WriteSynced("/d0/r", B("old"), 0600));
  ASSERT_TRUE(fs_.SyncDir("/d0"));
  ASSERT_TRUE(fs_.WriteSynced("/d0/r.tmp", B("new"), 0600));
  ASSERT_TRUE(fs_.Rename("/d0/r.tmp", "/d0/r"));
  ASSERT_TRUE(fs_.WriteSynced("/d1/x", B("x"), 0600));
  fs_.CrashKeepingVolatile();
  EXPECT_EQ(Content("/d0/r"), "new");
  EXPECT_EQ(Content("/d1/x"), "x");
}

TEST_F(MemoryFsTest, ARemoveIsVolatileUntilItsFolderIsSynced) {
  ASSERT_TRUE(fs_.WriteSynced("/d0/a", B("a"), 0600));
  ASSERT_TRUE(fs_.SyncDir("/d0"));
  ASSERT_TRUE(fs_.Remove("/d0/a"));
  ASSERT_TRUE(fs_.Remove("/d0/never-there"));
  EXPECT_EQ(Content("/d0/a"), "<none>");
  fs_.Crash();
  EXPECT_EQ(Content("/d0/a"), "a");
  ASSERT_TRUE(fs_.Remove("/d0/a"));
  ASSERT_TRUE(fs_.SyncDir("/d0"));
  fs_.Crash();
  EXPECT_EQ(Content("/d0/a"), "<none>");
}

TEST_F(MemoryFsTest, CrashAfterLetsExactlyThatManyMutationsSucceed) {
  fs_.CrashAfter(2);
  EXPECT_TRUE(fs_.WriteSynced("/d0/a", B("a"), 0600));
  EXPECT_FALSE(fs_.Rename("/d0/nothing", "/d0/b"));  // a failure is not counted
  EXPECT_TRUE(fs_.Read("/d0/a", 10));                // nor is a read
  EXPECT_TRUE(fs_.Rename("/d0/a", "/d0/b"));
  EXPECT_FALSE(fs_.crashed());
  Status third = fs_.SyncDir("/d0");
  ASSERT_FALSE(third);
  EXPECT_EQ(third.error().code, ErrorCode::kUnavailable);
  EXPECT_EQ(third.error().message, "fsync /d0: crashed");
  EXPECT_TRUE(fs_.crashed());
  // Every operation after it, mutating or not.
  EXPECT_EQ(fs_.Read("/d0/b", 10).error().code, ErrorCode::kUnavailable);
  EXPECT_EQ(fs_.IsDir("/d0").error().code, ErrorCode::kUnavailable);
  EXPECT_EQ(fs_.LockExclusive("/d0/l").error().code, ErrorCode::kUnavailable);
  EXPECT_EQ(fs_.Remove("/d0/b").error().code, ErrorCode::kUnavailable);
  EXPECT_EQ(fs_.mutating_ops(), 2u);
  fs_.Crash();
  EXPECT_FALSE(fs_.crashed());
  EXPECT_EQ(Content("/d0/b"), "<none>");  // the sync never happened
  EXPECT_TRUE(fs_.SyncDir("/d0"));        // and the counter is gone
  EXPECT_TRUE(fs_.SyncDir("/d0"));
}

TEST_F(MemoryFsTest, CrashAfterZeroFailsTheVeryNextMutation) {
  fs_.CrashAfter(0);
  EXPECT_TRUE(fs_.IsDir("/d0"));  // not a mutation: still fine
  EXPECT_FALSE(fs_.WriteSynced("/d0/a", B("a"), 0600));
  EXPECT_TRUE(fs_.crashed());
  fs_.Crash();
  EXPECT_EQ(Content("/d0/a"), "<none>");  // a failed operation has no effect
}

TEST_F(MemoryFsTest, FailAnswersEioForEveryOperationUnderTheFolder) {
  ASSERT_TRUE(fs_.WriteSynced("/d0/a", B("a"), 0600));
  fs_.MakeDirs("/d0/sub");
  fs_.Fail("/d0", true);
  const Status write = fs_.WriteSynced("/d0/sub/b", B("b"), 0600);
  ASSERT_FALSE(write);
  EXPECT_EQ(write.error().code, ErrorCode::kUnavailable);
  EXPECT_EQ(write.error().message, "write /d0/sub/b: Input/output error (EIO)");
  EXPECT_EQ(fs_.Read("/d0/a", 10).error().code, ErrorCode::kUnavailable);
  EXPECT_FALSE(fs_.Rename("/d1/x", "/d0/a"));
  EXPECT_FALSE(fs_.SyncDir("/d0"));
  EXPECT_FALSE(fs_.Remove("/d0/a"));
  EXPECT_FALSE(fs_.IsDir("/d0"));
  EXPECT_FALSE(fs_.LockExclusive("/d0/lock"));
  EXPECT_TRUE(fs_.WriteSynced("/d1/a", B("a"), 0600));  // the other drive is fine
  EXPECT_TRUE(fs_.WriteSynced("/d00", B("a"), 0600));   // a sibling name is not under it
  EXPECT_TRUE(fs_.IsDir("/d1"));
  fs_.Fail("/d0", false);
  EXPECT_EQ(Content("/d0/a"), "a");
}

TEST_F(MemoryFsTest, NoSpaceFailsWritesOnly) {
  ASSERT_TRUE(fs_.WriteSynced("/d0/a", B("a"), 0600));
  fs_.NoSpace("/d0", true);
  const Status write = fs_.WriteSynced("/d0/b", B("b"), 0600);
  ASSERT_FALSE(write);
  EXPECT_EQ(write.error().code, ErrorCode::kUnavailable);
  EXPECT_EQ(write.error().message, "write /d0/b: No space left on device (ENOSPC)");
  EXPECT_EQ(Content("/d0/b"), "<none>");
  EXPECT_EQ(Content("/d0/a"), "a");
  EXPECT_TRUE(fs_.Rename("/d0/a", "/d0/c"));
  EXPECT_TRUE(fs_.SyncDir("/d0"));
  fs_.NoSpace("/d0", false);
  EXPECT_TRUE(fs_.WriteSynced("/d0/b", B("b"), 0600));
}

TEST_F(MemoryFsTest, FaultsOutliveACrash) {
  fs_.Fail("/d1", true);
  fs_.Crash();
  EXPECT_FALSE(fs_.IsDir("/d1"));
}

TEST_F(MemoryFsTest, RemoveDirTakesTheDriveAwayAndMakeDirsPutsAnEmptyOneBack) {
  ASSERT_TRUE(fs_.WriteSynced("/d0/a", B("a"), 0600));
  ASSERT_TRUE(fs_.SyncDir("/d0"));
  fs_.RemoveDir("/d0");
  EXPECT_EQ(fs_.IsDir("/d0").value(), false);
  EXPECT_EQ(Content("/d0/a"), "<none>");
  EXPECT_EQ(fs_.WriteSynced("/d0/a", B("a"), 0600).error().code, ErrorCode::kNotFound);
  EXPECT_EQ(fs_.SyncDir("/d0").error().code, ErrorCode::kNotFound);
  EXPECT_EQ(fs_.LockExclusive("/d0/lock").error().code, ErrorCode::kNotFound);
  fs_.Crash();
  EXPECT_EQ(fs_.IsDir("/d0").value(), false);
  fs_.MakeDirs("/d0/");
  EXPECT_EQ(fs_.IsDir("/d0").value(), true);
  EXPECT_TRUE(fs_.List("/d0").empty());
}

TEST_F(MemoryFsTest, WipeDeletesEveryFileDurablyAndKeepsTheFolder) {
  fs_.MakeDirs("/d0/sub");
  ASSERT_TRUE(fs_.WriteSynced("/d0/a", B("a"), 0600));
  ASSERT_TRUE(fs_.WriteSynced("/d0/sub/b", B("b"), 0600));
  ASSERT_TRUE(fs_.SyncDir("/d0"));
  ASSERT_TRUE(fs_.SyncDir("/d0/sub"));
  ASSERT_TRUE(fs_.WriteSynced("/d1/c", B("c"), 0600));
  fs_.Wipe("/d0");
  EXPECT_EQ(Content("/d0/a"), "<none>");
  fs_.Crash();
  EXPECT_EQ(Content("/d0/a"), "<none>");
  EXPECT_EQ(Content("/d0/sub/b"), "<none>");
  EXPECT_EQ(fs_.IsDir("/d0/sub").value(), true);
}

TEST_F(MemoryFsTest, FlipBitCorruptsDurably) {
  ASSERT_TRUE(fs_.WriteSynced("/d0/a", B("A"), 0600));  // 0x41
  ASSERT_TRUE(fs_.SyncDir("/d0"));
  ASSERT_TRUE(fs_.FlipBit("/d0/a", 6));  // 0x41 ^ 0x02
  fs_.Crash();
  EXPECT_EQ(Content("/d0/a"), "C");
  EXPECT_EQ(fs_.FlipBit("/d0/a", 8).error().code, ErrorCode::kInvalidArgument);
  EXPECT_EQ(fs_.FlipBit("/d0/b", 0).error().code, ErrorCode::kNotFound);
}

TEST_F(MemoryFsTest, ReadRefusesAFileOverItsLimit) {
  ASSERT_TRUE(fs_.WriteSynced("/d0/a", Bytes(11), 0600));
  auto read = fs_.Read("/d0/a", 10);
  ASSERT_FALSE(read);
  EXPECT_EQ(read.error().code, ErrorCode::kLimitExceeded);
  EXPECT_TRUE(fs_.Read("/d0/a", 11).value().has_value());
  EXPECT_FALSE(fs_.Read("/nowhere/a", 11).value().has_value());
}

TEST_F(MemoryFsTest, IsDirTellsFoldersFromFilesAndNothing) {
  ASSERT_TRUE(fs_.WriteSynced("/d0/a", B("a"), 0600));
  EXPECT_EQ(fs_.IsDir("/d0").value(), true);
  EXPECT_EQ(fs_.IsDir("/d0/a").value(), false);
  EXPECT_EQ(fs_.IsDir("/d9").value(), false);
}

TEST_F(MemoryFsTest, ALockIsExclusiveUntilReleasedOrCrashed) {
  auto first = fs_.LockExclusive("/d0/lock");
  ASSERT_TRUE(first);
  EXPECT_EQ(fs_.List("/d0"), std::vector<std::string>{"lock"});  // created like open(O_CREAT)
  auto second = fs_.LockExclusive("/d0/lock");
  ASSERT_FALSE(second);
  EXPECT_EQ(second.error().code, ErrorCode::kPermissionDenied);
  EXPECT_NE(second.error().message.find("/d0/lock"), std::string::npos);
  first->reset();
  auto third = fs_.LockExclusive("/d0/lock");
  ASSERT_TRUE(third);
  fs_.Crash();  // the process is gone: so is its lock
  auto fourth = fs_.LockExclusive("/d0/lock");
  ASSERT_TRUE(fourth);
  third->reset();  // the dead process's lock object must not free the new holder's lock
  EXPECT_FALSE(fs_.LockExclusive("/d0/lock"));
}

TEST_F(MemoryFsTest, ListShowsLiveEntriesSorted) {
  ASSERT_TRUE(fs_.WriteSynced("/d0/b", B("b"), 0600));
  ASSERT_TRUE(fs_.WriteSynced("/d0/a", B("a"), 0600));
  EXPECT_EQ(fs_.List("/d0"), (std::vector<std::string>{"a", "b"}));
  EXPECT_TRUE(fs_.List("/d9").empty());
}

}  // namespace
}  // namespace once::locker
