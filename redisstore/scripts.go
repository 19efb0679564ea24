package redisstore

import "github.com/redis/go-redis/v9"

// The Lua scripts, one per Store operation. Each touches only the four
// Redis keys of one provider key (KEYS[1], its facts; KEYS[2], its retry
// leases; KEYS[3], its send leases; KEYS[4], its tallies), which share a
// hash tag, so it runs atomically on one Cluster slot. go-redis sends them
// with EVALSHA, and EVAL when the server does not know them yet.
//
// Facts are a hash: v (the version), ds, du, np (down since, down until,
// next probe), r (the reason), p, pu (the prober and its lease's end), w
// (the server wait's end), b, e, fu (the pace: burst, every, full), mi, gr,
// ca, cu (the limit on calls in flight: the limit, its growth interval,
// cut at, cap until), sp, fl, nx, tu (what 429s taught: the spacing, its
// floor, the next send, taught until). Times are Unix milliseconds of the
// callers' clocks, 0 for none, but for the pace's, the limit's and the
// lesson's (e, fu, gr, ca, sp, fl, nx), which are
// microseconds (an Every of 6.7 ms, 9,000 requests a minute, must not
// round to 6 or 7, nor a limit grow a step early); the scripts judge
// every fact by the caller's time (at): a lapsed fact reads as zero. Retry
// and send leases are sorted sets of holders scored by lease end.
//
// Tallies are a hash of owner (a process, Report.Owner: at most 128 bytes)
// to "n:seq:until": the key's calls that process has in flight without a
// send lease, its count's sequence number (a decimal of up to 20 digits
// without a leading zero: any uint64, compared digit by digit, since a
// Lua number holds only 53 bits and storetest numbers counts by
// UnixNano), and the tally's end (Unix µs). A count whose seq is not
// above the owner's stored one is stale and ignored; an ended tally (n 0)
// is kept a minute with its seq, so that a late count cannot bring it
// back. InFlight (s, below) is the live send leases and the live tallies'
// n, at most maxCount.
//
// Every script's ARGV begins with the horizon (ARGV[1], ms) and the
// caller's time (ARGV[2], µs: at, the time in ms the scripts judge the
// other facts by, is its floor).
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
// A change sets the keys' expiry (PEXPIRE) to a minute past the last live
// fact (a live tally's end included), so Redis forgets a key a minute after
// its facts lapsed, and keeps its version at least a minute after its last
// change; expiry is only Redis's memory bound, never how a fact lapses. A
// change that other processes must hear of is published on the channel
// (ARGV after the operation's own) as one message:
//
//	"v ds du np pu w n b e fu mi gr ca cu s sp fl nx tu len(p) len(name)\n" + p + name + r
//
// (n counts the live retry leases, s the calls in flight: live send leases
// and tallies). Every answer is {v, ds, du, np, pu, w, n, p, r, granted,
// bad, b, e, fu, mi, gr, ca, cu, s, slot, sp, fl, nx, tu}: slot is
// TakeSend's instant (µs;
// 0 for none and for the other operations), bad counts the fields the
// script read as nothing — not a short digit string (NaN, inf, 1e19, a
// negative), a time beyond the horizon (ARGV[1]: the longest lifetime the
// Store's callers write, at least 10 minutes; a pace's Full, two horizons:
// the longest send lease and the longest window), a version ahead of
// Redis's clock, an over-long prober or reason, a count or an interval out
// of range (a lesson's spacing or floor longer than the horizon, its next
// send past two horizons, its end past a horizon and a minute), a tally that is not "n:seq:until" in range or whose owner is
// empty or over-long, a tallies hash of more than maxOwners fields. A
// script that read any writes the facts back as it read them, and drops
// the bad tallies (all of them, for an over-long hash). No expiry is set
// beyond the horizon.
const prelude = `
local kf, kr, ks, kt = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local hold = 60000
local horizon = tonumber(ARGV[1])
local atus = tonumber(ARGV[2])
local at = math.floor(atus / 1000)
local maxBurst, maxCount = 1073741824, 1048576
local maxOwner, maxOwners = 128, 4096
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
local function upto(x, n)
  local c = field(x)
  if c > n then bad = bad + 1 return 0 end
  return c
end
local function usWhen(x, last)
  if not x then return 0 end
  if digits(x, 16) then
    local t = tonumber(x)
    if t <= last then return t end
  end
  bad = bad + 1
  return 0
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
local function live(k, at)
  return redis.call('ZCOUNT', k, '(' .. int(at), int(at + horizon))
end
-- A tally's seq: a decimal of 1 to 20 digits without a leading zero (any
-- uint64), compared digit by digit: a Lua number holds only 53 bits.
local function seqOK(x)
  return #x >= 1 and #x <= 20 and string.match(x, '^%d+$') ~= nil and (#x == 1 or string.byte(x, 1) ~= 48)
end
local function seqAfter(a, b)
  if #a ~= #b then return #a > #b end
  for i = 1, #a do
    local x, y = string.byte(a, i), string.byte(b, i)
    if x ~= y then return x > y end
  end
  return false
end
-- The fields of kt to drop (lapsed, or bad), and whether to drop it whole.
local dead, deadAll = {}, false
local function clean()
  if deadAll then
    redis.call('DEL', kt)
  else
    local d = {}
    for o in pairs(dead) do d[#d + 1] = o end
    if #d > 0 then redis.call('HDEL', kt, unpack(d)) end
  end
  dead, deadAll = {}, false
end
-- tallies returns the live tallies at at (owner -> {n, seq, u}); lapsed
-- and bad ones are noted in dead.
local function tallies()
  local t = {}
  if redis.call('HLEN', kt) > maxOwners then
    bad, deadAll = bad + 1, true
    return t
  end
  local h = redis.call('HGETALL', kt)
  for i = 1, #h, 2 do
    local o, x = h[i], h[i + 1]
    local n, sq, u
    if #o >= 1 and #o <= maxOwner and #x <= 64 then n, sq, u = string.match(x, '^(%d+):(%d+):(%d+)$') end
    if n and #n <= 7 and seqOK(sq) and #u <= 16 then
      n, u = tonumber(n), tonumber(u)
      if n > maxCount or u > atus + 1000 * horizon then n = nil end
    else
      n = nil
    end
    if not n then
      bad, dead[o] = bad + 1, true
    elseif atus >= u then
      dead[o] = true
    else
      t[o] = {n = n, seq = sq, u = u}
    end
  end
  return t
end
-- sums returns the calls in flight tallies t count, and the last end of
-- one that counts any (ms).
local function sums(t)
  local n, last = 0, 0
  for _, x in pairs(t) do
    if x.n > 0 then n, last = n + x.n, math.max(last, math.ceil(x.u / 1000)) end
  end
  return n, last
end
local function inflight(f)
  return math.min(f.ls + f.ts, maxCount)
end
local function load()
  local h = redis.call('HMGET', kf, 'v', 'ds', 'du', 'np', 'r', 'p', 'pu', 'w', 'b', 'e', 'fu', 'mi', 'gr', 'ca', 'cu', 'sp', 'fl', 'nx', 'tu')
  local f = {sv = version(h[1]), ds = when(h[2], at), du = when(h[3], at), np = when(h[4], at),
    r = text(h[5], 256), p = text(h[6], 64), pu = when(h[7], at), w = when(h[8], at),
    b = upto(h[9], maxBurst), e = upto(h[10], 1000 * horizon), fu = usWhen(h[11], atus + 2000 * horizon),
    mi = upto(h[12], maxCount), gr = upto(h[13], 1000 * horizon), ca = usWhen(h[14], atus + 1000 * horizon),
    cu = when(h[15], at), sp = upto(h[16], 1000 * horizon), fl = upto(h[17], 1000 * horizon),
    nx = usWhen(h[18], atus + 2000 * horizon), tu = upto(h[19], at + horizon + hold)}
  if f.ds == 0 or at >= f.du then f.ds, f.du, f.np, f.r = 0, 0, 0, '' end
  if f.p == '' or at >= f.pu then f.p, f.pu = '', 0 end
  if at >= f.w then f.w = 0 end
  if f.e == 0 or atus >= f.fu then f.b, f.e, f.fu = 0, 0, 0 end
  if f.mi == 0 or at >= f.cu then f.mi, f.gr, f.ca, f.cu = 0, 0, 0, 0 end
  if f.sp == 0 or at >= f.tu then f.sp, f.fl, f.nx, f.tu = 0, 0, 0, 0 end
  f.n = live(kr, at)
  if f.n > maxCount then f.n, bad = maxCount, bad + 1 end -- no process holds that many leases
  f.t = tallies()
  f.ts, f.tl = sums(f.t)
  f.ls = live(ks, at)
  f.s = inflight(f)
  return f
end
local function copy(f)
  local g = {}
  for k, v in pairs(f) do g[k] = v end
  return g
end
local names = {'ds', 'du', 'np', 'r', 'p', 'pu', 'w', 'n', 'b', 'e', 'fu', 'mi', 'gr', 'ca', 'cu', 's', 'sp', 'fl', 'nx', 'tu'}
local function same(f, g)
  for _, k in ipairs(names) do
    if f[k] ~= g[k] then return false end
  end
  return true
end
local function reply(f, v, granted, slot)
  return {v, f.ds, f.du, f.np, f.pu, f.w, f.n, f.p, f.r, granted and 1 or 0, bad,
    f.b, f.e, f.fu, f.mi, f.gr, f.ca, f.cu, f.s, slot or 0, f.sp, f.fl, f.nx, f.tu}
end
local function unchanged(f, granted, slot)
  if f.sv == 0 then return reply(f, clock(), granted, slot) end
  return reply(f, f.sv, granted, slot)
end
local function keep(at, last)
  for _, k in ipairs({kr, ks}) do
    local top = redis.call('ZREVRANGEBYSCORE', k, int(at + horizon), '-inf', 'WITHSCORES', 'LIMIT', 0, 1)
    if top[2] then last = math.max(last, tonumber(top[2])) end
  end
  local ttl = int(math.min(math.max(last - at, 0), horizon) + hold)
  redis.call('PEXPIRE', kf, ttl)
  for _, k in ipairs({kr, ks, kt}) do
    if redis.call('EXISTS', k) == 1 then redis.call('PEXPIRE', k, ttl) end
  end
end
local function lastOf(g)
  return math.max(g.du, g.pu, g.w, math.ceil(g.fu / 1000), g.cu, g.tl, g.tu)
end
-- finish stores g, the facts after the operation (f before it), if they
-- changed or bad data was read, and answers. touched says the operation
-- wrote a tally: the keys' expiry is set even if no fact changed.
local function finish(f, g, at, name, chan, announce, granted, slot, touched)
  if same(f, g) and bad == 0 then
    if touched then
      clean()
      keep(at, lastOf(g))
    end
    return unchanged(f, granted, slot)
  end
  clean()
  local v = math.max(f.sv + 1, clock() + 1)
  redis.call('HSET', kf, 'v', int(v), 'ds', int(g.ds), 'du', int(g.du), 'np', int(g.np),
    'r', g.r, 'p', g.p, 'pu', int(g.pu), 'w', int(g.w), 'b', int(g.b), 'e', int(g.e), 'fu', int(g.fu),
    'mi', int(g.mi), 'gr', int(g.gr), 'ca', int(g.ca), 'cu', int(g.cu),
    'sp', int(g.sp), 'fl', int(g.fl), 'nx', int(g.nx), 'tu', int(g.tu))
  keep(at, lastOf(g))
  if announce then
    redis.call('PUBLISH', chan, table.concat({int(v), int(g.ds), int(g.du), int(g.np), int(g.pu),
      int(g.w), int(g.n), int(g.b), int(g.e), int(g.fu), int(g.mi), int(g.gr), int(g.ca), int(g.cu),
      int(g.s), int(g.sp), int(g.fl), int(g.nx), int(g.tu), int(#g.p), int(#name)}, ' ') .. '\n' .. g.p .. name .. g.r)
  end
  return reply(g, v, granted, slot)
end
-- climb is store.Climb: the spacing sp (µs) after one more send, never
-- below fl; in whole microseconds, rounded down, exactly (the products
-- stay within 2^53).
local function climb(sp, fl)
  if sp > 3600000000 then return math.max(sp, fl) end
  local a, b = sp * 2000000, 2000000 + sp
  local q = math.floor(a / b)
  if q * b > a then q = q - 1 elseif (q + 1) * b <= a then q = q + 1 end
  return math.max(q, fl)
end
local function sweep(k, at)
  redis.call('ZREMRANGEBYSCORE', k, '-inf', int(at))
  bad = bad + redis.call('ZREMRANGEBYSCORE', k, '(' .. int(at + horizon), '+inf')
end
`

