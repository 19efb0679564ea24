package redisstore

import (
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"
)

// DefaultPrefix begins every Redis key and channel when Options.Prefix is
// empty.
const DefaultPrefix = "llmretry:"

// DefaultTimeout bounds each Redis call when Options.Timeout is zero: far
// above a healthy Redis's round trip (well under a millisecond on a LAN, a
// few across zones), small beside a probe interval and a turn's deadline.
// A call pays it at most once per probe interval: the first failure turns
// its process to in-process coordination for that long.
const DefaultTimeout = 250 * time.Millisecond

// MinSecretLen is the shortest Options.Secret New accepts.
const MinSecretLen = 16

// Options configures a Store. The zero Options is not enough: Secret is
// required. An Options is a value; New keeps its own copy (Secret
// included).
type Options struct {
	// Prefix begins every Redis key and channel the Store uses, so that
	// several fleets (or other data) can share a Redis. Empty means
	// DefaultPrefix ("llmretry:"). It must not contain '{' or '}': the
	// Store puts each provider key's name in braces, a Redis Cluster hash
	// tag.
	Prefix string
	// Secret is the key of the HMAC-SHA-256 that turns a request's
	// credential into a key name (see Store.Key). Every process of a fleet
	// must use the same Secret, or their calls to one provider key are not
	// coordinated; keep it out of Redis. At least MinSecretLen (16) bytes;
	// 32 random bytes is a good Secret.
	Secret []byte
	// Timeout bounds every Redis call the Store makes (a script, or the
	// subscription's subscribes and pings: a subscription silent for
	// 4 × Timeout is pinged, and made again if the PING is not answered
	// within Timeout). go-redis's dials and handshakes honour it only with
	// the client's ContextTimeoutEnabled set; without it they last the
	// client's own DialTimeout and ReadTimeout, and so may Close (see
	// Store.Close). Zero means DefaultTimeout (250 ms).
	Timeout time.Duration
	// Logger, if not nil, is told when Redis calls start failing and when
	// they succeed again: once per change, never per call. Records carry
	// the error, never a credential or a key name.
	Logger *slog.Logger
}

// resolved returns o with its defaults filled in, or an error naming the
// first field that cannot be used.
func (o Options) resolved() (Options, error) {
	var errs []error
	if strings.ContainsAny(o.Prefix, "{}") {
		errs = append(errs, fmt.Errorf("Options.Prefix %q contains a brace (the Store's hash tags need them)", o.Prefix))
	}
	if len(o.Secret) < MinSecretLen {
		errs = append(errs, fmt.Errorf("Options.Secret has %d bytes, needs at least %d (the same on every process of the fleet)", len(o.Secret), MinSecretLen))
	}
	if o.Timeout < 0 {
		errs = append(errs, fmt.Errorf("Options.Timeout is negative (%v)", o.Timeout))
	}
	if err := errors.Join(errs...); err != nil {
		return o, err
	}
	if o.Prefix == "" {
		o.Prefix = DefaultPrefix
	}
	if o.Timeout == 0 {
		o.Timeout = DefaultTimeout
	}
	o.Secret = append([]byte(nil), o.Secret...)
	return o, nil
}
