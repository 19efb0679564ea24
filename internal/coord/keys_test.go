package coord

import (
	"context"
	"hash/maphash"
	"net/http"
	"strings"
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

// A credential counts as itself in any spelling: a provider key header
// under a name that is not canonical (a map set directly, which net/http
// sends as written) and a key= query value named in any case, escaped or
// after a ';' make the key and the store's name that the canonical
// spelling makes, and two credentials so spelt make two keys. A header
// in two spellings makes one key, whatever the map's order; a spelling
// costs no allocation.
func TestKeyOfAnySpelling(t *testing.T) {
	seed := maphash.MakeSeed()
	header := func(name, value string) func(string) *http.Request {
		return func(cred string) *http.Request {
			r := mustRequest(t, context.Background())
			r.Header[name] = []string{strings.ReplaceAll(value, "%s", cred)}
			return r
		}
	}
	query := func(q string) func(string) *http.Request {
		return func(cred string) *http.Request {
			r := mustRequest(t, context.Background())
			r.URL.RawQuery = strings.ReplaceAll(q, "%s", cred)
			return r
		}
	}
	const sigV4 = "AWS4-HMAC-SHA256 Credential=%s/20261201/us-east-1/bedrock/aws4_request, SignedHeaders=host, Signature="
	for _, tc := range []struct {
		name             string
		canonical, spelt func(cred string) *http.Request
	}{
		{"authorization", header("Authorization", "Bearer %s"), header("authorization", "Bearer %s")},
		{"AUTHORIZATION", header("Authorization", "Bearer %s"), header("AUTHORIZATION", "Bearer %s")},
		{"x-api-key", header("X-Api-Key", "%s"), header("x-api-key", "%s")},
		{"api-key", header("Api-Key", "%s"), header("api-key", "%s")},
		{"x-goog-api-key", header("X-Goog-Api-Key", "%s"), header("x-goog-api-key", "%s")},
		{"a SigV4 authorization", header("Authorization", sigV4+"0123"), header("authorization", sigV4+"4567")},
		{"Key=", query("key=%s"), query("Key=%s")},
		{"KEY= after alt=sse&", query("alt=sse&key=%s"), query("alt=sse&KEY=%s")},
		{";key=", query("key=%s"), query("alt=sse;key=%s")},
		{"k%65y=", query("key=%s"), query("k%65y=%s")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := tc.spelt("AKIDA")
			assert.Equal(t, keyOf(seed, tc.canonical("AKIDA")), keyOf(seed, a), "one credential, spelt otherwise")
			assert.Equal(t, credentialOf(tc.canonical("AKIDA")), credentialOf(a), "the store's name")
			assert.NotEqual(t, keyOf(seed, a), keyOf(seed, tc.spelt("AKIDB")), "two credentials")
			assert.NotEqual(t, keyOf(seed, a), keyOf(seed, mustRequest(t, context.Background())), "a credential")
		})
	}

	both := header("x-api-key", "A")("")
	both.Header["X-API-KEY"] = []string{"B"}
	want := keyOf(seed, both)
	for range 50 {
		require.Equal(t, want, keyOf(seed, both), "whatever the map's order")
	}
	assert.NotEqual(t, want, keyOf(seed, header("x-api-key", "A")("")), "both spellings' values count")
	assert.Zero(t, testing.AllocsPerRun(100, func() { keyOf(seed, both) }))
}