// loadScript: ARGV horizon, at (µs).
var loadScript = redis.NewScript(prelude + `
local f = load()
return unchanged(f, false)
`)

// reportScript: ARGV horizon, at (µs), evidence ("down", "up" or ""), reason,
// down-for (ms), next probe, wait until, prober, burst, every (µs), full
// (µs), cut ("1" or ""), grow (µs), cap until, owner, unleased, seq, tally
// until (µs), spacing (µs), floor (µs), sender, name, channel. The
// sender's send lease ends first, if it holds one; then the owner's tally is
// set, if its seq is above the stored one's (or none is stored);
// then a cut limits the key's calls in flight to those counted (at least
// 1), or a tally that rose on a limited key raises the limit to them if it
// is lower; a spacing or floor teaches the key (memstore's rules).
var reportScript = redis.NewScript(prelude + `
local ev, reason, downFor = ARGV[3], ARGV[4], tonumber(ARGV[5])
local np, wait, prober = tonumber(ARGV[6]), tonumber(ARGV[7]), ARGV[8]
local burst, every, full = tonumber(ARGV[9]), tonumber(ARGV[10]), tonumber(ARGV[11])
local cut, grow, capUntil = ARGV[12] == '1', tonumber(ARGV[13]), tonumber(ARGV[14])
local owner, unleased, seq, tallyUntil = ARGV[15], tonumber(ARGV[16]), ARGV[17], tonumber(ARGV[18])
local spacing, floor, sender = tonumber(ARGV[19]), tonumber(ARGV[20]), ARGV[21]
local f = load()
local g = copy(f)
if sender ~= '' and redis.call('ZREM', ks, sender) == 1 then
  g.ls = live(ks, at)
  g.s = inflight(g)
end
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
if every > 0 then
  if f.e == 0 then
    g.b, g.e, g.fu = burst, every, full
  else
    g.fu, g.e, g.b = math.max(g.fu, full), math.max(g.e, every), math.min(g.b, burst)
  end
end
local touched, rose = false, false
local old = f.t[owner]
if owner ~= '' and (not old or seqAfter(seq, old.seq)) then
  rose = unleased > (old and old.n or 0)
  local x = {n = unleased, seq = seq, u = tallyUntil}
  if unleased <= 0 or atus >= tallyUntil then
    -- Ended; its seq is kept a minute, so that a late count cannot
    -- bring it back.
    x = {n = 0, seq = seq, u = atus + 1000 * hold}
  end
  clean()
  redis.call('HSET', kt, owner, int(x.n) .. ':' .. seq .. ':' .. int(x.u))
  f.t[owner] = x
  g.ts, g.tl = sums(f.t)
  g.s, touched = inflight(g), true
end
if cut then
  g.mi, g.gr, g.ca, g.cu = math.max(g.s, 1), grow, atus, math.max(g.cu, capUntil)
elseif rose and g.mi > 0 and g.s > g.mi then
  g.mi = g.s
end
if spacing > 0 or floor > 0 then
  local sp = math.max(spacing, floor)
  if g.sp == 0 then
    g.sp, g.fl, g.nx = sp, floor, atus + sp
  else
    g.sp, g.fl, g.nx = math.max(g.sp, sp), math.max(g.fl, floor), math.max(g.nx, atus + sp)
  end
  g.sp = math.max(g.sp, g.fl)
  g.nx = math.min(g.nx, atus + 2000 * horizon)
  g.tu = math.max(g.tu, at + hold)
end
return finish(f, g, at, ARGV[22], ARGV[23], true, false, 0, touched)
`)

