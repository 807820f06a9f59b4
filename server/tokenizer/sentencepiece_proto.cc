#include "server/tokenizer/sentencepiece_proto.h"

#include <cstdint>

#include "absl/strings/str_cat.h"

namespace attnserve::tokenizer::internal {
namespace {

// One field of a message: its number, wire type, and payload (the varint's value, or the
// bytes of a length-delimited or fixed-size field).
struct Field {
  int number = 0;
  int wire_type = 0;
  uint64_t varint = 0;
  std::string_view bytes;
  std::string_view raw;  // the whole field, tag included
};

bool ReadVarint(std::string_view& in, uint64_t& value) {
  value = 0;
  for (int shift = 0; shift < 64 && !in.empty(); shift += 7) {
    const uint8_t b = uint8_t(in.front());
    in.remove_prefix(1);
    value |= uint64_t(b & 0x7f) << shift;
    if ((b & 0x80) == 0) return true;
  }
  return false;
}

// Reads the next field of `in` into `field`; false when malformed.
bool NextField(std::string_view& in, Field& field) {
  const std::string_view start = in;
  uint64_t tag;
  if (!ReadVarint(in, tag)) return false;
  field.number = int(tag >> 3);
  field.wire_type = int(tag & 7);
  field.bytes = {};
  switch (field.wire_type) {
    case 0:
      if (!ReadVarint(in, field.varint)) return false;
      break;
    case 1:
    case 5: {
      const size_t n = field.wire_type == 1 ? 8 : 4;
      if (in.size() < n) return false;
      field.bytes = in.substr(0, n);
      in.remove_prefix(n);
      break;
    }
    case 2: {
      uint64_t n;
      if (!ReadVarint(in, n) || n > in.size()) return false;
      field.bytes = in.substr(0, size_t(n));
      in.remove_prefix(size_t(n));
      break;
    }
    default:
      return false;  // groups (3, 4) are not used by sentencepiece_model.proto
  }
  field.raw = start.substr(0, start.size() - in.size());
  return true;
}

void AppendVarint(std::string& out, uint64_t value) {
  while (value >= 0x80) {
    out.push_back(char(uint8_t(value) | 0x80));
    value >>= 7;
  }
  out.push_back(char(value));
}

absl::Status Malformed(const char* what) {
  return absl::DataLossError(
      absl::StrCat("tokenizer.model: not a SentencePiece model (malformed ", what, ")"));
}

}  // namespace

absl::StatusOr<SentencePieceFacts> ReadSentencePieceFacts(std::string_view serialized) {
  SentencePieceFacts facts;
  Field f;
  for (std::string_view in = serialized; !in.empty();) {
    if (!NextField(in, f)) return Malformed("ModelProto");
    if (f.wire_type != 2) continue;
    if (f.number == 1) {  // SentencePiece
      PieceType type = PieceType::kNormal;
      Field g;
      for (std::string_view p = f.bytes; !p.empty();) {
        if (!NextField(p, g)) return Malformed("pieces");
        if (g.number == 3 && g.wire_type == 0) type = PieceType(g.varint);
      }
      facts.types.push_back(type);
    } else if (f.number == 3 || f.number == 5) {  // normalizer / denormalizer spec
      Field g;
      for (std::string_view p = f.bytes; !p.empty();) {
        if (!NextField(p, g)) return Malformed("normalizer_spec");
        if (f.number == 5) {
          if (g.number == 2 && g.wire_type == 2 && !g.bytes.empty()) {
            facts.has_denormalizer = true;
          }
        } else if (g.number == 3 && g.wire_type == 0) {
          facts.add_dummy_prefix = g.varint != 0;
        } else if (g.number == 4 && g.wire_type == 0) {
          facts.remove_extra_whitespaces = g.varint != 0;
        }
      }
    }
  }
  return facts;
}

absl::StatusOr<std::string> WithoutDummyPrefix(std::string_view serialized) {
  std::string out;
  out.reserve(serialized.size() + 8);
  bool had_normalizer = false;
  Field f;
  for (std::string_view in = serialized; !in.empty();) {
    if (!NextField(in, f)) return Malformed("ModelProto");
    if (f.number == 4) continue;  // self_test_data
    if (f.number != 3 || f.wire_type != 2) {
      out.append(f.raw);
      continue;
    }
    had_normalizer = true;
    std::string spec;
    Field g;
    for (std::string_view p = f.bytes; !p.empty();) {
      if (!NextField(p, g)) return Malformed("normalizer_spec");
      if (g.number != 3) spec.append(g.raw);
    }
    spec.append({char(3 << 3 | 0), char(0)});  // add_dummy_prefix = false
    AppendVarint(out, 3 << 3 | 2);
    AppendVarint(out, spec.size());
    out.append(spec);
  }
  if (!had_normalizer) {
    out.append({char(3 << 3 | 2), char(2), char(3 << 3 | 0), char(0)});
  }
  return out;
}

}  // namespace attnserve::tokenizer::internal
