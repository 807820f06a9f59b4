#include "server/store/file_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <utility>

namespace attnserve::store {
namespace {

// 0 if `file` names the file open as `fd`, else ENOENT if the name is gone, another errno
// if it cannot be examined, or ESTALE if it names a different file.
int CheckNames(const std::string& file, int fd) {
  struct stat open_file, named;
  if (fstat(fd, &open_file) != 0) return errno;
  if (stat(file.c_str(), &named) != 0) return errno;
  const bool same = named.st_dev == open_file.st_dev && named.st_ino == open_file.st_ino;
  return same ? 0 : ESTALE;
}

}  // namespace

FileLock::FileLock(FileLock&& other) noexcept { *this = std::move(other); }

FileLock& FileLock::operator=(FileLock&& other) noexcept {
  if (this != &other) {
    Release();
    fd_ = std::exchange(other.fd_, -1);
    file_ = std::move(other.file_);
  }
  return *this;
}

int FileLock::Take(const std::string& file, int operation, bool create, FileLock* out) {
  out->Release();
  const int flags = O_RDONLY | O_CLOEXEC | (create ? O_CREAT : 0);
  while (true) {
    int fd;
    do {
      fd = open(file.c_str(), flags, 0600);
    } while (fd < 0 && errno == EINTR);
    if (fd < 0) return errno;
    int locked;
    do {
      locked = flock(fd, operation);
    } while (locked != 0 && errno == EINTR);
    const int err = locked == 0 ? CheckNames(file, fd) : errno;
    if (err == 0) {
      out->fd_ = fd;
      out->file_ = file;
      return 0;
    }
    close(fd);
    // The file was removed or replaced between open and flock: lock the one there now.
    const bool moved = locked == 0 && (err == ESTALE || (err == ENOENT && create));
    if (!moved) return err;
  }
}

void FileLock::Release() {
  if (fd_ < 0) return;
  close(fd_);
  fd_ = -1;
  file_.clear();
}

void FileLock::RemoveAndRelease() {
  if (fd_ >= 0 && CheckNames(file_, fd_) == 0) unlink(file_.c_str());
  Release();
}

void FileLock::RemoveIfUnusedAndRelease() {
  // Converting a shared lock drops it first, so someone may remove the file in between:
  // hence CheckNames again once exclusive.
  if (fd_ >= 0 && flock(fd_, LOCK_EX | LOCK_NB) == 0 && CheckNames(file_, fd_) == 0) {
    unlink(file_.c_str());
  }
  Release();
}

}  // namespace attnserve::store
