// Package coord is llmretry's coordination engine: what a Transport made by
// llmretry.NewCoordinated does behind the user's Coordination. It keeps,
// per provider key (a host, a hash of the credential and the route,
// keys.go), a local view of the facts the key's store.Store holds
// (coordinator.go), the calls held on the key and the gate each attempt
// goes through (gate.go), what a call with several routes asks of them
// (routes.go: going around a key that is down, waiting on every route's
// key at once), the pace a spent rate limit sets (pace.go), the count of
// calls inside RoundTrip (inflight.go), the records of holds (hold.go) and
// the in-process store (memstore.go).
//
// The root package is its only user. It imports the standard library,
// package store and small internal packages it shares with the root's core
// (credential, ratehdr, clock), never the root: what it needs of the core
// comes in Config and Policy, and it answers in its own types (seam.go),
// which the root's adapter (coordinate.go) converts to the user's Hold and
// DownError. See docs/coordination.md for what it promises and
// docs/decisions.md (26, 39, 62, 79, 84, and issue 21's rows) for why it is built so.
package coord
