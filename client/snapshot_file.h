// Snapshot bytes to and from the local side of `sessions export` and
// `sessions import`: an output that never leaves a half-written file, and an
// input read in bounded chunks. The path "-" means stdout or stdin. No gRPC.
#pragma once

#include <cstdio>
#include <istream>
#include <memory>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace attnserve::client {

// Where an export goes. A file is written to a temporary file beside it
// ("PATH.XXXXXX", mode 0600 since a snapshot holds a session's state) and
// renamed over PATH by Commit(), so PATH is either untouched or complete.
// Not thread-safe.
class SnapshotWriter {
 public:
  // Creates the temporary file in PATH's directory, or writes to `stdout_file`
  // (not owned) for "-". Errors name the path and the system's reason.
  static absl::StatusOr<std::unique_ptr<SnapshotWriter>> Open(
      const std::string& path, std::FILE* stdout_file);
  // Removes the temporary file unless Commit() succeeded.
  ~SnapshotWriter();
  SnapshotWriter(const SnapshotWriter&) = delete;
  SnapshotWriter& operator=(const SnapshotWriter&) = delete;

  // Appends `data`.
  absl::Status Write(absl::string_view data);
  // Syncs the temporary file to disk and renames it to PATH; flushes stdout
  // for "-". Call once, after the last Write().
  absl::Status Commit();
  // PATH, or "stdout" for "-": for messages.
  const std::string& name() const { return name_; }

 private:
  SnapshotWriter(std::string name, std::string path, std::string temp_path,
                 int fd, std::FILE* stream)
      : name_(std::move(name)),
        path_(std::move(path)),
        temp_path_(std::move(temp_path)),
        fd_(fd),
        stream_(stream) {}

  std::string name_;
  std::string path_;       // empty for stdout
  std::string temp_path_;  // empty for stdout, and once renamed
  int fd_ = -1;            // the temporary file; -1 for stdout and once closed
  std::FILE* stream_ = nullptr;  // stdout; not owned
};

// Where an import comes from: a file, or `stdin_stream` for "-".
// Not thread-safe.
class SnapshotReader {
 public:
  // Opens PATH for reading (a missing or unreadable file, or a directory, is an
  // error naming the path and the reason), or reads `stdin_stream` (not owned)
  // for "-".
  static absl::StatusOr<std::unique_ptr<SnapshotReader>> Open(
      const std::string& path, std::istream* stdin_stream);
  ~SnapshotReader();
  SnapshotReader(const SnapshotReader&) = delete;
  SnapshotReader& operator=(const SnapshotReader&) = delete;

  // Replaces `*data` with the next bytes: `max_bytes` of them unless the input
  // ends first, none at the end.
  absl::Status Read(size_t max_bytes, std::string* data);
  // Starts reading again from the first byte, so that a refused import can be
  // sent again. False when the input cannot go back: stdin, or a file that
  // does not seek (a pipe).
  bool Rewind();
  // PATH, or "stdin" for "-": for messages.
  const std::string& name() const { return name_; }

 private:
  SnapshotReader(std::string name, int fd, std::istream* stream)
      : name_(std::move(name)), fd_(fd), stream_(stream) {}

  std::string name_;
  int fd_ = -1;                     // the file; -1 for stdin
  std::istream* stream_ = nullptr;  // stdin; not owned
};

}  // namespace attnserve::client
