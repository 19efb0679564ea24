package redisstore_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/llmretry/llmretry"
	"github.com/llmretry/llmretry/coordination"
	"github.com/llmretry/llmretry/redisstore"
	"github.com/llmretry/llmretry/store"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// refusalKey is the Redis key of the refusal of model on the provider key
// name, under prefix p, as docs/redis.md states it.
func refusalKey(p, name, model string) string {
	sum := sha256.Sum256([]byte(model))
	return p + "{" + name + "}:noprefill:" + hex.EncodeToString(sum[:8])
}

// A refusal of a prefill is one Redis string under the provider key's hash
// tag, PREFIX{name}:noprefill:HASH, holding its lapse in Unix ms and
// expiring with it; its name carries no credential and no model.
func TestPrefillRefusalKey(t *testing.T) {
	srv := startRedis(t)
	p := prefix(t)
	client := newClient(t, srv.Addr)
	st := newStore(t, client, redisstore.Options{Prefix: p, Secret: []byte("0123456789abcdef-secret"), Timeout: roomyTimeout})
	ctx, now := context.Background(), time.Now().Truncate(time.Millisecond)
	name := st.Key("api.anthropic.com", []byte("x-api-key\x00sk-ant-SECRET\x00"))
	require.NoError(t, st.RefusePrefill(ctx, name, "claude-opus-4-6", now, store.PrefillHold))

	keys, err := client.Keys(ctx, p+"*").Result()
	require.NoError(t, err)
	want := refusalKey(p, name, "claude-opus-4-6")
	assert.Equal(t, []string{want}, keys)
	assert.NotContains(t, want, "SECRET")
	assert.NotContains(t, want, "claude")
	v, err := client.Get(ctx, want).Result()
	require.NoError(t, err)
	assert.Equal(t, strconv.FormatInt(now.Add(store.PrefillHold).UnixMilli(), 10), v)
	ttl, err := client.PTTL(ctx, want).Result()
	require.NoError(t, err)
	assert.Greater(t, ttl, store.PrefillHold-time.Minute)
	assert.LessOrEqual(t, ttl, store.PrefillHold)
}

// What a writer to Redis puts in a refusal's key is trusted no further
// than a Store would have written it: a lapse too far ahead reads as
// PrefillHold from now, and the key, written without a TTL, is given
// that lifetime; anything that is not a time, or not a string, reads as
// no refusal, counted in Malformed, and fails nothing.
func TestPrefillRefusalForged(t *testing.T) {
	srv := startRedis(t)
	p := prefix(t)
	attacker := newClient(t, srv.Addr)
	st := newStore(t, newClient(t, srv.Addr), redisstore.Options{Prefix: p, Timeout: roomyTimeout})
	ctx, now := context.Background(), time.Now().Truncate(time.Millisecond)
	name := st.Key("api.anthropic.com", []byte("x-api-key\x00sk-ant-1\x00"))
	k := refusalKey(p, name, "m")
	ms := func(d time.Duration) string { return strconv.FormatInt(now.Add(d).UnixMilli(), 10) }
	for _, tc := range []struct {
		name      string
		value     string // "": a hash instead of a string
		want      time.Time
		malformed bool
	}{
		{"a lapse 100 days ahead", ms(100 * 24 * time.Hour), now.Add(store.PrefillHold), false},
		{"a lapse an hour ahead", ms(time.Hour), now.Add(time.Hour), false},
		{"a lapse past", ms(-time.Second), time.Time{}, false},
		{"not a number", "soon", time.Time{}, true},
		{"blank", " ", time.Time{}, true},
		{"negative", "-5", time.Time{}, true},
		{"past int64", "99999999999999999999", time.Time{}, true},
		{"past the largest time", "999999999999999999", time.Time{}, true},
		{"a hash, not a string", "", time.Time{}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.NoError(t, attacker.Del(ctx, k).Err())
			if tc.value == "" {
				require.NoError(t, attacker.HSet(ctx, k, "until", ms(time.Hour)).Err())
			} else {
				require.NoError(t, attacker.Set(ctx, k, tc.value, 0).Err())
			}
			before := st.Malformed()
			until, err := st.PrefillRefused(ctx, name, "m", now)
			require.NoError(t, err, "forged data fails nothing")
			assert.True(t, tc.want.Equal(until), "until %v, want %v", until, tc.want)
			if tc.malformed {
				assert.Equal(t, before+1, st.Malformed())
			} else {
				assert.Equal(t, before, st.Malformed())
			}
			if until.Equal(now.Add(store.PrefillHold)) {
				// Clamped, and written without a TTL: the lifetime it is
				// read with is given, so that it lapses whatever it says.
				ttl, err := attacker.PTTL(ctx, k).Result()
				require.NoError(t, err)
				assert.Greater(t, ttl, time.Duration(0), "given a lifetime when read (PTTL %v)", ttl)
				assert.LessOrEqual(t, ttl, store.PrefillHold)
			}
		})
	}
}

