// Who a call is made for. A tenant is the name an API key maps to (server/service/
// api_keys.h); without API keys every call is the default tenant's.
#pragma once

namespace attnserve {

// The tenant of a server without API keys, and the owner of a version 1 snapshot.
inline constexpr char kDefaultTenant[] = "default";

}  // namespace attnserve
