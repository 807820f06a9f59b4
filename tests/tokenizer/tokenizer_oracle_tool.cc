// Drives our tokenizer for sentencepiece_oracle_test.py and bpe_oracle_test.py: loads the
// model directory argv[1] with LoadTokenizer (config: bos 1, eos 2, a vocabulary larger
// than any test model's; a byte-level BPE directory names its EOS in
// tokenizer_config.json), then reads stdin lines and answers each with one line:
//   "E <hex text>"  -> ids of Encode(text, continuation=false), space-separated
//   "C <hex text>"  -> ids of Encode(text, continuation=true)
//   "S <ids...>"    -> hex of the concatenated StreamDecoder bytes (from the start)
// Hex keeps arbitrary bytes on one line. Exit status 1 with the reason on stderr when
// the directory does not load.
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/str_join.h"
#include "server/tokenizer/tokenizer.h"

int main(int argc, char** argv) {
  using attnserve::tokenizer::LoadTokenizer;
  using attnserve::tokenizer::StreamDecoder;
  if (argc != 2) {
    std::cerr << "usage: tokenizer_oracle_tool MODEL_DIR < requests\n";
    return 2;
  }
  attnserve::model::ModelConfig config;
  config.vocab_size = 1 << 20;
  config.bos_token_id = 1;
  config.eos_token_ids = {2};
  auto tokenizer = LoadTokenizer(argv[1], config);
  if (!tokenizer.ok()) {
    std::cerr << tokenizer.status().message() << "\n";
    return 1;
  }
  std::string line;
  while (std::getline(std::cin, line)) {
    if (line.size() < 2) continue;
    const char op = line[0];
    const std::string arg = line.substr(2);
    if (op == 'E' || op == 'C') {
      auto ids = (*tokenizer)->Encode(absl::HexStringToBytes(arg), op == 'C');
      if (!ids.ok()) {
        std::cerr << ids.status().message() << "\n";
        return 1;
      }
      std::cout << absl::StrJoin(*ids, " ") << "\n";
    } else if (op == 'S') {
      std::istringstream in(arg);
      StreamDecoder decoder(**tokenizer, /*text_started=*/false);
      std::string bytes;
      for (int id; in >> id;) bytes += decoder.Next(id);
      std::cout << absl::BytesToHexString(bytes) << "\n";
    }
    std::cout.flush();
  }
  return 0;
}
