// Prints attnserve's rendering of chats with one chat template, for
// chat_template_check.mjs to hold against node-llama-cpp's chat wrappers.
//   stdin  {"template": "llama3", "chats": [[{"role": "user", "content": "Hi"}, ...], ...]}
//   stdout a JSON array: each chat's RenderChat text, or {"error": message}
#include <iostream>
#include <iterator>
#include <string>
#include <vector>

#include "nlohmann/json.hpp"
#include "server/http/chat_template.h"

int main() {
  using nlohmann::json;
  namespace http = attnserve::http;
  const std::string input((std::istreambuf_iterator<char>(std::cin)), std::istreambuf_iterator<char>());
  const json request = json::parse(input, nullptr, /*allow_exceptions=*/false);
  if (!request.is_object() || !request.value("template", json()).is_string() ||
      !request.value("chats", json()).is_array()) {
    std::cerr << "chat_template_dump: stdin must be {\"template\": NAME, \"chats\": [...]}\n";
    return 2;
  }
  const auto kind = http::ChatTemplateByName(request["template"].get<std::string>());
  if (!kind.has_value()) {
    std::cerr << "chat_template_dump: no chat template " << request["template"] << "\n";
    return 2;
  }
  json out = json::array();
  for (const json& chat : request["chats"]) {
    std::vector<http::ChatMessage> messages;
    for (const json& m : chat) {
      messages.push_back({m.at("role").get<std::string>(), m.at("content").get<std::string>()});
    }
    auto text = http::RenderChat(*kind, messages);
    out.push_back(text.ok() ? json(*text) : json{{"error", std::string(text.status().message())}});
  }
  std::cout << out.dump() << "\n";
  return 0;
}
