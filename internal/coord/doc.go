// Package coord is llmretry's coordination engine: what a Transport made by
// llmretry.NewCoordinated does behind the user's coordination.Config. It
// keeps, per provider key (a host, a hash of the credential and the route,
// keys.go), a local view of the facts the key's store.Store holds
// (coordinator.go), the calls held on the key and the gate each attempt
// goes through (gate.go), what a call with several routes asks of them
// (routes.go: going around a key that is down, waiting on every route's
// key at once), the pace a spent rate limit sets (pace.go), what its 429s
// teach where the published limit is wrong (taught.go), the count of
// calls inside RoundTrip (inflight.go) and the records of holds it tells
// Config.OnHold (hold.go); the in-process store it keeps and falls back on
// is internal/memstore.
//
// The root package is its only user. The seam between them (seam.go) is
// one set of types, defined here and used by the root's core as they are:
// each call's Gatekeeper (this package's *Call; a Transport that does not
// coordinate gives its calls a no-op of the root's own), asked with an
// Admission, told an Outcome,
// answering a Verdict. The engine speaks the user's types of package
// coordination directly: it takes a coordination.Config (and applies its
// defaults), tells coordination.Hold records and refuses with a
// *coordination.HeldError. It imports the standard library, packages
// coordination and store, and small internal packages it shares with the
// root's core (credential, wire, clock, memstore), never the root: what
// it needs of the core comes in Core and Policy.
//
// Its behaviour is tested next to it: in package coord (gate_test.go,
// coordinator_test.go, …) through its own API, and in package coord_test
// (the *_e2e_test.go files) through Transports made by
// llmretry.NewCoordinated, observed by public means only (a Store passed in
// the Config, OnHold and OnAttempt records, the fake providers' counts).
// See docs/coordination.md for what it promises and docs/decisions.md
// (26, 39, 62, 79, 84, and issue 21's rows) for why it is built so.
package coord
