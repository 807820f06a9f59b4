#include "server/trainer/corpus.h"

#include <fstream>
#include <iterator>

#include "absl/strings/str_cat.h"

namespace attnserve::trainer {

absl::StatusOr<Corpus> LoadCorpus(const std::string& path, int64_t min_bytes,
                                  int64_t block, int period) {
  std::ifstream f(path, std::ios::binary);
  if (!f) {
    return absl::NotFoundError(absl::StrCat("corpus: cannot open '", path,
                                            "' (deploy/corpus.sh writes the default one)"));
  }
  const std::string text((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  if (text.empty()) return absl::InvalidArgumentError(absl::StrCat("corpus '", path, "' is empty"));
  Corpus c;
  for (int64_t start = 0, i = 0; start < int64_t(text.size()); start += block, ++i) {
    (i % period == period - 1 ? c.validation : c.train) += text.substr(start, block);
  }
  if (int64_t(c.train.size()) < min_bytes || int64_t(c.validation.size()) < min_bytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "corpus '", path, "' has ", text.size(), " bytes: too short to give training and "
        "validation at least ", min_bytes, " bytes each (one sequence)"));
  }
  return c;
}

}  // namespace attnserve::trainer
