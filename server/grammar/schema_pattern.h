// JSON Schema's string `pattern` and `format` as grammar rules over the body of a JSON
// string (the bytes between its quotes, as JSON.stringify writes them: json_lexicon.h).
//
// A pattern is an ECMAScript regular expression run with the u flag, as Ajv runs it, and
// unanchored: a string is valid when some part of it matches. Supported: literals, `.`,
// classes ([a-z], [^...]), the escapes \d \D \w \W \s \S \t \n \r \v \f \0 \cX \xHH
// \uHHHH \u{H...} and escaped syntax characters, groups ((...), (?:...), (?<name>...)),
// alternation, and the quantifiers ? * + {n} {n,} {n,m} (greedy or lazy: the same
// strings). ^ and $ are read at the ends of each top-level alternative; without them the
// alternative may have anything before or after it. Refused (INVALID_ARGUMENT naming
// `pattern`): anchors elsewhere, \b \B, lookaround, back references, \p{...}, and an
// unbounded repetition of a part that can match the empty string.
//
// Formats, as ajv-formats' full mode checks them: date (leap years included), time and
// date-time (a time zone required; seconds 00-59 and at most 9 fraction digits: the
// leap second 60, which Ajv accepts only at 23:59 UTC, is never written; as RFC 3339
// writes them, which every validator accepts: T or t between date and time, the zone as
// Z, z or +hh:mm; Ajv also takes a space, +hhmm and +hh, which are not written), uuid
// (with an optional urn:uuid: prefix, any case), email and ipv4 (exactly); uri,
// uri-reference, url, hostname and byte: the part schema_pattern.cc describes (a
// scheme, "://", a host of labels, optional port, path, query and fragment; relative
// paths and fragments too for uri-reference; http, https or ftp and a top-level label
// of letters for url; up to 3 labels for hostname; base64 on one line for byte).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "server/grammar/json_lexicon.h"

namespace attnserve::grammar {

// A string body rule and the lengths (in code points) of the strings it matches.
struct StringBodyRule {
  int rule = -1;
  int64_t min_length = 0;
  int64_t max_length = -1;  // -1: unbounded
};

// The strings containing a match of `pattern`; nullopt when no string does. `where` (the
// schema's JSON Pointer) goes into errors; `max_depth` bounds the nesting of groups.
absl::StatusOr<std::optional<StringBodyRule>> AddPattern(JsonLexicon& lexicon,
                                                         std::string_view pattern,
                                                         const std::string& where, int max_depth);

// The strings of `format` (those above); INVALID_ARGUMENT naming `format` for any other.
absl::StatusOr<StringBodyRule> AddFormat(JsonLexicon& lexicon, std::string_view format,
                                         const std::string& where);

}  // namespace attnserve::grammar
