// The Lua scripts of the Redis backend (redis_store.h): one writer per session
// (DESIGN.md §7) as scripts that Redis runs with nothing in between.
#pragma once

namespace attnserve::store {

struct RedisScript {
  const char* name;    // for messages: "<name> script: <error>"
  const char* source;  // Lua, run by EVALSHA or EVAL
};

// Indexed by RedisSnapshotStore::Script. Generations are compared as the decimal strings
// Redis stores (never converted to Lua numbers, which are doubles) and raised by INCR.
// Writes give the snapshot and its generation one absolute expiry `at` (the server's TIME
// plus the ttl), so neither outlives the other. The first write in each script is the one
// Redis may refuse when out of memory, so a refused script has written nothing.
inline constexpr RedisScript kRedisScripts[] = {
    // kPut. KEYS: snapshot, generation. ARGV: bytes, ttl ms. Returns the new generation.
    {"Put",
     "local gen = redis.call('INCR', KEYS[2])\n"
     "local now = redis.call('TIME')\n"
     "local ms = now[1] * 1000 + math.floor(now[2] / 1000) + ARGV[2]\n"
     "local at = string.format('%.0f', ms)\n"
     "redis.call('SET', KEYS[1], ARGV[1], 'PXAT', at)\n"
     "redis.call('PEXPIREAT', KEYS[2], at)\n"
     "return gen\n"},
    // kPutFenced. KEYS: lease, generation, snapshot. ARGV: token, expected generation,
    // bytes, ttl ms. Returns the new generation, {'lost'} or {'stale', stored generation}.
    {"PutFenced",
     "if redis.call('GET', KEYS[1]) ~= ARGV[1] then return {'lost'} end\n"
     "local stored = redis.call('GET', KEYS[2]) or '0'\n"
     "if stored ~= ARGV[2] then return {'stale', stored} end\n"
     "local gen = redis.call('INCR', KEYS[2])\n"
     "local now = redis.call('TIME')\n"
     "local ms = now[1] * 1000 + math.floor(now[2] / 1000) + ARGV[4]\n"
     "local at = string.format('%.0f', ms)\n"
     "redis.call('SET', KEYS[3], ARGV[3], 'PXAT', at)\n"
     "redis.call('PEXPIREAT', KEYS[2], at)\n"
     "return gen\n"},
    // kGetWithGeneration. KEYS: snapshot, generation. Returns nil or {bytes, generation}.
    {"GetWithGeneration",
     "local bytes = redis.call('GET', KEYS[1])\n"
     "if not bytes then return false end\n"
     "return {bytes, redis.call('GET', KEYS[2]) or '0'}\n"},
    // kAcquire. KEYS: lease, generation. ARGV: token, ttl ms. Returns nil if the lease is
    // held, else the generation.
    {"AcquireLease",
     "if not redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then\n"
     "  return false\n"
     "end\n"
     "return redis.call('GET', KEYS[2]) or '0'\n"},
    // kRenew. KEYS: lease. ARGV: token, ttl ms. Returns 1 if renewed, 0 if not held.
    {"RenewLease",
     "if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end\n"
     "return redis.call('PEXPIRE', KEYS[1], ARGV[2])\n"},
    // kRelease. KEYS: lease. ARGV: token. Returns how many keys it deleted.
    {"ReleaseLease",
     "if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end\n"
     "return redis.call('DEL', KEYS[1])\n"},
};

}  // namespace attnserve::store
