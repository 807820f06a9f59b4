// The playground page (client/web/, served at / on the HTTP port): its files, embedded
// in the binary at build time (embed_web.cmake), or read from a directory on each
// request (--web_dir: a page under development, or a deployment's own).
//
// Only flat file names of [A-Za-z0-9_.-] with a known extension are served, so no name
// can reach outside the directory. Torch-free and httplib-free.
#pragma once

#include <cstddef>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace attnserve::http {

// One embedded file; the generated table ends with a null name.
struct EmbeddedWebFile {
  const char* name;
  const char* data;
  size_t size;
};
extern const EmbeddedWebFile kEmbeddedWebFiles[];

struct WebFile {
  std::string content_type;
  std::string body;
};

class WebPage {
 public:
  // `dir` empty: the embedded files.
  explicit WebPage(std::string dir) : dir_(std::move(dir)) {}

  // The file `name` ("" means index.html). NOT_FOUND for a name that is not served or a
  // file that is not there; UNAVAILABLE when --web_dir's file cannot be read.
  absl::StatusOr<WebFile> Find(absl::string_view name) const;

  // The Content-Type served for `name`, or "" for a name that is never served.
  static std::string ContentTypeOf(absl::string_view name);

 private:
  const std::string dir_;
};

}  // namespace attnserve::http
