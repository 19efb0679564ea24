package redisstore

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"strconv"
	"strings"
	"time"

	"github.com/llmretry/llmretry/store"
	"github.com/redis/go-redis/v9"
)

// This file is the Store's store.PrefillRefusals: which provider keys'
// models refused a prefill, for every process of the fleet. Each refusal
// is one Redis string, PREFIX{name}:noprefill:HASH (HASH the first 8
// bytes of SHA-256 of the model, in hex: a model is any string, and a
// name must be bounded), holding when the refusal lapses in Unix
// milliseconds, and expiring then. It is written only when a route
// refuses a prefill, read only when a cut stream is continued, and
// announces nothing: a process asks when it needs to know.

var _ store.PrefillRefusals = (*Store)(nil)

// refusalKey returns the Redis key of the refusal of model on the
// provider key name: under name's hash tag, so that it lives on its
// Cluster slot.
func (s *Store) refusalKey(name, model string) string {
	sum := sha256.Sum256([]byte(model))
	return s.opts.Prefix + "{" + name + "}:noprefill:" + hex.EncodeToString(sum[:nameHashLen])
}

// RefusePrefill records that model, on the provider key named key,
// refused a prefill at at, until at+ttl (at most store.PrefillHold;
// nothing if ttl is not positive): one SET with an expiry, within
// Options.Timeout.
func (s *Store) RefusePrefill(ctx context.Context, key, model string, at time.Time, ttl time.Duration) error {
	if ttl <= 0 {
		return nil
	}
	ttl = min(ttl, store.PrefillHold)
	k, until := s.refusalKey(key, model), ms(at.Add(ttl))
	_, err := s.do(ctx, "refuse prefill", func(ctx context.Context) (any, error) {
		return nil, s.client.Set(ctx, k, until, ttl).Err()
	})
	return err
}

// PrefillRefused returns when the refusal of model on the provider key
// named key lapses, if it is live at now; else the zero time. What Redis
// holds is read as no Store of the fleet would write it no further: a
// lapse more than store.PrefillHold after now as that, a value that is
// not a time (or not a string) as no refusal, counted in Malformed.
func (s *Store) PrefillRefused(ctx context.Context, key, model string, now time.Time) (time.Time, error) {
	k := s.refusalKey(key, model)
	v, err := s.do(ctx, "prefill refused", func(ctx context.Context) (any, error) {
		v, err := s.client.Get(ctx, k).Result()
		var re redis.Error
		switch {
		case errors.Is(err, redis.Nil):
			return nil, nil // no refusal
		case errors.As(err, &re) && strings.HasPrefix(re.Error(), "WRONGTYPE"):
			return nil, malformedError{err} // not a string: no Store wrote it
		}
		return v, err
	})
	if errors.As(err, new(malformedError)) {
		s.dropped(1, "a prefill refusal")
		return time.Time{}, nil
	}
	if err != nil {
		return time.Time{}, err
	}
	raw, ok := v.(string)
	if !ok {
		return time.Time{}, nil
	}
	n, perr := strconv.ParseInt(raw, 10, 64)
	if perr != nil || n <= 0 || n > maxMS {
		s.dropped(1, "a prefill refusal")
		return time.Time{}, nil
	}
	s.dropped(0, "a prefill refusal")
	until := fromMS(n)
	if most := now.Add(store.PrefillHold); until.After(most) {
		// Written by no process of the fleet (each writes at most
		// PrefillHold ahead, with that lifetime): read as lapsing then,
		// and given that lifetime, so that it lapses whatever it says.
		until = most
		_, _ = s.do(ctx, "prefill refused", func(ctx context.Context) (any, error) {
			return s.client.PExpireAt(ctx, k, until).Result()
		})
	}
	if !until.After(now) {
		return time.Time{}, nil
	}
	return until, nil
}
