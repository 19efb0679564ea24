package coord

import (
	"context"
	"hash/maphash"
	"net/http"
	"testing"

	"github.com/llmretry/llmretry/coordination"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// mustRequest returns a POST to api.example.com under ctx.
func mustRequest(t *testing.T, ctx context.Context) *http.Request {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "https://api.example.com/v1/chat", nil)
	require.NoError(t, err)
	return req
}

// A provider key is the request's host and credential (the part of
// TestCoordinatedKeysAreHostAndCredential that checks the key a request
// makes; its end-to-end part checks that calls on one key do not
// hold another's): one key for the same host and credential, another for
// another credential or Gemini key= value; the store's name carries no
// credential.
func TestKeysAreHostAndCredential(t *testing.T) {
	co := newCoordinator(t, coordination.Config{})
	a1 := mustRequest(t, context.Background())
	a1.Header.Set("Authorization", "Bearer A")
	a2 := a1.Clone(context.Background())
	assert.Equal(t, keyOf(co.seed, a1), keyOf(co.seed, a2), "same host and credential: same key")
	b := a1.Clone(context.Background())
	b.Header.Set("Authorization", "Bearer B")
	assert.NotEqual(t, keyOf(co.seed, a1), keyOf(co.seed, b))
	g1 := mustRequest(t, context.Background())
	g1.URL.RawQuery = "key=AIzaOne"
	g2 := mustRequest(t, context.Background())
	g2.URL.RawQuery = "key=AIzaTwo"
	assert.NotEqual(t, keyOf(co.seed, g1), keyOf(co.seed, g2), "Gemini's key= query value is a credential")
	x := mustRequest(t, context.Background())
	x.Header.Set("X-Goog-Api-Key", "AIzaThree")
	name := co.shared.Key(x.URL.Host, credentialOf(x))
	assert.NotContains(t, name, "AIza")
	assert.Regexp(t, `^api\.example\.com#[0-9a-f]{8}$`, name)
}

// A SigV4 request counts by its access key ID, not its per-request
// signature; a host differing only in case is the same host; a bearer
// token's key allocates nothing.
func TestKeyOfSigV4AndCase(t *testing.T) {
	seed := maphash.MakeSeed()
	sig := func(s string) *http.Request {
		r := mustRequest(t, context.Background())
		r.Header.Set("Authorization", "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20261201/us-east-1/bedrock/aws4_request, SignedHeaders=host, Signature="+s)
		return r
	}
	assert.Equal(t, keyOf(seed, sig("0123")), keyOf(seed, sig("4567")), "one access key ID, two signatures")
	upper := mustRequest(t, context.Background())
	upper.URL.Host = "API.Example.COM"
	assert.Equal(t, keyOf(seed, mustRequest(t, context.Background())), keyOf(seed, upper))
	req := mustRequest(t, context.Background())
	req.Header.Set("Authorization", "Bearer sk-0123456789")
	assert.Zero(t, testing.AllocsPerRun(100, func() { keyOf(seed, req) }))
}
