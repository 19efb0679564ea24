package credential

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

// One rule names the query parameters that carry credentials: every name
// the core's texts blanked before, every one otelretry's spans redacted
// that names a credential, and none that does not.
func TestIsParam(t *testing.T) {
	for _, name := range []string{
		// The core's list before issue 28.
		"key", "api_key", "apikey", "api-key", "access_token", "token", "sig", "signature", "password", "secret",
		"client_secret", "x-amz-signature", "x-amz-credential", "x-amz-security-token", "x-goog-signature",
		"x-goog-credential", "subscription-key",
		// Any case, camel case, and the OpenTelemetry conventions' list.
		"API_KEY", "apIkey", "apiKey", "X-Goog-Api-Key", "AWSAccessKeyId", "awsaccesskeyid", "Signature", "X-Goog-Signature",
		// Words and stems.
		"refresh_token", "id_token", "authtoken", "X-Auth-Token", "auth", "authorization", "passwd", "db.password",
		"sessionToken", "secretKey", "private_key", "credentials",
	} {
		assert.True(t, IsParam(name), name)
	}
	for _, name := range []string{
		"", "monkey", "keys", "keyword", "max_tokens", "api-version", "alt", "sv", "x-id", "author", "authuser",
		"signal", "design", "model", "stream", "q",
	} {
		assert.False(t, IsParam(name), name)
	}
}

func TestIsParamAllocatesNothing(t *testing.T) {
	assert.Zero(t, testing.AllocsPerRun(100, func() { IsParam("X-Amz-Security-Token") }))
}

// A query's parameters end at '&' and at ';', as a text's name=value does
// (RedactParams): every separator is cut, and nothing else.
func TestCutParam(t *testing.T) {
	for q, want := range map[string][]string{
		"":                       nil,
		"key=K":                  {"key=K"},
		"alt=sse&key=K":          {"alt=sse", "key=K"},
		"alt=sse;key=K":          {"alt=sse", "key=K"},
		"a=1;b=2&c=3;":           {"a=1", "b=2", "c=3"},
		"&&a":                    {"", "", "a"},
		"x=a%3Bb&y=c%26d":        {"x=a%3Bb", "y=c%26d"},
		"q=a,b=c;sig=S&alt=json": {"q=a,b=c", "sig=S", "alt=json"},
	} {
		var got []string
		for rest := q; rest != ""; {
			var part string
			part, rest = CutParam(rest)
			got = append(got, part)
		}
		assert.Equal(t, want, got, q)
	}
	assert.Zero(t, testing.AllocsPerRun(100, func() { CutParam("alt=sse;key=K") }))
}

// The provider key's parameter is key in any case, escaped or not, and no
// other credential parameter.
func TestIsProviderKeyParam(t *testing.T) {
	for _, name := range []string{"key", "Key", "KEY", "k%65y", "%4B%45%59"} {
		assert.True(t, IsProviderKeyParam(name), name)
	}
	for _, name := range []string{"", "keys", "api_key", "api-key", "monkey", "key%", "sig"} {
		assert.False(t, IsProviderKeyParam(name), name)
	}
	assert.Zero(t, testing.AllocsPerRun(100, func() { IsProviderKeyParam("Key") }))
}
