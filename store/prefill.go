package store

import (
	"context"
	"time"
)

// PrefillHold is the longest a store keeps that a provider key's model
// refused a prefill (see PrefillRefusals): a model's support for one does
// not change within a day, and every fact has a lifetime. It is what
// llmretry writes; a record read back that lasts longer is read as
// lasting this long from now.
const PrefillHold = 24 * time.Hour

// PrefillRefusals is an optional interface a Store may also implement, as
// database/sql/driver's optional interfaces are: it keeps, for every
// process that shares the store, which provider keys' models refused a
// prefill (a continuation of a cut stream that sends the delivered text
// as a last assistant turn: see llmretry's Policy.ContinueStreams), so
// that none of them sends that key and model one again. A Store without
// it works as before: each process remembers the refusals it met itself.
//
// A coordinated Transport calls it only to continue a stream that was
// cut, never on a call that succeeds. Its errors never reach a caller:
// the process goes on with what it remembers itself.
//
// # Contract
//
// Both methods are safe for concurrent use. key is a name Store.Key made
// (the credential already hashed); model is the model the request names
// (its body's "model", or the model in a Gemini URL): any string, which a
// store that makes names of it must bound (hash it, say). The store must
// keep nothing else of the request.
//
//   - RefusePrefill records that model, on key, refused a prefill at at;
//     the record lapses at at+ttl. A ttl above PrefillHold is kept as
//     PrefillHold; a ttl of zero or less records nothing. A new record
//     replaces the previous one.
//   - PrefillRefused returns when the record of model on key lapses, if
//     it is live at now; the zero time if there is none. A record that
//     would lapse more than PrefillHold after now (written by no process
//     of the fleet) reads as lapsing PrefillHold after now, and a record
//     the store cannot read reads as none.
//
// Records are facts like the others: they may be lost (a restart, an
// eviction), which costs at most one more refused prefill per process.
// storetest.Run checks both methods of a Store that implements them.
type PrefillRefusals interface {
	// RefusePrefill records that model, on the provider key named key,
	// refused a prefill at at, until at+ttl.
	RefusePrefill(ctx context.Context, key, model string, at time.Time, ttl time.Duration) error
	// PrefillRefused returns when the record that model, on key, refused
	// a prefill lapses, if it is live at now; else the zero time.
	PrefillRefused(ctx context.Context, key, model string, now time.Time) (until time.Time, err error)
}
