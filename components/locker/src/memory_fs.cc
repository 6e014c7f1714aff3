#include <cerrno>
#include <set>
#include <string_view>

#include "errno_error.h"
#include "once/locker/fs.h"

namespace once::locker {
namespace {

// An absolute path with no empty, "." or ".." component and no trailing
// slash: already what Norm makes of it.
bool IsNormal(std::string_view s) {
  if (s.empty() || s[0] != '/') return false;
  if (s.size() == 1) return true;
  if (s.back() == '/') return false;
  for (size_t begin = 1; begin <= s.size();) {
    size_t end = s.find('/', begin);
    if (end == std::string_view::npos) end = s.size();
    const std::string_view part = s.substr(begin, end - begin);
    if (part.empty() || part == "." || part == "..") return false;
    begin = end + 1;
  }
  return true;
}

// "/d0/" and "/d0/./x/.." are both "/d0". Normal paths (the locker's own)
// skip std::filesystem, which a simulated rack would otherwise spend its
// time in.
std::string Norm(const std::filesystem::path& path) {
  if (IsNormal(path.native())) return path.native();
  std::string s = path.lexically_normal().string();
  while (s.size() > 1 && s.back() == '/') s.pop_back();
  return s;
}

// Of a normal path.
std::string Parent(const std::string& path) {
  const size_t slash = path.rfind('/');
  return slash == 0 ? std::string("/") : path.substr(0, slash);
}

std::string Name(const std::string& path) { return path.substr(path.rfind('/') + 1); }

// Whether `path` is `dir` or lies under it.
bool Under(const std::string& path, const std::string& dir) {
  if (path == dir) return true;
  if (dir == "/") return path.starts_with('/');
  return path.size() > dir.size() && path.starts_with(dir) && path[dir.size()] == '/';
}

}  // namespace

class MemoryFs::Lock final : public FsLock {
 public:
  Lock(MemoryFs* fs, std::string path, uint64_t token)
      : fs_(fs), path_(std::move(path)), token_(token) {}
  ~Lock() override { fs_->Unlock(path_, token_); }

