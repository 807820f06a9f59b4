// Unguessable identifiers: session ids and store lease tokens.
#pragma once

#include <string>
#include <string_view>

namespace attnserve {

// 128 bits from the kernel's CSPRNG (getrandom), as 32 lowercase hex digits. Thread-safe.
// Aborts if the kernel cannot supply randomness: nothing sensible can be served without
// it (ids are the only handle on a session and must not be guessable from earlier ones).
std::string RandomId128();
// True if `id` has RandomId128's form (32 lowercase hex digits).
bool IsRandomId128(std::string_view id);

}  // namespace attnserve
