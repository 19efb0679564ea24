package redisstore

import "github.com/redis/go-redis/v9"

// The Lua scripts, one per Store operation. Each touches only the two
// Redis keys of one provider key (KEYS[1], its facts; KEYS[2], its retry
// leases), which share a hash tag, so it runs atomically on one Cluster
// slot. go-redis sends them with EVALSHA, and EVAL when the server does
// not know them yet.
//
// Facts are a hash: v (the version), ds, du, np (down since, down until,
// next probe), r (the reason), p, pu (the prober and its lease's end), w
// (the server wait's end). Times are Unix milliseconds of the callers'
// clocks, 0 for none; the scripts judge every fact by the caller's time
// (at): a lapsed fact reads as zero. Retry leases are a sorted set of
// holders scored by lease end.
//
// Versions come from the server's clock (TIME, in microseconds): a change
// stores max(old + 1, now + 1); an answer that changed nothing carries the
// stored version, or the clock's for a key Redis does not know, and a
// refused probe lease always the clock's. So a key Redis lost (a restart,
// an eviction) comes back with versions above any it had, and above those
// a process's in-process fallback gave it (they grow by one per change
// from a Redis version); and a process back from its fallback, whose view
// holds such versions, takes Redis's refusal of the lease as news instead
// of asking again at once (its gate would spin on Redis until the key
// changes or a minute passes).
//
// A change sets both keys' expiry (PEXPIRE) to a minute past the last live
// fact, so Redis forgets a key a minute after its facts lapsed, and keeps
// its version at least a minute after its last change; expiry is only
// Redis's memory bound, never how a fact lapses. A change that other
// processes must hear of is published on the channel (ARGV after the
// operation's own) as one message:
//
//	"v ds du np pu w n len(p) len(name)\n" + p + name + r
//
// Every answer is {v, ds, du, np, pu, w, n, p, r, granted, bad}: bad
// counts the fields the script read as nothing — not a short digit string
// (NaN, inf, 1e19, a negative), a time beyond the horizon (ARGV[1]: the
// longest lifetime the Store's callers write, at least 10 minutes), a
// version ahead of Redis's clock, an over-long prober or reason. A script
// that read any writes the facts back as it read them. No expiry is set
// beyond the horizon.
const prelude = `
local kf, kr = KEYS[1], KEYS[2]
local hold = 60000
local horizon = tonumber(ARGV[1])
local bad = 0
local function int(x) return string.format('%d', x) end
local function clock()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000000 + tonumber(t[2])
end
local function digits(x, n)
  return type(x) == 'string' and #x >= 1 and #x <= n and string.match(x, '^%d+$') ~= nil
end
local function field(x)
  if not x then return 0 end
  if digits(x, 15) then return tonumber(x) end
  bad = bad + 1
  return 0
end
local function when(x, at)
  local t = field(x)
  if t > at + horizon then bad = bad + 1 return 0 end
  return t
end
local function text(x, n)
  if not x then return '' end
  if #x > n then bad = bad + 1 return '' end
  return x
end
local function version(x)
  if not x then return 0 end
  if digits(x, 16) then
    local v = tonumber(x)
    if v <= clock() + 60000000 then return v end
  end
  bad = bad + 1
  return 0
end
local function live(at)
  return redis.call('ZCOUNT', kr, '(' .. int(at), int(at + horizon))
end
local function load(at)
  local h = redis.call('HMGET', kf, 'v', 'ds', 'du', 'np', 'r', 'p', 'pu', 'w')
  local f = {sv = version(h[1]), ds = when(h[2], at), du = when(h[3], at), np = when(h[4], at),
    r = text(h[5], 256), p = text(h[6], 64), pu = when(h[7], at), w = when(h[8], at)}
  if f.ds == 0 or at >= f.du then f.ds, f.du, f.np, f.r = 0, 0, 0, '' end
  if f.p == '' or at >= f.pu then f.p, f.pu = '', 0 end
  if at >= f.w then f.w = 0 end
  f.n = live(at)
  return f
end
local function copy(f)
  local g = {}
  for k, v in pairs(f) do g[k] = v end
  return g
end
local function reply(f, v, granted)
  return {v, f.ds, f.du, f.np, f.pu, f.w, f.n, f.p, f.r, granted and 1 or 0, bad}
end
local function unchanged(f, granted)
  if f.sv == 0 then return reply(f, clock(), granted) end
  return reply(f, f.sv, granted)
end
local function keep(at, last)
  local top = redis.call('ZREVRANGEBYSCORE', kr, int(at + horizon), '-inf', 'WITHSCORES', 'LIMIT', 0, 1)
  if top[2] then last = math.max(last, tonumber(top[2])) end
  local ttl = int(math.min(math.max(last - at, 0), horizon) + hold)
  redis.call('PEXPIRE', kf, ttl)
  if redis.call('EXISTS', kr) == 1 then redis.call('PEXPIRE', kr, ttl) end
end
local function finish(f, g, at, name, chan, announce, granted)
  if g.ds == f.ds and g.du == f.du and g.np == f.np and g.r == f.r and g.p == f.p and
      g.pu == f.pu and g.w == f.w and g.n == f.n and bad == 0 then
    return unchanged(f, granted)
  end
  local v = math.max(f.sv + 1, clock() + 1)
  redis.call('HSET', kf, 'v', int(v), 'ds', int(g.ds), 'du', int(g.du), 'np', int(g.np),
    'r', g.r, 'p', g.p, 'pu', int(g.pu), 'w', int(g.w))
  keep(at, math.max(g.du, g.pu, g.w))
  if announce then
    redis.call('PUBLISH', chan, table.concat({int(v), int(g.ds), int(g.du), int(g.np), int(g.pu),
      int(g.w), int(g.n), int(#g.p), int(#name)}, ' ') .. '\n' .. g.p .. name .. g.r)
  end
  return reply(g, v, granted)
end
`

