// The Lua scripts of the Redis backend (redis_store.h): one writer per session
// (server/DESIGN.md §7) as scripts that Redis runs with nothing in between.
#pragma once

namespace attnserve::store {

struct RedisScript {
  const char* name;    // for messages: "<name> script: <error>"
  const char* source;  // Lua, run by EVALSHA or EVAL
};

// Indexed by RedisSnapshotStore::Script. Generations are compared as the decimal strings
// Redis stores (never converted to Lua numbers, which are doubles) and raised by INCR.
// Writes give the snapshot and its generation one absolute expiry `at` (the server's TIME
// plus the ttl), so neither outlives the other. The bytes never pass through Lua (Redis
// copies them into the script's strings slowly, blocking every client meanwhile: 7.4 ms
// against 2.2 ms at 3.5 MB, tests/bench/scale_bench.sh): the writer SETs them under a
// staging key of its own with an expiry, and the script, pipelined behind that SET,
// RENAMEs them into place only if every check passes, and deletes them otherwise. INCR
// is the first write and runs under pcall: if Redis refuses it (out of memory, a
// generation that is not a number), the script deletes the staging key and has written
// nothing else.
inline constexpr RedisScript kRedisScripts[] = {
    // kPut. KEYS: snapshot, generation, staging. ARGV: ttl ms. Moves the bytes the
    // caller staged (SET just before, in the same pipeline) into place. Returns the new
    // generation, or {'nostaging'} if the staging SET did not happen (its own reply says
    // why).
    {"Put",
     "if redis.call('EXISTS', KEYS[3]) == 0 then return {'nostaging'} end\n"
     "local gen = redis.pcall('INCR', KEYS[2])\n"
     "if type(gen) == 'table' then redis.call('DEL', KEYS[3]) return gen end\n"
     "local now = redis.call('TIME')\n"
     "local ms = now[1] * 1000 + math.floor(now[2] / 1000) + ARGV[1]\n"
     "local at = string.format('%.0f', ms)\n"
     "redis.call('RENAME', KEYS[3], KEYS[1])\n"
     "redis.call('PEXPIREAT', KEYS[1], at)\n"
     "redis.call('PEXPIREAT', KEYS[2], at)\n"
     "return gen\n"},
    // kPutFenced. KEYS: lease, generation, snapshot, staging. ARGV: token, expected
    // generation, ttl ms. Returns the new generation, {'lost'}, {'stale', stored
    // generation} or {'nostaging'}; the staged bytes are moved into place or deleted.
    {"PutFenced",
     "if redis.call('GET', KEYS[1]) ~= ARGV[1] then\n"
     "  redis.call('DEL', KEYS[4])\n"
     "  return {'lost'}\n"
     "end\n"
     "local stored = redis.call('GET', KEYS[2]) or '0'\n"
     "if stored ~= ARGV[2] then\n"
     "  redis.call('DEL', KEYS[4])\n"
     "  return {'stale', stored}\n"
     "end\n"
     "if redis.call('EXISTS', KEYS[4]) == 0 then return {'nostaging'} end\n"
     "local gen = redis.pcall('INCR', KEYS[2])\n"
     "if type(gen) == 'table' then redis.call('DEL', KEYS[4]) return gen end\n"
     "local now = redis.call('TIME')\n"
     "local ms = now[1] * 1000 + math.floor(now[2] / 1000) + ARGV[3]\n"
     "local at = string.format('%.0f', ms)\n"
     "redis.call('RENAME', KEYS[4], KEYS[3])\n"
     "redis.call('PEXPIREAT', KEYS[3], at)\n"
     "redis.call('PEXPIREAT', KEYS[2], at)\n"
     "return gen\n"},
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
