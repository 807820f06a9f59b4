#include "server/http/web_page.h"

#include <fstream>
#include <sstream>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace attnserve::http {

std::string WebPage::ContentTypeOf(absl::string_view name) {
  if (name.empty() || name.front() == '.') return "";
  for (char c : name) {
    if (!absl::ascii_isalnum(static_cast<unsigned char>(c)) && c != '_' && c != '.' && c != '-') {
      return "";
    }
  }
  struct Type {
    const char* suffix;
    const char* type;
  };
  static constexpr Type kTypes[] = {
      {".html", "text/html; charset=utf-8"},   {".js", "text/javascript; charset=utf-8"},
      {".css", "text/css; charset=utf-8"},     {".svg", "image/svg+xml"},
      {".png", "image/png"},                   {".ico", "image/x-icon"},
      {".json", "application/json"},           {".webmanifest", "application/manifest+json"}};
  for (const Type& t : kTypes) {
    if (absl::EndsWith(name, t.suffix)) return t.type;
  }
  return "";
}

absl::StatusOr<WebFile> WebPage::Find(absl::string_view name) const {
  if (name.empty()) name = "index.html";
  WebFile file;
  file.content_type = ContentTypeOf(name);
  auto not_found = [&] { return absl::NotFoundError(absl::StrCat("no page file '", name, "'")); };
  if (file.content_type.empty()) return not_found();
  if (dir_.empty()) {
    for (const EmbeddedWebFile* f = kEmbeddedWebFiles; f->name != nullptr; ++f) {
      if (name == f->name) {
        file.body.assign(f->data, f->size);
        return file;
      }
    }
    return not_found();
  }
  const std::string path = absl::StrCat(dir_, "/", name);
  std::ifstream in(path, std::ios::binary);
  if (!in) return not_found();
  std::ostringstream body;
  body << in.rdbuf();
  if (in.bad()) return absl::UnavailableError(absl::StrCat("cannot read ", path));
  file.body = std::move(body).str();
  return file;
}

}  // namespace attnserve::http
