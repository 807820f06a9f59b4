#include "server/store/dir_store.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>  // strerror
#include <filesystem>
#include <system_error>
#include <utility>

#include "absl/cleanup/cleanup.h"
#include "absl/random/random.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"

namespace attnserve::store {
namespace {

constexpr char kSnapSuffix[] = ".snap";
constexpr char kGenSuffix[] = ".gen";
constexpr char kLeaseSuffix[] = ".lock";
constexpr char kGateSuffix[] = ".rw";
constexpr char kPageSuffix[] = ".page";
constexpr char kTempInfix[] = ".tmp.";

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

// If `name` is "<valid id><suffix>", sets `id` and returns true.
bool ParseFileName(absl::string_view name, absl::string_view suffix, std::string* id) {
  if (!absl::ConsumeSuffix(&name, suffix)) return false;
  *id = std::string(name);
  return ValidateSnapshotId(*id).ok();
}

absl::Time MTime(const struct stat& st) { return absl::TimeFromTimespec(st.st_mtim); }

}  // namespace

absl::StatusOr<std::unique_ptr<DirSnapshotStore>> DirSnapshotStore::Create(std::string path,
                                                                           const Clock* clock) {
  std::unique_ptr<DirSnapshotStore> store(
      new DirSnapshotStore(std::move(path), clock));
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
  absl::StatusOr<std::string> probe =
      store->WriteTemp("probe", kSnapSuffix, "", store->clock_->Now());
  if (!probe.ok()) return probe.status();
  unlink(probe->c_str());
  return store;
}

DirSnapshotStore::DirSnapshotStore(std::string path, const Clock* clock)
    : path_(std::move(path)), name_(absl::StrCat("dir:", path_)), clock_(clock) {}

std::string DirSnapshotStore::SnapshotPath(const std::string& id) const {
  return absl::StrCat(path_, "/", id, kSnapSuffix);
}

std::string DirSnapshotStore::GenerationPath(const std::string& id) const {
  return absl::StrCat(path_, "/", id, kGenSuffix);
}

std::string DirSnapshotStore::LeasePath(const std::string& id) const {
  return absl::StrCat(path_, "/", id, kLeaseSuffix);
}

std::string DirSnapshotStore::GatePath(const std::string& id) const {
  return absl::StrCat(path_, "/", id, kGateSuffix);
}

std::string DirSnapshotStore::PagePath(const std::string& id) const {
  return absl::StrCat(path_, "/", id, kPageSuffix);
}

absl::StatusOr<bool> DirSnapshotStore::ExtendPage(const std::string& id, absl::Time expiry) {
  const std::string file = PagePath(id);
  FileLock lock;
  if (int err = FileLock::Take(file, LOCK_EX, /*create=*/false, &lock); err != 0) {
    if (err == ENOENT) return false;
    return Errno("locking", file, err);
  }
  struct stat st;
  if (stat(file.c_str(), &st) != 0) return Errno("examining", file, errno);
  if (MTime(st) <= clock_->Now()) return false;  // a sweep may unlink it any time
  if (MTime(st) < expiry) {
    struct timespec times[2];
    times[0].tv_nsec = UTIME_OMIT;  // atime
    times[1] = absl::ToTimespec(expiry);
    if (utimensat(AT_FDCWD, file.c_str(), times, 0) != 0) {
      return Errno("setting the expiry (mtime) of", file, errno);
    }
  }
  return true;
}

void DirSnapshotStore::RemovePageIfExpired(const std::string& id) {
  const std::string file = PagePath(id);
  FileLock lock;
  if (FileLock::Take(file, LOCK_EX, /*create=*/false, &lock) != 0) return;
  struct stat st;
  if (stat(file.c_str(), &st) == 0 && MTime(st) <= clock_->Now()) lock.RemoveAndRelease();
}

absl::StatusOr<int64_t> DirSnapshotStore::PutPages(const std::vector<PageWrite>& pages,
                                                   absl::Duration ttl) {
  if (absl::Status s = ValidatePageIds(pages); !s.ok()) return s;
  if (absl::Status s = ValidateSnapshotTtl(ttl); !s.ok()) return s;
  const absl::Time expiry = clock_->Now() + RoundTtl(ttl);
  int64_t written = 0;
  for (const PageWrite& page : pages) {
    absl::StatusOr<bool> stored = ExtendPage(page.id, expiry);
    if (!stored.ok()) return stored.status();
    if (*stored) continue;
    absl::StatusOr<std::string> temp = WriteTemp(page.id, kPageSuffix, page.bytes, expiry);
    if (!temp.ok()) return temp.status();
    absl::Cleanup remove_temp = [&temp] { unlink(temp->c_str()); };
    const std::string file = PagePath(page.id);
    // An expired page left under the name would refuse the link: it goes first.
    for (int attempt = 0;; ++attempt) {
      if (link(temp->c_str(), file.c_str()) == 0) {
        written += int64_t(page.bytes.size());
        break;
      }
      if (errno != EEXIST) return Errno("linking", file, errno);
      // Written meanwhile by another writer (same id, same bytes), or expired.
      stored = ExtendPage(page.id, expiry);
      if (!stored.ok()) return stored.status();
      if (*stored) break;
      if (attempt > 0) return Errno("linking", file, EEXIST);
      RemovePageIfExpired(page.id);
    }
  }
  if (written > 0) {
    if (absl::Status s = SyncDir(); !s.ok()) return s;
  }
  return written;
}

absl::StatusOr<std::vector<std::optional<std::string>>> DirSnapshotStore::GetPages(
    const std::vector<std::string>& ids) {
  if (absl::Status s = ValidatePageIds(ids); !s.ok()) return s;
  std::vector<std::optional<std::string>> out;
  out.reserve(ids.size());
  for (const std::string& id : ids) {
    const std::string file = PagePath(id);
    const int fd = OpenRetrying(file, O_RDONLY);
    if (fd < 0) {
      if (errno != ENOENT) return Errno("opening", file, errno);
      if (absl::Status s = CheckDirExists(); !s.ok()) return s;
      out.emplace_back();
      continue;
    }
    absl::Cleanup close_fd = [fd] { close(fd); };
    struct stat st;
    if (fstat(fd, &st) != 0) return Errno("examining", file, errno);
    if (MTime(st) <= clock_->Now()) {
      out.emplace_back();
      continue;
    }
    std::string bytes;
    if (int err = ReadAll(fd, static_cast<size_t>(st.st_size), &bytes); err != 0) {
      return Errno("reading", file, err);
    }
    out.emplace_back(std::move(bytes));
  }
  return out;
}

absl::StatusOr<std::vector<bool>> DirSnapshotStore::ExtendPages(
    const std::vector<std::string>& ids, absl::Duration ttl) {
  if (absl::Status s = ValidatePageIds(ids); !s.ok()) return s;
  if (absl::Status s = ValidateSnapshotTtl(ttl); !s.ok()) return s;
  const absl::Time expiry = clock_->Now() + RoundTtl(ttl);
  std::vector<bool> out;
  out.reserve(ids.size());
  for (const std::string& id : ids) {
    absl::StatusOr<bool> stored = ExtendPage(id, expiry);
    if (!stored.ok()) return stored.status();
    out.push_back(*stored);
  }
  return out;
}

absl::Status DirSnapshotStore::Put(const std::string& id, std::string_view bytes,
                                   absl::Duration ttl) {
  return Write(id, bytes, ttl, nullptr).status();
}

absl::StatusOr<int64_t> DirSnapshotStore::PutFenced(const std::string& id,
                                                    std::string_view bytes,
                                                    absl::Duration ttl,
                                                    const std::string& token,
                                                    int64_t generation) {
  if (absl::Status s = ValidateGeneration(generation); !s.ok()) return s;
  const Fence fence{token, generation};
  return Write(id, bytes, ttl, &fence);
}

absl::StatusOr<int64_t> DirSnapshotStore::Write(const std::string& id,
                                                std::string_view bytes, absl::Duration ttl,
                                                const Fence* fence) {
  if (absl::Status s = ValidateSnapshotId(id); !s.ok()) return s;
  if (absl::Status s = ValidateSnapshotTtl(ttl); !s.ok()) return s;
  if (fence != nullptr && !HoldsLease(id, fence->token)) return LeaseLostError(id);
  const absl::Time expiry = clock_->Now() + RoundTtl(ttl);
  // The temp files are written before the gate is taken, so it is held only for the checks
  // and renames; a plain Put guesses the generation it will write (and Install writes it
  // again in the rare case that a concurrent write moved it).
  int64_t expected;
  if (fence != nullptr) {
    expected = fence->generation;
  } else {
    absl::StatusOr<int64_t> stored = ReadGeneration(id, clock_->Now());
    if (!stored.ok()) return stored.status();
    expected = *stored;
  }
  absl::StatusOr<std::string> snap_temp = WriteTemp(id, kSnapSuffix, bytes, expiry);
  if (!snap_temp.ok()) return snap_temp.status();
  absl::StatusOr<std::string> gen_temp =
      WriteTemp(id, kGenSuffix, absl::StrCat(expected + 1), expiry);
  if (!gen_temp.ok()) {
    unlink(snap_temp->c_str());
    return gen_temp.status();
  }
  absl::StatusOr<int64_t> written;
  {
    FileLock gate;
    if (absl::Status s = LockGate(id, LOCK_EX, &gate); !s.ok()) {
      written = s;
    } else {
      written = Install(id, fence, expected, expiry, *snap_temp, &*gen_temp);
      gate.RemoveAndRelease();
    }
  }
  // Whatever was not renamed into place (nothing, on success).
  unlink(snap_temp->c_str());
  unlink(gen_temp->c_str());
  if (!written.ok()) return written.status();
  if (absl::Status s = SyncDir(); !s.ok()) return s;
  return written;
}

absl::StatusOr<int64_t> DirSnapshotStore::Install(const std::string& id, const Fence* fence,
                                                  int64_t expected, absl::Time expiry,
                                                  const std::string& snap_temp,
                                                  std::string* gen_temp) {
  absl::StatusOr<int64_t> stored = ReadGeneration(id, clock_->Now());
  if (!stored.ok()) return stored.status();
  if (fence != nullptr) {
    if (!HoldsLease(id, fence->token)) return LeaseLostError(id);
    if (*stored != fence->generation) {
      return StaleGenerationError(id, fence->generation, *stored);
    }
  } else if (*stored != expected) {
    unlink(gen_temp->c_str());
    absl::StatusOr<std::string> rewritten =
        WriteTemp(id, kGenSuffix, absl::StrCat(*stored + 1), expiry);
    if (!rewritten.ok()) return rewritten.status();
    *gen_temp = *std::move(rewritten);
  }
  // The generation first: a crash between the renames leaves it raised over the old bytes
  // (see the class comment), never new bytes under an old generation.
  const std::string gen_file = GenerationPath(id);
  if (rename(gen_temp->c_str(), gen_file.c_str()) != 0) {
    return Errno("renaming over", gen_file, errno);
  }
  const std::string snap_file = SnapshotPath(id);
  if (rename(snap_temp.c_str(), snap_file.c_str()) != 0) {
    return Errno("renaming over", snap_file, errno);
  }
  return *stored + 1;
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
  return ReadSnapshot(id, fd);
}

absl::StatusOr<std::pair<std::string, int64_t>> DirSnapshotStore::GetWithGeneration(
    const std::string& id) {
  if (absl::Status s = ValidateSnapshotId(id); !s.ok()) return s;
  const std::string snap_file = SnapshotPath(id);
  const std::string gen_file = GenerationPath(id);
  // Both files are opened under the gate; what is read from them afterwards is those
  // inodes, which later renames do not change.
  FileLock gate;
  if (absl::Status s = LockGate(id, LOCK_SH, &gate); !s.ok()) return s;
  const int snap_fd = OpenRetrying(snap_file, O_RDONLY);
  const int snap_errno = errno;
  const int gen_fd = snap_fd < 0 ? -1 : OpenRetrying(gen_file, O_RDONLY);
  const int gen_errno = errno;
  gate.RemoveIfUnusedAndRelease();
  if (snap_fd < 0) {
    if (snap_errno != ENOENT) return Errno("opening", snap_file, snap_errno);
    return absl::NotFoundError(absl::StrCat("session ", id, ": no snapshot in ", name_));
  }
  const absl::Time now = clock_->Now();
  absl::StatusOr<std::string> bytes = ReadSnapshot(id, snap_fd);
  if (!bytes.ok()) {
    if (gen_fd >= 0) close(gen_fd);
    return bytes.status();
  }
  if (gen_fd < 0) {
    if (gen_errno != ENOENT) return Errno("opening", gen_file, gen_errno);
    return std::make_pair(*std::move(bytes), int64_t{0});  // written before generations
  }
  absl::StatusOr<int64_t> generation = ReadGenerationFd(gen_file, gen_fd, now);
  if (!generation.ok()) return generation.status();
  return std::make_pair(*std::move(bytes), *generation);
}

absl::StatusOr<std::string> DirSnapshotStore::ReadSnapshot(const std::string& id, int fd) {
  absl::Cleanup close_fd = [fd] { close(fd); };
  const std::string file = SnapshotPath(id);
  struct stat st;
  if (fstat(fd, &st) != 0) return Errno("examining", file, errno);
  if (MTime(st) <= clock_->Now()) {
    std::move(close_fd).Invoke();
    UnlinkIfExpired(id);
    return absl::NotFoundError(
        absl::StrCat("session ", id, ": snapshot in ", name_, " expired"));
  }
  std::string bytes;
  if (int err = ReadAll(fd, static_cast<size_t>(st.st_size), &bytes); err != 0) {
    return Errno("reading", file, err);
  }
  return bytes;
}

absl::StatusOr<int64_t> DirSnapshotStore::GetGeneration(const std::string& id) {
  if (absl::Status s = ValidateSnapshotId(id); !s.ok()) return s;
  // One small file, replaced by rename: a reader sees one whole generation.
  return ReadGeneration(id, clock_->Now());
}

absl::StatusOr<int64_t> DirSnapshotStore::ReadGeneration(const std::string& id,
                                                         absl::Time now) const {
  const std::string file = GenerationPath(id);
  const int fd = OpenRetrying(file, O_RDONLY);
  if (fd < 0) {
    if (errno == ENOENT) return 0;
    return Errno("opening", file, errno);
  }
  return ReadGenerationFd(file, fd, now);
}

absl::StatusOr<int64_t> DirSnapshotStore::ReadGenerationFd(const std::string& file, int fd,
                                                           absl::Time now) const {
  absl::Cleanup close_fd = [fd] { close(fd); };
  struct stat st;
  if (fstat(fd, &st) != 0) return Errno("examining", file, errno);
  if (MTime(st) <= now) return 0;  // it lived as long as its snapshot
  std::string text;
  if (int err = ReadAll(fd, static_cast<size_t>(st.st_size), &text); err != 0) {
    return Errno("reading", file, err);
  }
  int64_t generation;
  if (!absl::SimpleAtoi(text, &generation) || generation < 0) {
    return StoreUnavailable(name_, absl::StrCat(file, " holds no generation"));
  }
  return generation;
}

absl::Status DirSnapshotStore::Delete(const std::string& id) {
  if (absl::Status s = ValidateSnapshotId(id); !s.ok()) return s;
  FileLock gate;
  if (absl::Status s = LockGate(id, LOCK_EX, &gate); !s.ok()) return s;
  absl::Cleanup release_gate = [&gate] { gate.RemoveAndRelease(); };
  // The snapshot first: a crash in between leaves the generation, not the bytes.
  for (const std::string& file : {SnapshotPath(id), GenerationPath(id)}) {
    if (unlink(file.c_str()) != 0 && errno != ENOENT) return Errno("deleting", file, errno);
  }
  return absl::OkStatus();
}

absl::Status DirSnapshotStore::LockGate(const std::string& id, int operation,
                                        FileLock* gate) const {
  const std::string file = GatePath(id);
  if (int err = FileLock::Take(file, operation, /*create=*/true, gate); err != 0) {
    return Errno("locking", file, err);
  }
  return absl::OkStatus();
}

absl::StatusOr<int> DirSnapshotStore::RemoveExpired() {
  DIR* dir = opendir(path_.c_str());
  if (dir == nullptr) return Errno("listing", path_, errno);
  int removed = 0;
  errno = 0;
  while (const struct dirent* entry = readdir(dir)) {
    absl::string_view entry_name = entry->d_name;
    const std::string file = absl::StrCat(path_, "/", entry_name);
    std::string id;
    if (absl::StartsWith(entry_name, ".") && absl::StrContains(entry_name, kTempInfix)) {
      // A temp file's ctime is its last write: an old one belongs to a crashed Put.
      struct stat st;
      if (lstat(file.c_str(), &st) == 0 && S_ISREG(st.st_mode) &&
          clock_->Now() - absl::TimeFromTimespec(st.st_ctim) >= kStaleTempAge) {
        unlink(file.c_str());
      }
    } else if (ParseFileName(entry_name, kSnapSuffix, &id) ||
               ParseFileName(entry_name, kGenSuffix, &id)) {
      // A generation is normally removed with its snapshot, but may outlive it (a crash
      // between a write's renames, a Delete cut short). The gate is taken only for files
      // that look expired.
      struct stat st;
      if (lstat(file.c_str(), &st) == 0 && MTime(st) <= clock_->Now() && UnlinkIfExpired(id)) {
        ++removed;
      }
    } else if (ParseFileName(entry_name, kPageSuffix, &id)) {
      struct stat st;
      if (lstat(file.c_str(), &st) == 0 && MTime(st) <= clock_->Now()) {
        RemovePageIfExpired(id);
      }
    } else if (ParseFileName(entry_name, kLeaseSuffix, &id) ||
               ParseFileName(entry_name, kGateSuffix, &id)) {
      RemoveIfStaleLock(file);
    }
    errno = 0;
  }
  int err = errno;
  closedir(dir);
  if (err != 0) return Errno("listing", path_, err);
  return removed;
}

bool DirSnapshotStore::UnlinkIfExpired(const std::string& id) {
  FileLock gate;
  if (!LockGate(id, LOCK_EX, &gate).ok()) return false;
  const absl::Time now = clock_->Now();
  auto unlink_if_expired = [now](const std::string& file) {
    struct stat st;
    return lstat(file.c_str(), &st) == 0 && S_ISREG(st.st_mode) && MTime(st) <= now &&
           unlink(file.c_str()) == 0;
  };
  const bool removed_snapshot = unlink_if_expired(SnapshotPath(id));
  unlink_if_expired(GenerationPath(id));
  gate.RemoveAndRelease();
  return removed_snapshot;
}

absl::StatusOr<std::string> DirSnapshotStore::WriteTemp(const std::string& id,
                                                        absl::string_view suffix,
                                                        std::string_view bytes,
                                                        absl::Time expiry) const {
  absl::BitGen random;
  const std::string temp =
      absl::StrCat(path_, "/.", id, suffix, kTempInfix,
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
