package credential

import (
	"net/http"
	"net/url"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestRedactParams(t *testing.T) {
	cases := map[string]string{
		"no params":                             "no params",
		"a=1&key=K&b=2":                         "a=1&key=…&b=2",
		`"?API_KEY=K"`:                          `"?API_KEY=…"`,
		"access_token=T; sig=S, apikey=A)":      "access_token=…; sig=…, apikey=…)",
		"monkey=banana":                         "monkey=banana",
		"key=":                                  "key=",
		"x?key=K#frag":                          "x?key=…#frag",
		"token=abc token=def":                   "token=… token=…",
		"keys=1 api-key=secret client_secret=s": "keys=1 api-key=… client_secret=…",
		"GET https://b.s3.amazonaws.com/o?X-Amz-Credential=AKIA%2F1&X-Amz-Signature=abc: 403": "GET https://b.s3.amazonaws.com/o?X-Amz-Credential=…&X-Amz-Signature=… 403",
		"x-goog-signature=s subscription-key=k":                                               "x-goog-signature=… subscription-key=…",
	}
	for in, want := range cases {
		assert.Equal(t, want, RedactParams(in), in)
	}
}

// Redact blanks the values of every credential header, the query, the
// user information, and credential-like name=value pairs, request or not.
func TestRedactText(t *testing.T) {
	req, err := http.NewRequest(http.MethodGet, "https://u:pw-secret@host/v1?key=K1&alt=sse", nil)
	require.NoError(t, err)
	for _, h := range Headers {
		req.Header.Set(h.Name, "Bearer secret-"+h.Name)
	}
	text := "GET https://u:pw-secret@host/v1?key=K1&alt=sse: 401 Bearer secret-Authorization; refresh_token=R AWSAccessKeyId=A"
	for _, h := range Headers {
		text += " secret-" + h.Name
	}
	got := Redact(text, req)
	for _, secret := range []string{"pw-secret", "K1", "=R", "=A", "secret-"} {
		assert.NotContains(t, got, secret)
	}
	assert.Equal(t, "nothing to hide", Redact("nothing to hide", nil))

	// A header map set directly may hold a name that is not canonical:
	// its credential is blanked all the same.
	direct := &http.Request{Header: http.Header{"x-api-key": {"direct-secret"}, "authorization": {"Bearer direct-token"}}}
	got = Redact("refused direct-secret, then direct-token", direct)
	assert.NotContains(t, got, "direct-secret")
	assert.NotContains(t, got, "direct-token")
}

func TestRedactURL(t *testing.T) {
	u, err := url.Parse("https://u:p@host/v1/models/g:generateContent?key=K#frag")
	require.NoError(t, err)
	assert.Equal(t, "https://host/v1/models/g:generateContent?…", RedactURL(u))
	assert.Equal(t, "<nil URL>", RedactURL(nil))
}

// MaskQuery masks the values of credential parameters, names and order
// kept, and leaves a query with none as it is.
func TestMaskQuery(t *testing.T) {
	for q, want := range map[string]string{
		"alt=sse&key=K":                     "alt=sse&key=REDACTED",
		"x%2Dapi%2Dkey=K&sv=2022":           "x%2Dapi%2Dkey=REDACTED&sv=2022",
		"AWSAccessKeyId=A&Signature=S&x=1":  "AWSAccessKeyId=REDACTED&Signature=REDACTED&x=1",
		"key=":                              "key=",
		"api-version=2024-06-01&monkey=ban": "api-version=2024-06-01&monkey=ban",
		// ';' separates parameters as '&' does (RedactParams ends a
		// value at either): each separator is kept as it was.
		"alt=sse;key=K":        "alt=sse;key=REDACTED",
		"key=K;alt=sse&sig=S;": "key=REDACTED;alt=sse&sig=REDACTED;",
		"alt=sse;monkey=ban":   "alt=sse;monkey=ban",
	} {
		assert.Equal(t, want, MaskQuery(q, "REDACTED"), q)
		assert.Equal(t, want != q, HasParam(q), q)
	}
}

// Strip removes every credential header in any spelling, the user
// information and the credential parameters, and nothing else.
func TestStrip(t *testing.T) {
	req, err := http.NewRequest(http.MethodPost, "https://u:p@host/v1?key=K&alt=sse&refresh_token=R", nil)
	require.NoError(t, err)
	for _, h := range Headers {
		req.Header[h.Name] = []string{"secret"}
	}
	req.Header["x-api-key"] = []string{"secret"} // not canonical
	req.Header.Set("Content-Type", "application/json")
	Strip(req)
	assert.Equal(t, http.Header{"Content-Type": {"application/json"}}, req.Header)
	assert.Nil(t, req.URL.User)
	assert.Equal(t, "alt=sse", req.URL.RawQuery)
}

// Carried sees a credential wherever a request may carry one, and nothing
// in a request Strip has been through.
func TestCarried(t *testing.T) {
	for _, tc := range []struct {
		name string
		url  string
		h    http.Header
		want bool
	}{
		{"none", "https://api.example.test/v1", nil, false},
		{"Authorization", "https://api.example.test/v1", http.Header{"Authorization": {"Bearer sk-1"}}, true},
		{"x-api-key, any spelling", "https://api.example.test/v1", http.Header{"x-api-key": {"k"}}, true},
		{"Azure api-key", "https://api.example.test/v1", http.Header{"Api-Key": {"k"}}, true},
		{"an empty value", "https://api.example.test/v1", http.Header{"Api-Key": {""}}, false},
		{"key= in the query", "https://api.example.test/v1?key=k&alt=sse", nil, true},
		{"key= after a ';'", "https://api.example.test/v1?alt=sse;key=k", nil, true},
		{"user information", "https://u:p@api.example.test/v1", nil, true},
		{"another header", "https://api.example.test/v1?alt=sse", http.Header{"Anthropic-Version": {"2023-06-01"}}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, err := http.NewRequest(http.MethodPost, tc.url, nil)
			require.NoError(t, err)
			for k, vs := range tc.h {
				r.Header[k] = vs
			}
			assert.Equal(t, tc.want, Carried(r))
			Strip(r)
			assert.False(t, Carried(r), "after Strip")
		})
	}
}