 private:
  MemoryFs* fs_;
  std::string path_;
  uint64_t token_;
};

Status MemoryFs::Check(const char* op, const std::string& path, bool write) const {
  if (crashed_) {
    return MakeError(ErrorCode::kUnavailable, std::string(op) + " " + path + ": crashed", path);
  }
  for (const auto& [dir, faults] : faults_) {
    if (faults.fail && Under(path, dir)) return ErrnoError(EIO, op, path);
  }
  if (!write) return Ok();
  for (const auto& [dir, faults] : faults_) {
    if (faults.no_space && Under(path, dir)) return ErrnoError(ENOSPC, op, path);
  }
  return Ok();
}

Status MemoryFs::BeginMutation(const char* op, const std::string& path, bool write) {
  if (!crashed_ && crash_budget_ && *crash_budget_ == 0) crashed_ = true;
  return Check(op, path, write);
}

void MemoryFs::EndMutation() {
  ++mutating_ops_;
  if (crash_budget_) --*crash_budget_;
}

MemoryFs::Dir* MemoryFs::FindDir(const std::string& dir) {
  auto it = dirs_.find(dir);
  return it == dirs_.end() ? nullptr : &it->second;
}

// Drops the inodes no entry (live or durable) points at any more.
void MemoryFs::Collect() {
  std::set<uint64_t> used;
  for (const auto& [name, dir] : dirs_) {
    for (const auto& [entry, inode] : dir.live) used.insert(inode);
    for (const auto& [entry, inode] : dir.durable) used.insert(inode);
  }
  std::erase_if(inodes_, [&](const auto& kv) { return !used.contains(kv.first); });
}

void MemoryFs::Unlock(const std::string& path, uint64_t token) {
  auto it = locks_.find(path);
  if (it != locks_.end() && it->second == token) locks_.erase(it);
}

Status MemoryFs::WriteSynced(const std::filesystem::path& path, std::span<const uint8_t> bytes,
                             uint32_t mode) {
  const std::string p = Norm(path);
  ONCE_RETURN_IF_ERROR(BeginMutation("write", p, /*write=*/true));
  Dir* dir = FindDir(Parent(p));
  if (dir == nullptr) return ErrnoError(ENOENT, "open", p);
  if (dirs_.contains(p)) return ErrnoError(EISDIR, "open", p);
  auto it = dir->live.find(Name(p));
  if (it != dir->live.end()) {
    inodes_[it->second].assign(bytes.begin(), bytes.end());  // O_TRUNC: the same inode
  } else {
    const uint64_t inode = next_inode_++;
    inodes_[inode].assign(bytes.begin(), bytes.end());
    dir->live[Name(p)] = inode;
  }
  EndMutation();
  return Ok();
}

Status MemoryFs::Rename(const std::filesystem::path& from, const std::filesystem::path& to) {
  const std::string f = Norm(from);
  const std::string t = Norm(to);
  ONCE_RETURN_IF_ERROR(BeginMutation("rename", f));
  ONCE_RETURN_IF_ERROR(Check("rename", t));
  Dir* from_dir = FindDir(Parent(f));
  if (from_dir == nullptr || !from_dir->live.contains(Name(f))) {
    return ErrnoError(ENOENT, "rename", f);
  }
  Dir* to_dir = FindDir(Parent(t));
  if (to_dir == nullptr) return ErrnoError(ENOENT, "rename", t);
  if (dirs_.contains(t)) return ErrnoError(EISDIR, "rename", t);
  if (f != t) {
    const uint64_t inode = from_dir->live[Name(f)];
    from_dir->live.erase(Name(f));
    to_dir->live[Name(t)] = inode;
    Collect();
  }
  EndMutation();
  return Ok();
}

Status MemoryFs::SyncDir(const std::filesystem::path& dir) {
  const std::string d = Norm(dir);
  ONCE_RETURN_IF_ERROR(BeginMutation("fsync", d));
  Dir* found = FindDir(d);
  if (found == nullptr) return ErrnoError(ENOENT, "open", d);
  found->durable = found->live;
  Collect();
  EndMutation();
  return Ok();
}

Result<std::optional<Bytes>> MemoryFs::Read(const std::filesystem::path& path, size_t max_bytes) {
  const std::string p = Norm(path);
  ONCE_RETURN_IF_ERROR(Check("read", p));
  if (dirs_.contains(p)) return ErrnoError(EISDIR, "read", p);
  Dir* dir = FindDir(Parent(p));
  if (dir == nullptr) return std::optional<Bytes>();
  auto it = dir->live.find(Name(p));
  if (it == dir->live.end()) return std::optional<Bytes>();
  const Bytes& content = inodes_.at(it->second);
  if (content.size() > max_bytes) {
    return LimitError("file_bytes_max", static_cast<int64_t>(content.size()),
                      static_cast<int64_t>(max_bytes), p);
  }
  return std::optional<Bytes>(content);
}

Status MemoryFs::Remove(const std::filesystem::path& path) {
  const std::string p = Norm(path);
  ONCE_RETURN_IF_ERROR(BeginMutation("unlink", p));
  if (dirs_.contains(p)) return ErrnoError(EISDIR, "unlink", p);
  if (Dir* dir = FindDir(Parent(p)); dir != nullptr) {
    dir->live.erase(Name(p));
    Collect();
  }
  EndMutation();
  return Ok();
}

Result<bool> MemoryFs::IsDir(const std::filesystem::path& path) {
  const std::string p = Norm(path);
  ONCE_RETURN_IF_ERROR(Check("stat", p));
  return dirs_.contains(p);
}

Result<std::unique_ptr<FsLock>> MemoryFs::LockExclusive(const std::filesystem::path& path) {
  const std::string p = Norm(path);
  ONCE_RETURN_IF_ERROR(Check("lock", p));
  Dir* dir = FindDir(Parent(p));
  if (dir == nullptr) return ErrnoError(ENOENT, "open", p);
  if (dirs_.contains(p)) return ErrnoError(EISDIR, "open", p);
  if (locks_.contains(p)) {
    return MakeError(
        ErrorCode::kPermissionDenied,
        "lock " + p + ": held by another process (is another server using this drive?)", p);
  }
  if (!dir->live.contains(Name(p))) {  // open(O_CREAT): a new, volatile entry
    const uint64_t inode = next_inode_++;
    inodes_[inode] = {};
    dir->live[Name(p)] = inode;
  }
  const uint64_t token = next_lock_++;
  locks_[p] = token;
  return std::unique_ptr<FsLock>(std::make_unique<Lock>(this, p, token));
}

void MemoryFs::MakeDirs(const std::filesystem::path& dir) {
  std::filesystem::path cur(Norm(dir));
  while (!cur.empty()) {
    dirs_.try_emplace(cur.string());
    if (cur == cur.parent_path()) break;
    cur = cur.parent_path();
  }
}

void MemoryFs::RemoveDir(const std::filesystem::path& dir) {
  const std::string d = Norm(dir);
  std::erase_if(dirs_, [&](const auto& kv) { return Under(kv.first, d); });
  Collect();
}

void MemoryFs::Wipe(const std::filesystem::path& dir) {
  const std::string d = Norm(dir);
  for (auto& [name, entries] : dirs_) {
    if (!Under(name, d)) continue;
    entries.live.clear();
    entries.durable.clear();
  }
  Collect();
}

Status MemoryFs::FlipBit(const std::filesystem::path& path, size_t bit_index) {
  const std::string p = Norm(path);
  Dir* dir = FindDir(Parent(p));
  if (dir == nullptr || !dir->live.contains(Name(p))) {
    return MakeError(ErrorCode::kNotFound, "flip bit: no file " + p, p);
  }
  Bytes& content = inodes_.at(dir->live.at(Name(p)));
  if (bit_index / 8 >= content.size()) {
    return MakeError(ErrorCode::kInvalidArgument,
                     "flip bit: " + p + " has " + std::to_string(content.size()) + " bytes", p);
  }
  content[bit_index / 8] ^= static_cast<uint8_t>(0x80u >> (bit_index % 8));
  return Ok();
}

void MemoryFs::Fail(const std::filesystem::path& dir, bool on) {
  Faults& faults = faults_[Norm(dir)];
  faults.fail = on;
  if (!faults.fail && !faults.no_space) faults_.erase(Norm(dir));
}

void MemoryFs::NoSpace(const std::filesystem::path& dir, bool on) {
  Faults& faults = faults_[Norm(dir)];
  faults.no_space = on;
  if (!faults.fail && !faults.no_space) faults_.erase(Norm(dir));
}

void MemoryFs::CrashAfter(size_t mutating_ops) { crash_budget_ = mutating_ops; }

void MemoryFs::Crash() {
  for (auto& [name, dir] : dirs_) dir.live = dir.durable;
  locks_.clear();
  crash_budget_.reset();
  crashed_ = false;
  Collect();
}

void MemoryFs::CrashKeepingVolatile() {
  for (auto& [name, dir] : dirs_) dir.durable = dir.live;
  Crash();
}

std::vector<std::string> MemoryFs::List(const std::filesystem::path& dir) const {
  std::vector<std::string> names;
  auto it = dirs_.find(Norm(dir));
  if (it == dirs_.end()) return names;
  for (const auto& [name, inode] : it->second.live) names.push_back(name);
  return names;
}

}  // namespace once::locker
