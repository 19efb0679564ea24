// Package store is the contract between llmretry's coordinated Transports
// and the stores that keep what their calls share, the way
// database/sql/driver serves the authors of database drivers: it is for
// whoever writes a store or tests one. A user of llmretry names none of it
// but the Store interface, if that: coordination.Config.Store left nil
// gives each Transport a store of its own in memory,
// coordination.NewMemoryStore makes one that a process's Transports share,
// and redisstore.New one that a fleet of processes shares. The package
// depends on the standard library alone.
//
// # What a store is for
//
// A Transport made by llmretry.NewCoordinated holds its calls to a provider
// key (a host and the credential a request carries) while the key is
// down, while the provider's requested wait lasts, while a spent rate
// limit paces the key or its calls in flight are at the limit a 429
// taught; it lets one call at a time probe a key that is down, and counts
// the retries that calls send on their own schedules against a budget.
// The facts behind those choices (Facts) live in a Store. What waits on
// them — the held calls, their timers, the choice of the next probe —
// stays in the process that holds the calls, which keeps a view of each
// key fed by the store's answers and notices: a call to a key with no
// live fact makes no store call, and a process writes to the store only
// when a fact changes (and, while a key is paced or limited, for each
// send). Processes that share a store coordinate as one: one probe
// per key per probe interval for all of them, one server wait, one pace,
// one limit on calls in flight, one retry budget.
//
// # The lifetimes of facts
//
// Every fact lapses at a time its writer chose, and a lapsed fact reads as
// its zero value: the down state at DownUntil (each failure that confirms
// it puts DownUntil Report.DownFor ahead, three probe intervals as
// llmretry writes it, and a granted probe lease keeps the key down at
// least until the lease ends), the probe lease at ProbeUntil (one probe
// interval), the server wait at WaitUntil, a retry or send lease at its
// Lease.Until, the pace at Full, the limit on calls in flight at CapUntil,
// what 429s taught of the key's rate at TaughtUntil,
// a process's tally of its calls in flight without a send lease at its
// Report.TallyUntil. A store judges lapse by the times its callers pass
// (At, Until, now), so processes that share a store need clocks that
// agree to within a small part of a probe interval. A store forgets a key
// once none of its facts is live, and keeps the key's Version at least
// VersionHold after its last change, so that a late notice can be told
// from a new one.
//
// # What must be atomic
//
// Each method is one atomic step on one key, with respect to every other
// method on that key, from this process or any other that shares the
// store: Report reads a key's facts and writes what follows from them and
// the report; of any number of concurrent TakeProbe calls for a due probe
// one is granted; concurrent TakeSend calls take distinct slots of a
// paced key, and no more send leases than the limit. Nothing spans two
// keys. Store's doc states each method's rules, and storetest checks them.
//
// # Notices
//
// Watch is how a change made through one process reaches the views of the
// others. Every change a method makes must be told (a Report's, a granted
// probe lease, a lease's end, a changed tally) but for two: changes to
// retry leases alone, and what TakeSend changes (a paced key's Full, a new
// send lease). The end of a send lease must be told, since calls
// elsewhere may wait for it. A notice
// may be late, repeated, out of order (Version orders them) or lost; a
// store that knows it may have lost some (its subscription was made
// again, say) calls the watcher once with an empty key and the zero
// Facts, and each process then reads every key it uses again, on that
// key's next call. A process re-reads each key it holds calls for at
// least once a probe interval, so a lost notice delays its calls by at
// most that.
//
// # When a store fails
//
// A store method's error never reaches a caller: the process goes on with
// an in-process store of its own, from its last view of the key, for one
// probe interval, for that key alone, or for every key if the error wraps
// ErrUnreachable (the store as a whole does not answer), and then tries
// the store again. At the key's first success there, the process ends the
// store's leases that ended meanwhile (Release, late) and, if the key is
// limited or it had told one, tells its count of calls in flight without
// a send lease again. Methods should bound their own time (a shared store's
// calls need short timeouts) and honour their context. A process trusts
// what a store tells it no further than it would have written it: a lease
// or a next probe too far ahead, a down state past its lapse rule, a wait
// longer than any its calls would honour are read as the most it would
// have written, or as nothing.
//
// # Testing a store
//
// Package github.com/llmretry/llmretry/store/storetest checks a store
// against this contract with the testing package alone. Give it several
// clients of one backend, as the processes of a fleet would be:
//
//	func TestContract(t *testing.T) {
//		storetest.Run(t, func(t *testing.T) []store.Store {
//			return []store.Store{newStore(t), newStore(t)}
//		})
//	}
//
// The in-process store (coordination.NewMemoryStore) and redisstore (against
// a real redis-server, with several clients as the fleet) both pass it.
//
// # Optional interfaces
//
// A store may do more than Store asks, as a database/sql/driver driver
// may: a coordinated Transport checks for the interface and uses it when
// it is there, and a store without it works as before. PrefillRefusals
// keeps which provider keys' models refused a prefill, so that every
// process that shares the store learns from the first refusal; storetest
// checks it when a store implements it.
//
// # The reference: redisstore
//
// Package github.com/llmretry/llmretry/redisstore is the shared store to
// read before writing one. Each method that reads or writes a key's facts
// is one Lua script on the key's Redis keys, which share a hash tag and so
// one Cluster slot: that makes it atomic. It names a key by its host and a
// keyed hash of the credential (HMAC-SHA-256 with a secret every process
// shares), publishes changes on one channel to which each Store holds one
// subscription, and tells its watchers that notices may have been lost
// when it subscribes again. It wraps ErrUnreachable only when the server
// as a whole does not answer or refuses every call, bounds every call by
// a timeout, takes versions from the server's clock (a restart that lost
// the data does not leave processes trusting their older views), and
// reads what no process of the fleet would have written as the most one
// would have, or as nothing.
package store
