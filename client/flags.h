// The client declares its flags through the project's one flag library,
// server/config/flag_set.h; these names keep client code short.
#pragma once

#include "server/config/flag_set.h"

namespace attnserve::client {

using config::EnvLookup;
using config::FlagSet;

// The process environment (std::getenv).
inline EnvLookup ProcessEnv() { return config::GetEnv; }

}  // namespace attnserve::client
