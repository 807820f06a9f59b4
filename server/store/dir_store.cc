#include "server/store/dir_store.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>  // strerror
#include <filesystem>
#include <system_error>
#include <utility>

#include "absl/random/random.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"

namespace attnserve::store {
namespace {

constexpr char kSuffix[] = ".snap";
constexpr char kTempInfix[] = ".snap.tmp.";

// Opens `file`, retrying when a signal interrupts; the fd or -1 with errno set.
int OpenRetrying(const std::string& file, int flags, mode_t mode = 0) {
  int fd;
  do {
    fd = open(file.c_str(), flags | O_CLOEXEC, mode);
  } while (fd < 0 && errno == EINTR);
  return fd;
}

// Writes all of `bytes` to `fd`; 0 or an errno.
int WriteAll(int fd, std::string_view bytes) {
  while (!bytes.empty()) {
    ssize_t n = write(fd, bytes.data(), bytes.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      return errno;
    }
    bytes.remove_prefix(static_cast<size_t>(n));
  }
  return 0;
}

// Reads `fd` to its end into `out`, expecting about `size_hint` bytes; 0 or an errno.
int ReadAll(int fd, size_t size_hint, std::string* out) {
  std::string data(size_hint + 1, '\0');  // +1: the read that sees EOF needs room
  size_t used = 0;
  while (true) {
    if (used == data.size()) data.resize(2 * data.size());
    ssize_t n = read(fd, data.data() + used, data.size() - used);
    if (n < 0) {
      if (errno == EINTR) continue;
      return errno;
    }
    if (n == 0) break;
    used += static_cast<size_t>(n);
  }
  data.resize(used);
  *out = std::move(data);
  return 0;
}

// True for "<valid id>.snap": files this store may expire (it leaves others alone).
bool IsSnapshotFileName(absl::string_view name) {
  return absl::ConsumeSuffix(&name, kSuffix) && ValidateSnapshotId(std::string(name)).ok();
}

absl::Time MTime(const struct stat& st) { return absl::TimeFromTimespec(st.st_mtim); }

}  // namespace

absl::StatusOr<std::unique_ptr<DirSnapshotStore>> DirSnapshotStore::Create(std::string path,
                                                                           NowFn now) {
  std::unique_ptr<DirSnapshotStore> store(
      new DirSnapshotStore(std::move(path), std::move(now)));
  const std::string& dir = store->path_;
  struct stat st;
  if (stat(dir.c_str(), &st) == 0) {
    if (!S_ISDIR(st.st_mode)) {
      return absl::InvalidArgumentError(
          absl::StrCat("session store ", store->name_, ": ", dir, " is not a directory"));
    }
  } else if (errno != ENOENT) {
    return store->Errno("examining", dir, errno);
  } else {
    std::error_code error;
    std::filesystem::create_directories(dir, error);
    if (error) {
      return StoreUnavailable(store->name_,
                              absl::StrCat("creating ", dir, ": ", error.message()));
    }
  }
  // Root ignores permission bits, so only a real write shows the directory is usable.
  absl::StatusOr<std::string> probe = store->WriteTemp("probe", "", store->now_());
  if (!probe.ok()) return probe.status();
  unlink(probe->c_str());
  return store;
}

DirSnapshotStore::DirSnapshotStore(std::string path, NowFn now)
    : path_(std::move(path)), name_(absl::StrCat("dir:", path_)), now_(std::move(now)) {}

std::string DirSnapshotStore::SnapshotPath(const std::string& id) const {
  return absl::StrCat(path_, "/", id, kSuffix);
}

absl::Status DirSnapshotStore::Put(const std::string& id, std::string_view bytes,
                                   absl::Duration ttl) {
  if (absl::Status s = ValidateSnapshotId(id); !s.ok()) return s;
  if (absl::Status s = ValidateSnapshotTtl(ttl); !s.ok()) return s;
  absl::StatusOr<std::string> temp = WriteTemp(id, bytes, now_() + RoundTtl(ttl));
  if (!temp.ok()) return temp.status();
  const std::string file = SnapshotPath(id);
  {
    absl::MutexLock lock(&replace_mu_);
    if (rename(temp->c_str(), file.c_str()) != 0) {
      int err = errno;
      unlink(temp->c_str());
      return Errno("renaming over", file, err);
    }
  }
  return SyncDir();
}

absl::StatusOr<std::string> DirSnapshotStore::Get(const std::string& id) {
  if (absl::Status s = ValidateSnapshotId(id); !s.ok()) return s;
  const std::string file = SnapshotPath(id);
  int fd = OpenRetrying(file, O_RDONLY);
  if (fd < 0) {
    int err = errno;
    if (err != ENOENT) return Errno("opening", file, err);
    if (absl::Status s = CheckDirExists(); !s.ok()) return s;
    return absl::NotFoundError(absl::StrCat("session ", id, ": no snapshot in ", name_));
  }
  // Everything below reads the opened inode, so a concurrent Put's rename cannot mix
  // old and new bytes.
  struct stat st;
  if (fstat(fd, &st) != 0) {
    int err = errno;
    close(fd);
    return Errno("examining", file, err);
  }
  if (MTime(st) <= now_()) {
    close(fd);
    UnlinkIfExpired(file);
    return absl::NotFoundError(
        absl::StrCat("session ", id, ": snapshot in ", name_, " expired"));
  }
  std::string bytes;
  int err = ReadAll(fd, static_cast<size_t>(st.st_size), &bytes);
  close(fd);
  if (err != 0) return Errno("reading", file, err);
  return bytes;
}

absl::Status DirSnapshotStore::Delete(const std::string& id) {
  if (absl::Status s = ValidateSnapshotId(id); !s.ok()) return s;
  const std::string file = SnapshotPath(id);
  if (unlink(file.c_str()) == 0) return absl::OkStatus();
  int err = errno;
  if (err == ENOENT) return CheckDirExists();
  return Errno("deleting", file, err);
}

absl::StatusOr<int> DirSnapshotStore::RemoveExpired() {
  DIR* dir = opendir(path_.c_str());
  if (dir == nullptr) return Errno("listing", path_, errno);
  int removed = 0;
  errno = 0;
  while (const struct dirent* entry = readdir(dir)) {
    absl::string_view entry_name = entry->d_name;
    const std::string file = absl::StrCat(path_, "/", entry_name);
    if (absl::StartsWith(entry_name, ".") && absl::StrContains(entry_name, kTempInfix)) {
      // A temp file's ctime is its last write: an old one belongs to a crashed Put.
      struct stat st;
      if (lstat(file.c_str(), &st) == 0 && S_ISREG(st.st_mode) &&
          now_() - absl::TimeFromTimespec(st.st_ctim) >= kStaleTempAge) {
        unlink(file.c_str());
      }
    } else if (IsSnapshotFileName(entry_name) && UnlinkIfExpired(file)) {
      ++removed;
    }
    errno = 0;
  }
  int err = errno;
  closedir(dir);
  if (err != 0) return Errno("listing", path_, err);
  return removed;
}

absl::StatusOr<std::string> DirSnapshotStore::WriteTemp(const std::string& id,
                                                        std::string_view bytes,
                                                        absl::Time expiry) const {
  absl::BitGen random;
  const std::string temp =
      absl::StrCat(path_, "/.", id, kTempInfix,
                   absl::Hex(absl::Uniform<uint64_t>(random), absl::kZeroPad16));
  int fd = OpenRetrying(temp, O_WRONLY | O_CREAT | O_EXCL, 0600);
  if (fd < 0) return Errno("creating", temp, errno);
  const char* failed = "writing";
  int err = WriteAll(fd, bytes);
  if (err == 0) {
    struct timespec times[2];
    times[0].tv_nsec = UTIME_OMIT;  // atime
    times[1] = absl::ToTimespec(expiry);
    if (futimens(fd, times) != 0) {
      err = errno;
      failed = "setting the expiry (mtime) of";
    }
  }
  if (err == 0 && fsync(fd) != 0) {
    err = errno;
    failed = "syncing";
  }
  if (close(fd) != 0 && err == 0) {
    err = errno;
    failed = "closing";
  }
  if (err != 0) {
    unlink(temp.c_str());
    return Errno(failed, temp, err);
  }
  return temp;
}

bool DirSnapshotStore::UnlinkIfExpired(const std::string& file) {
  absl::MutexLock lock(&replace_mu_);
  struct stat st;
  if (lstat(file.c_str(), &st) != 0 || !S_ISREG(st.st_mode) || MTime(st) > now_()) {
    return false;
  }
  return unlink(file.c_str()) == 0;
}

absl::Status DirSnapshotStore::SyncDir() const {
  int fd = OpenRetrying(path_, O_RDONLY | O_DIRECTORY);
  if (fd < 0) return Errno("opening the directory", path_, errno);
  int err = fsync(fd) == 0 ? 0 : errno;
  close(fd);
  if (err != 0) return Errno("syncing the directory", path_, err);
  return absl::OkStatus();
}

absl::Status DirSnapshotStore::Errno(absl::string_view what, const std::string& file,
                                     int err) const {
  return StoreUnavailable(name_, absl::StrCat(what, " ", file, ": ", strerror(err)));
}

absl::Status DirSnapshotStore::CheckDirExists() const {
  struct stat st;
  if (stat(path_.c_str(), &st) != 0) return Errno("examining the directory", path_, errno);
  if (!S_ISDIR(st.st_mode)) return Errno("examining the directory", path_, ENOTDIR);
  return absl::OkStatus();
}

}  // namespace attnserve::store
