package testkit

import (
	"bytes"
	"net/http"
	"testing"
)

// Post returns a POST of the JSON body to url, as an SDK builds one:
// Content-Type: application/json, the body a *bytes.Reader (so GetBody is
// set and ContentLength is the body's length), the background context
// (req.WithContext gives it another). Each call returns a new request,
// the caller's. It fails t if url does not parse.
func Post(t testing.TB, url, body string) *http.Request {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, bytes.NewReader([]byte(body)))
	if err != nil {
		t.Fatalf("testkit: POST %s: %v", url, err)
	}
	req.Header.Set("Content-Type", "application/json")
	return req
}

// StainlessPost is Post as the Stainless SDKs (openai-go,
// anthropic-sdk-go) build every request, streaming or not: with Accept:
// application/json too.
func StainlessPost(t testing.TB, url, body string) *http.Request {
	t.Helper()
	req := Post(t, url, body)
	req.Header.Set("Accept", "application/json")
	return req
}
