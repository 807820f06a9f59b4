// Unguessable identifiers: session ids and store lease tokens.
#pragma once

#include <string>

namespace attnserve {

// 128 bits from the kernel's CSPRNG (getrandom), as 32 lowercase hex digits. Thread-safe.
// Aborts if the kernel cannot supply randomness: nothing sensible can be served without
// it (ids are the only handle on a session and must not be guessable from earlier ones).
std::string RandomId128();

}  // namespace attnserve