// loadScript: ARGV horizon, at.
var loadScript = redis.NewScript(prelude + `
local f = load(tonumber(ARGV[2]))
return unchanged(f, false)
`)

// reportScript: ARGV horizon, at, evidence ("down", "up" or ""), reason,
// down-for (ms), next probe, wait until, prober, name, channel.
var reportScript = redis.NewScript(prelude + `
local at, ev, reason, downFor = tonumber(ARGV[2]), ARGV[3], ARGV[4], tonumber(ARGV[5])
local np, wait, prober = tonumber(ARGV[6]), tonumber(ARGV[7]), ARGV[8]
local f = load(at)
local g = copy(f)
local held = prober ~= '' and f.p == prober
if held then g.p, g.pu = '', 0 end
if ev == 'down' then
  if f.ds == 0 then g.ds, g.np = at, np elseif held then g.np = np end
  g.du = math.max(g.du, at + downFor)
elseif ev == 'up' then
  g.ds, g.du, g.np, g.r = 0, 0, 0, ''
end
if ev == 'down' or wait ~= 0 then g.r = reason end
g.w = math.max(g.w, wait)
return finish(f, g, at, ARGV[9], ARGV[10], true, false)
`)

// takeProbeScript: ARGV horizon, at, holder, until, name, channel. A lease
// or a next probe further off than two of the caller's leases is none
// this fleet wrote: it is read as none (the next probe as due).
var takeProbeScript = redis.NewScript(prelude + `
local at, holder, untl = tonumber(ARGV[2]), ARGV[3], tonumber(ARGV[4])
local f = load(at)
local far = untl + (untl - at)
if f.pu > far then f.p, f.pu, bad = '', 0, bad + 1 end
if f.np > far then f.np, bad = at, bad + 1 end
if f.ds == 0 or f.p ~= '' or f.np > at then return reply(f, math.max(f.sv, clock()), false) end
local g = copy(f)
g.p, g.pu = holder, untl
g.du = math.max(g.du, untl)
return finish(f, g, at, ARGV[5], ARGV[6], true, true)
`)

// takeRetryScript: ARGV horizon, at, holder, until, limit, name, channel.
// Changes to retry leases alone are not announced; leases beyond the
// horizon are none this fleet took, and are removed.
var takeRetryScript = redis.NewScript(prelude + `
local at, holder, untl, limit = tonumber(ARGV[2]), ARGV[3], tonumber(ARGV[4]), tonumber(ARGV[5])
redis.call('ZREMRANGEBYSCORE', kr, '-inf', int(at))
bad = bad + redis.call('ZREMRANGEBYSCORE', kr, '(' .. int(at + horizon), '+inf')
local f = load(at)
if f.n >= limit then return unchanged(f, false) end
redis.call('ZADD', kr, int(untl), holder)
local g = copy(f)
g.n = live(at)
keep(at, math.max(g.du, g.pu, g.w))
return finish(f, g, at, ARGV[6], ARGV[7], false, true)
`)

// releaseScript: ARGV horizon, now, holder, name, channel. Ending a probe
// lease is announced, ending a retry lease alone is not.
var releaseScript = redis.NewScript(prelude + `
local now, holder = tonumber(ARGV[2]), ARGV[3]
local f = load(now)
local g = copy(f)
local announce = false
if f.p ~= '' and f.p == holder then g.p, g.pu, announce = '', 0, true end
if redis.call('ZREM', kr, holder) == 1 then g.n = live(now) end
return finish(f, g, now, ARGV[4], ARGV[5], announce, false)
`)
