#include "client/snapshot_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <vector>

#include "absl/strings/str_cat.h"

namespace attnserve::client {
namespace {

absl::Status WriteError(const std::string& name) {
  return absl::ErrnoToStatus(errno, absl::StrCat("cannot write ", name));
}

absl::Status ReadError(const std::string& name) {
  return absl::ErrnoToStatus(errno, absl::StrCat("cannot read ", name));
}

}  // namespace

absl::StatusOr<std::unique_ptr<SnapshotWriter>> SnapshotWriter::Open(
    const std::string& path, std::FILE* stdout_file) {
  if (path == "-") {
    return std::unique_ptr<SnapshotWriter>(
        new SnapshotWriter("stdout", "", "", -1, stdout_file));
  }
  // rename() would refuse a directory only after the whole download.
  struct stat st;
  if (stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) {
    errno = EISDIR;
    return WriteError(path);
  }
  std::string temp_path = absl::StrCat(path, ".XXXXXX");
  std::vector<char> name(temp_path.begin(), temp_path.end());
  name.push_back('\0');
  const int fd = mkstemp(name.data());
  if (fd < 0) return WriteError(path);
  temp_path.assign(name.data());
  return std::unique_ptr<SnapshotWriter>(
      new SnapshotWriter(path, path, std::move(temp_path), fd, nullptr));
}

SnapshotWriter::~SnapshotWriter() {
  if (fd_ >= 0) close(fd_);
  if (!temp_path_.empty()) unlink(temp_path_.c_str());
}

absl::Status SnapshotWriter::Write(absl::string_view data) {
  if (stream_ != nullptr) {
    if (std::fwrite(data.data(), 1, data.size(), stream_) != data.size()) {
      return WriteError(name_);
    }
    return absl::OkStatus();
  }
  while (!data.empty()) {
    const ssize_t n = write(fd_, data.data(), data.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return WriteError(name_);
    data.remove_prefix(static_cast<size_t>(n));
  }
  return absl::OkStatus();
}

absl::Status SnapshotWriter::Commit() {
  if (stream_ != nullptr) {
    return std::fflush(stream_) == 0 ? absl::OkStatus() : WriteError(name_);
  }
  // Without the sync a crash soon after the rename can leave PATH empty.
  if (fsync(fd_) != 0) return WriteError(name_);
  const int fd = fd_;
  fd_ = -1;
  if (close(fd) != 0) return WriteError(name_);
  if (rename(temp_path_.c_str(), path_.c_str()) != 0) return WriteError(name_);
  temp_path_.clear();
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<SnapshotReader>> SnapshotReader::Open(
    const std::string& path, std::istream* stdin_stream) {
  if (path == "-") {
    if (stdin_stream == nullptr) {
      return absl::FailedPreconditionError("cannot read stdin: no stdin");
    }
    return std::unique_ptr<SnapshotReader>(
        new SnapshotReader("stdin", -1, stdin_stream));
  }
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return ReadError(path);
  struct stat st;
  const bool ok = fstat(fd, &st) == 0;
  if (!ok || S_ISDIR(st.st_mode)) {
    if (ok) errno = EISDIR;  // read() would fail later with the same reason
    absl::Status status = ReadError(path);
    close(fd);
    return status;
  }
  return std::unique_ptr<SnapshotReader>(new SnapshotReader(path, fd, nullptr));
}

SnapshotReader::~SnapshotReader() {
  if (fd_ >= 0) close(fd_);
}

absl::Status SnapshotReader::Read(size_t max_bytes, std::string* data) {
  data->resize(max_bytes);
  size_t filled = 0;
  if (stream_ != nullptr) {
    stream_->read(data->data(), static_cast<std::streamsize>(max_bytes));
    filled = static_cast<size_t>(stream_->gcount());
    if (stream_->bad()) return absl::DataLossError("cannot read stdin");
  } else {
    while (filled < max_bytes) {
      const ssize_t n = read(fd_, data->data() + filled, max_bytes - filled);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) return ReadError(name_);
      if (n == 0) break;
      filled += static_cast<size_t>(n);
    }
  }
  data->resize(filled);
  return absl::OkStatus();
}

bool SnapshotReader::Rewind() {
  return stream_ == nullptr && lseek(fd_, 0, SEEK_SET) == 0;
}

}  // namespace attnserve::client