// A Redis that never answers: both calls fail within the Store's Timeout,
// wrapping store.ErrUnreachable (the coordinator then remembers alone),
// and a closed Store's fail at once.
func TestPrefillRefusalRedisFails(t *testing.T) {
	client := redis.NewClient(&redis.Options{Addr: blackhole(t), ContextTimeoutEnabled: true, MaxRetries: -1})
	t.Cleanup(func() { _ = client.Close() })
	const timeout = 100 * time.Millisecond
	st := newStore(t, client, redisstore.Options{Timeout: timeout})
	ctx, now := context.Background(), time.Now()
	start := time.Now()
	err := st.RefusePrefill(ctx, "api.example.com", "m", now, time.Hour)
	assert.ErrorIs(t, err, store.ErrUnreachable)
	_, err = st.PrefillRefused(ctx, "api.example.com", "m", now)
	assert.ErrorIs(t, err, store.ErrUnreachable)
	assert.Less(t, time.Since(start), 4*timeout, "bounded by Timeout")
	require.NoError(t, st.Close())
	assert.Error(t, st.RefusePrefill(ctx, "api.example.com", "m", now, time.Hour))
	_, err = st.PrefillRefused(ctx, "api.example.com", "m", now)
	assert.Error(t, err)
}

// refusingProvider refuses every prefill with Anthropic's 400 and answers
// the other requests with a Chat Completions stream cut after "Hello wor",
// then (the regeneration) the whole answer, alternately. It counts the
// prefills.
type refusingProvider struct {
	mu       sync.Mutex
	n        int
	prefills int
}

func (p *refusingProvider) RoundTrip(req *http.Request) (*http.Response, error) {
	b, _ := io.ReadAll(req.Body)
	p.mu.Lock()
	defer p.mu.Unlock()
	reply := func(status int, ct, body string) *http.Response {
		return &http.Response{StatusCode: status, Status: strconv.Itoa(status) + " " + http.StatusText(status), Header: http.Header{"Content-Type": {ct}},
			Body: io.NopCloser(strings.NewReader(body)), ContentLength: -1, Request: req}
	}
	chunk := func(text string, finish bool) string {
		if finish {
			return `data: {"id":"c1","object":"chat.completion.chunk","choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}` + "\n\ndata: [DONE]\n\n"
		}
		return `data: {"id":"c1","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"` + text + `"},"finish_reason":null}]}` + "\n\n"
	}
	if strings.Contains(string(b), `"assistant"`) {
		p.prefills++
		return reply(http.StatusBadRequest, "application/json", `{"type":"error","error":{"type":"invalid_request_error","message":"This model does not support assistant message prefill. The conversation must end with a user message."}}`), nil
	}
	p.n++
	if p.n%2 == 1 {
		return reply(http.StatusOK, "text/event-stream", chunk("Hello", false)+chunk(" wor", false)), nil
	}
	return reply(http.StatusOK, "text/event-stream", chunk("Hello world!", false)+chunk("", true)), nil
}

// Two processes (two Stores over one Redis): the route refuses the first
// one's prefill, and the second, continuing a cut stream on the same
// provider key and model, regenerates at once: one prefill for the fleet.
func TestPrefillRefusalSharedByTheFleet(t *testing.T) {
	srv := startRedis(t)
	p := prefix(t)
	secret := []byte("0123456789abcdef-fleet-secret")
	prov := &refusingProvider{}
	policy := llmretry.Policy{RetryStreams: true, ContinueStreams: true}
	for i := range 2 {
		st := newStore(t, newClient(t, srv.Addr), redisstore.Options{Prefix: p, Secret: secret, Timeout: roomyTimeout})
		rt, err := llmretry.NewCoordinated(prov, policy, coordination.Config{Store: st})
		require.NoError(t, err)
		req, err := http.NewRequest(http.MethodPost, "https://api.example.test/v1/chat/completions",
			strings.NewReader(`{"model":"m","messages":[{"role":"user","content":"Say hello"}],"stream":true}`))
		require.NoError(t, err)
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer sk-fleet")
		resp, err := rt.RoundTrip(req)
		require.NoError(t, err)
		got, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		require.NoError(t, err, "process %d", i)
		assert.Contains(t, string(got), `"content":"ld!"`, "process %d: the rest, spliced", i)
	}
	assert.Equal(t, 1, prov.prefills, "one prefill for the fleet")
}