// takeProbeScript: ARGV horizon, at (µs), holder, until, name, channel. A lease
// or a next probe further off than two of the caller's leases is none
// this fleet wrote: it is read as none (the next probe as due).
var takeProbeScript = redis.NewScript(prelude + `
local holder, untl = ARGV[3], tonumber(ARGV[4])
local f = load()
local far = untl + (untl - at)
if f.pu > far then f.p, f.pu, bad = '', 0, bad + 1 end
if f.np > far then f.np, bad = at, bad + 1 end
if f.ds == 0 or f.p ~= '' or f.np > at then return reply(f, math.max(f.sv, clock()), false) end
local g = copy(f)
g.p, g.pu = holder, untl
g.du = math.max(g.du, untl)
return finish(f, g, at, ARGV[5], ARGV[6], true, true)
`)

// takeRetryScript: ARGV horizon, at (µs), holder, until, limit, name, channel.
// Changes to retry leases alone are not announced; leases beyond the
// horizon are none this fleet took, and are removed.
var takeRetryScript = redis.NewScript(prelude + `
local holder, untl, limit = ARGV[3], tonumber(ARGV[4]), tonumber(ARGV[5])
sweep(kr, at)
local f = load()
if f.n >= limit then return unchanged(f, false) end
redis.call('ZADD', kr, int(untl), holder)
local g = copy(f)
g.n = live(kr, at)
keep(at, lastOf(g))
return finish(f, g, at, ARGV[6], ARGV[7], false, true)
`)

