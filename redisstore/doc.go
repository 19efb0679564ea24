// Package redisstore is a store.Store on Redis: every process of a
// fleet whose coordinated Transports use it rides through a provider's
// outage as one process would: one probe per provider key per probe
// interval for the whole fleet, server waits (Retry-After) shared, the
// retry budget counted fleet-wide, and held calls in every process
// released within milliseconds of the probe's answer.
//
//	client := redis.NewClient(&redis.Options{Addr: "redis:6379", ContextTimeoutEnabled: true}) // bounds Close
//	st, err := redisstore.New(client, redisstore.Options{Secret: secret}) // the same secret on every process
//	if err != nil { ... }
//	defer st.Close()
//	rt, err := llmretry.NewCoordinated(nil, policy, coordination.Config{Store: st})
//
// # What is shared
//
// The facts of each provider key live in Redis, each with its own
// lifetime: whether the key is down (since when, until when, why), the
// next probe's time, the probe lease, the server wait's end, the live
// retry leases, the pace a spent rate limit sets (burst, interval, when
// the bucket is full again: each send takes the next slot), the limit on
// calls in flight learnt from a 429, and the calls in flight counted
// against it: the live send leases, and each process's tally of its calls
// in flight without one (sent before the limit was learnt). Each
// operation of the coordinator is one Lua script (EVALSHA) on the key's
// four Redis keys, PREFIX{name}:f (a hash of the facts),
// PREFIX{name}:retries and PREFIX{name}:sends (sorted sets of lease
// holders by lease end) and PREFIX{name}:tallies (a hash of process to
// "n:seq:until"), which share a hash tag and so one Cluster slot; a
// change is published on PREFIX + "changes", to which each Store holds
// one subscription. What waits stays in each process: held
// calls, their timers and the choice of the next probe among them. A call
// to a key with no live fact makes no Redis call: each process keeps a view
// of each key, fed by its own operations' answers and by the channel; held
// calls re-check their key once a probe interval, and when the
// subscription is made again (what was published meanwhile is lost) each
// key is read again on its next call.
//
// The Store also keeps which provider keys' models refused a prefill
// (store.PrefillRefusals, for llmretry's Policy.ContinueStreams): one
// string per refusal, PREFIX{name}:noprefill:HASH (HASH a SHA-256 of the
// model name), holding when it lapses and expiring then, written when a
// route refuses a prefill and read only when a cut stream is continued.
//
// # Credentials
//
// A key's name is its host, and for a request with a credential "#" and
// the first 8 bytes of HMAC-SHA-256(Options.Secret, credential) in hex:
// every process with the same Secret names a key alike, and neither Redis
// nor a dump of it holds anything from which the credential could be
// recovered (without the Secret, not even a guess can be tested). Nothing
// else of a request reaches Redis but the failure's kind ("502 Bad
// Gateway") and, for a refused prefill, a hash of the model's name.
//
// # When Redis fails
//
// Every Redis call is bounded by Options.Timeout (250 ms by default),
// whether or not the client honours its context's deadline. A call that
// fails or is too slow is an error to the coordinator, which then goes on
// with an in-process store of its own for one probe interval (starting
// from what it knew of the key) and tries Redis again after it: so an
// unreachable, slow or dying Redis fails no call, holds none past its
// deadline and reserve, and costs a call at most one Timeout per probe
// interval; when Redis answers again, the processes rejoin. The Store logs
// to Options.Logger when its calls begin to fail and when they succeed
// again, once per change. Versions come from Redis's clock, so a Redis
// that lost its data (a restart without persistence) does not leave
// processes believing their older view.
//
// # A hostile Redis
//
// Nothing read from Redis can crash or wedge a process: notices and
// answers are bounds-checked (and fuzzed), a malformed one is dropped and
// counted (Store.Malformed); a fact no process of the fleet would write (a
// lease, a down state, a wait, a pace, a limit on calls in flight or a
// tally longer than the fleet's lifetimes, a count past its bound, a tally
// that is not "n:seq:until" or whose owner is over 128 bytes, a tallies
// hash of more than 4,096 processes, a refused prefill's lapse more than
// store.PrefillHold ahead or not a time) is read as the most the process
// would have written, or as nothing, and the next script that writes the
// key drops it; a failure of
// one key (its data of the wrong type, its Cluster slot's master down)
// sends that key alone to in-process coordination; a subscription that
// goes silent is found by a PING that must be answered within Timeout.
// What a writer to Redis can still do, and what the Secret protects: see
// docs/redis.md.
//
// # Cost
//
// For one provider key, with P processes holding calls for it: a
// process's first failure is one script; each probe interval while the
// key is down costs one script per process (each process's candidate asks
// for the lease, one gets it) and one for the probe's answer, and two
// messages to each subscriber (lease taken, answer); the recovery is one
// script and one message per subscriber. Retries on calls' own schedules
// while a key is up (a 429 without a wait) cost two scripts each (take
// and end a retry lease). While a key is paced or its calls in flight
// are limited, each send costs one script (its slot, or its send lease),
// and a send lease's end another and one message to each subscriber.
// While a limit is live, each attempt sent without a lease (before the
// limit was learnt) costs one script when it ends (its process's new
// tally) and a message when the count changes; every script reads the
// key's tallies, one short field per process that has such attempts. A
// key's Redis memory is a hash of fifteen short fields (and sorted sets
// while retry or send leases live, and a hash of tallies while one
// lives), gone a minute after its last live fact.
package redisstore