// takeSendScript: ARGV horizon, at (µs), holder, until (µs), limit, name,
// channel. The slot is reckoned in microseconds, the lease and every other
// fact in milliseconds. A grant is not announced (a change to Full and a
// new send lease: calls elsewhere wait for no such change); a Full past
// two horizons is none this fleet would write, so a grant moves it no
// further. Send leases beyond the horizon are removed, like retry leases.
// The limit counts send leases and tallies; a holder that holds a lease
// already keeps one, until the later end.
var takeSendScript = redis.NewScript(prelude + `
local holder, untlus, limit = ARGV[3], tonumber(ARGV[4]), tonumber(ARGV[5])
local untl = math.floor(untlus / 1000)
sweep(ks, at)
local f = load()
local slot = atus
if f.e > 0 then slot = math.max(atus, f.fu - (f.b - 1) * f.e) end
if f.sp > 0 then slot = math.max(slot, f.nx) end
if slot > untlus then return unchanged(f, false, slot) end
if limit > 0 and f.s >= limit then return unchanged(f, false, 0) end
local g = copy(f)
if f.e > 0 then g.fu = math.min(math.max(g.fu, slot) + g.e, atus + 2000 * horizon) end
if f.sp > 0 then
  g.nx = math.min(slot + g.sp, atus + 2000 * horizon)
  g.sp = climb(g.sp, g.fl)
  g.tu = math.min(math.max(g.tu, math.ceil(slot / 1000) + hold), at + horizon + hold)
end
if limit > 0 then
  local held = tonumber(redis.call('ZSCORE', ks, holder) or '0') or 0
  redis.call('ZADD', ks, int(math.max(held, untl)), holder)
  g.ls = live(ks, at)
  g.s = inflight(g)
end
keep(at, lastOf(g))
return finish(f, g, at, ARGV[6], ARGV[7], false, true, slot)
`)

// releaseScript: ARGV horizon, now (µs), holder, name, channel. Ending a probe
// lease or a send lease is announced (calls elsewhere may wait for a send
// lease to end), ending a retry lease alone is not. Tallies are not
// leases: Release leaves them (a process ends its own by a count of 0).
var releaseScript = redis.NewScript(prelude + `
local holder = ARGV[3]
local f = load()
local g = copy(f)
local announce = false
if f.p ~= '' and f.p == holder then g.p, g.pu, announce = '', 0, true end
if redis.call('ZREM', kr, holder) == 1 then g.n = live(kr, at) end
if redis.call('ZREM', ks, holder) == 1 then
  g.ls = live(ks, at)
  g.s, announce = inflight(g), true
end
return finish(f, g, at, ARGV[4], ARGV[5], announce, false)
`)
