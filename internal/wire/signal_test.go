package wire

// Provider fixtures live in testdata/providers/*.json, one reply each:
//
//	{
//	  "source":   "where the reply's shape comes from (docs page, issue thread)",
//	  "status":   429,
//	  "headers":  {"content-type": ["application/json"], "retry-after": ["20"]},
//	  "body":     <the provider's body as a JSON value, bytes kept as written>,
//	  "bodyText": "or the body as a string, for bodies that are not JSON (SSE framing)",
//	  "evidence": "the bytes a prefix must hold in full for the body's verdict to show; \"\" when the body decides nothing",
//	  "want":     {"final": false, "retry": false, "wait": "26s"}
//	}
//
// Header names are canonicalised on loading. "wait" is a protobuf Duration
// string, or "" for no wait. Exactly one of "body" and "bodyText" is set.
//
// The fuzz targets' seed corpora are under testdata/fuzz/<FuzzName>/, in
// the "go test fuzz v1" format; the fixtures are added as seeds too.

import (
	"bytes"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// providerFixture is one provider reply from testdata/providers.
type providerFixture struct {
	// name is the fixture's file name without its extension.
	name string
	// Source says where the reply's shape was taken from.
	Source string `json:"source"`
	// Status is the reply's HTTP status.
	Status int `json:"status"`
	// Headers are the reply's headers, names in any case.
	Headers map[string][]string `json:"headers"`
	// Body is the reply's body when it is a JSON value.
	Body json.RawMessage `json:"body"`
	// BodyText is the reply's body when it is not a JSON value.
	BodyText *string `json:"bodyText"`
	// Evidence is what a body prefix must hold for the verdict to show.
	Evidence string `json:"evidence"`
	// Want is the signal the whole reply gives.
	Want struct {
		// Final is the expected Signal.Final.
		Final bool `json:"final"`
		// Retry is the expected Signal.Retry.
		Retry bool `json:"retry"`
		// Wait is the expected wait as a protobuf Duration, "" for none.
		Wait string `json:"wait"`
	} `json:"want"`
}

// header returns the fixture's headers with canonical names.
func (p providerFixture) header() http.Header {
	h := http.Header{}
	for k, vs := range p.Headers {
		for _, v := range vs {
			h.Add(k, v)
		}
	}
	return h
}

// body returns the fixture's raw body bytes.
func (p providerFixture) body() []byte {
	if p.BodyText != nil {
		return []byte(*p.BodyText)
	}
	return p.Body
}

// want returns the signal the fixture expects.
func (p providerFixture) want(t testing.TB) Signal {
	s := Signal{Final: p.Want.Final, Retry: p.Want.Retry}
	if p.Want.Wait != "" {
		d, ok := ParseProtoDuration(p.Want.Wait)
		require.True(t, ok, "fixture %s: bad want.wait %q", p.name, p.Want.Wait)
		s.Wait, s.HasWait = d, true
	}
	return s
}

// loadProviderFixtures reads every fixture in testdata/providers.
func loadProviderFixtures(t testing.TB) []providerFixture {
	paths, err := filepath.Glob(filepath.Join("testdata", "providers", "*.json"))
	require.NoError(t, err)
	require.GreaterOrEqual(t, len(paths), 10, "provider fixtures are missing")
	fixtures := make([]providerFixture, 0, len(paths))
	for _, path := range paths {
		raw, err := os.ReadFile(path)
		require.NoError(t, err)
		var p providerFixture
		require.NoError(t, json.Unmarshal(raw, &p), path)
		p.name = strings.TrimSuffix(filepath.Base(path), ".json")
		require.NotEmpty(t, p.Source, "%s: no source", path)
		require.True(t, (p.Body == nil) != (p.BodyText == nil), "%s: want exactly one of body and bodyText", path)
		fixtures = append(fixtures, p)
	}
	return fixtures
}

func TestReadSignalFixtures(t *testing.T) {
	for _, p := range loadProviderFixtures(t) {
		t.Run(p.name, func(t *testing.T) {
			got := ReadSignal(p.Status, p.header(), p.body())
			assert.Equal(t, p.want(t), got)
			if p.Evidence != "" {
				assert.Contains(t, string(p.body()), p.Evidence, "evidence must occur in the body")
			}
		})
	}
}

// TestReadSignalTruncated cuts every fixture's body at every length: the
// body's verdict shows exactly when the cut keeps the evidence whole, and
// otherwise only the headers speak.
func TestReadSignalTruncated(t *testing.T) {
	for _, p := range loadProviderFixtures(t) {
		t.Run(p.name, func(t *testing.T) {
			h, body, want := p.header(), p.body(), p.want(t)
			headerOnly := ReadSignal(p.Status, h, nil)
			for n := 0; n <= len(body); n++ {
				prefix := body[:n:n] // no capacity beyond the cut
				var got Signal
				require.NotPanics(t, func() { got = ReadSignal(p.Status, h, prefix) }, "cut at %d", n)
				if p.Evidence != "" && bytes.Contains(prefix, []byte(p.Evidence)) {
					require.Equal(t, want, got, "cut at %d keeps the evidence: %q", n, prefix)
				} else {
					require.Equal(t, headerOnly, got, "cut at %d lost the evidence: %q", n, prefix)
				}
			}
		})
	}
}

func TestReadSignalHeader(t *testing.T) {
	quota := []byte(`{"error":{"type":"insufficient_quota","code":"insufficient_quota"}}`)
	tests := []struct {
		name   string
		status int
		value  string
		body   []byte
		want   Signal
	}{
		{"false is final", 500, "false", nil, Signal{Final: true}},
		{"false in any case and spacing", 429, " FALSE ", nil, Signal{Final: true}},
		{"true asks for a retry", 400, "true", nil, Signal{Retry: true}},
		{"true in any case", 409, "True", nil, Signal{Retry: true}},
		{"anything else is ignored", 429, "yes", nil, Signal{}},
		{"empty is ignored", 429, "", nil, Signal{}},
		{"false beats a wait in the body", 429, "false", []byte(`{"error":{"details":[{"retryDelay":"5s"}]}}`), Signal{Final: true}},
		{"a spent quota in the body beats true", 429, "true", quota, Signal{Final: true}},
		{"true keeps the body's wait", 429, "true", []byte(`{"error":{"details":[{"retryDelay":"5s"}]}}`), Signal{Retry: true, Wait: 5 * time.Second, HasWait: true}},
		{"a status below 400 says nothing", 200, "false", quota, Signal{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := http.Header{}
			if tt.value != "" {
				h.Set("x-should-retry", tt.value)
			}
			assert.Equal(t, tt.want, ReadSignal(tt.status, h, tt.body))
		})
	}
}

func TestReadSignalBody(t *testing.T) {
	final := Signal{Final: true}
	wait := func(d time.Duration) Signal { return Signal{Wait: d, HasWait: true} }
	tests := []struct {
		name string
		ct   string
		body string
		want Signal
	}{
		{"openai code alone", "application/json", `{"error":{"code":"insufficient_quota"}}`, final},
		{"openai type alone", "application/json", `{"error":{"type":"insufficient_quota","code":null}}`, final},
		{"openai rate limit", "application/json", `{"error":{"type":"requests","code":"rate_limit_exceeded"}}`, Signal{}},
		{"quota named outside the top-level error", "application/json", `{"data":{"error":{"code":"insufficient_quota"}}}`, Signal{}},
		{"quota named in the message only", "application/json", `{"error":{"message":"insufficient_quota"}}`, Signal{}},
		{"quota named as a key", "application/json", `{"error":{"insufficient_quota":"code"}}`, Signal{}},
		{"anthropic spend cap", "application/json", `{"type":"error","error":{"type":"rate_limit_error","details":{"error_code":"enforced_spend_limit_reached"}}}`, final},
		{"anthropic null details", "application/json", `{"type":"error","error":{"details":null,"type":"rate_limit_error","message":"Rate limited"}}`, Signal{}},
		{"per-day quota in any case", "application/json", `{"error":{"details":[{"violations":[{"quotaId":"TokensPERDAY"}]}]}}`, final},
		{"per-minute quota waits", "application/json", `{"error":{"details":[{"violations":[{"quotaId":"PerMinute","quotaValue":"10"}]},{"retryDelay":"2s"}]}}`, wait(2 * time.Second)},
		{"quota value 0 as a number", "application/json", `{"error":{"details":[{"violations":[{"quotaValue":0}]}]}}`, final},
		{"quota value 0 as a cut number", "application/json", `{"error":{"details":[{"violations":[{"quotaValue":0`, Signal{}},
		{"quota value 0 followed by a space", "application/json", `{"error":{"details":[{"violations":[{"quotaValue":0 `, Signal{}},
		{"quota value 0 followed by a comma", "application/json", `{"error":{"details":[{"violations":[{"quotaValue":0 ,`, final},
		{"quota value 0.5 cut after the 0", "application/json", `{"error":{"details":[{"violations":[{"quotaValue":0.`, Signal{}},
		{"quota value 00 is not JSON", "application/json", `{"error":{"details":[{"violations":[{"quotaValue":00}]}]}}`, Signal{}},
		{"quota value 10", "application/json", `{"error":{"details":[{"violations":[{"quotaValue":"10"}]}]}}`, Signal{}},
		{"the longest wait wins", "application/json", `{"error":{"details":[{"retryDelay":"3s"},{"retryDelay":"9.5s"},{"retryDelay":"1s"}]}}`, wait(9500 * time.Millisecond)},
		{"a bad wait is ignored", "application/json", `{"error":{"details":[{"retryDelay":"-3s"},{"retryDelay":3}]}}`, Signal{}},
		{"a zero wait is a wait", "application/json", `{"error":{"details":[{"retryDelay":"0s"}]}}`, wait(0)},
		{"a huge wait is returned, not capped", "application/json", `{"error":{"details":[{"retryDelay":"86400s"}]}}`, wait(24 * time.Hour)},
		{"problem+json is read", "application/problem+json", `{"error":{"code":"insufficient_quota"}}`, final},
		{"JSON in capitals with parameters", "Application/JSON ; charset=utf-8", `{"error":{"code":"insufficient_quota"}}`, final},
		{"no content type is read", "", `{"error":{"code":"insufficient_quota"}}`, final},
		{"html is not read", "text/html; charset=utf-8", `{"error":{"code":"insufficient_quota"}}`, Signal{}},
		{"plain text is not read", "text/plain", `{"error":{"code":"insufficient_quota"}}`, Signal{}},
		{"event stream without framing", "text/event-stream", `{"error":{"code":"insufficient_quota"}}`, final},
		{"event stream with data prefix", "text/event-stream", "data: {\"error\":{\"code\":\"insufficient_quota\"}}\n\n", final},
		{"event stream with data prefix and no space", "text/event-stream", "data:{\"error\":{\"code\":\"insufficient_quota\"}}", final},
		{"event stream with an event line", "text/event-stream; charset=utf-8", "event: error\r\ndata: {\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\"}}\r\n\r\n", Signal{}},
		{"event stream with a comment and id", "text/event-stream", ": keep-alive\nid: 7\nretry: 10\nevent: error\ndata: {\"error\":{\"details\":[{\"retryDelay\":\"4s\"}]}}\n", wait(4 * time.Second)},
		{"event stream cut in its fields", "text/event-stream", "event: err", Signal{}},
		{"byte-order mark", "application/json", "\xef\xbb\xbf{\"error\":{\"code\":\"insufficient_quota\"}}", final},
		{"array wrapper", "application/json", `[{"error":{"code":"insufficient_quota"}}]`, final},
		{"only the first value is read", "application/json", `{"error":{}} {"error":{"code":"insufficient_quota"}}`, Signal{}},
		{"a scalar body", "application/json", `"insufficient_quota"`, Signal{}},
		{"an empty body", "application/json", ``, Signal{}},
		{"garbage", "application/json", "\x00\xff{{]]", Signal{}},
		{"a syntax error stops the walk", "application/json", `{"error":{"code" "insufficient_quota"}}`, Signal{}},
		{"evidence before a syntax error stands", "application/json", `{"error":{"code":"insufficient_quota",,}}`, final},
		{"escaped strings are decoded", "application/json", `{"error":{"code":"insufficient\u005fquota"}}`, final},
		{"escaped quota value 0", "application/json", `{"error":{"details":[{"violations":[{"quotaValue":"\u0030"}]}]}}`, final},
		{"keys in another case", "application/json", `{"Error":{"Details":[{"RetryDelay":"2s"}]}}`, wait(2 * time.Second)},
		{"an odd quota value does not hide a wait", "application/json", `{"error":{"details":[{"violations":[{"quotaValue":"abc"}]},{"retryDelay":"7s"}]}}`, wait(7 * time.Second)},
		{"fields of unexpected types are skipped", "application/json", `{"error":{"code":429,"type":{},"details":[1,"x",{"retryDelay":"7s"}]}}`, wait(7 * time.Second)},
		{"error as a string", "application/json", `{"error":"insufficient_quota"}`, Signal{}},
		{"details as one object", "application/json", `{"error":{"details":{"retryDelay":"7s","violations":[{"quotaId":"x"}]}}}`, wait(7 * time.Second)},
		{"too deep to follow", "application/json", strings.Repeat("[", 20) + `{"error":{"code":"insufficient_quota"}}` + strings.Repeat("]", 20), Signal{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := http.Header{}
			if tt.ct != "" {
				h.Set("Content-Type", tt.ct)
			}
			assert.Equal(t, tt.want, ReadSignal(429, h, []byte(tt.body)))
		})
	}
}

func TestReadSignalDoesNotAllocateWithoutABody(t *testing.T) {
	h := http.Header{}
	h.Set("Content-Type", "text/html")
	h.Set("X-Should-Retry", "true")
	body := []byte(`{"error":{"code":"insufficient_quota"}}`)
	allocs := testing.AllocsPerRun(100, func() { ReadSignal(503, h, body) })
	assert.Zero(t, allocs)
	h.Set("X-Should-Retry", "false")
	allocs = testing.AllocsPerRun(100, func() { ReadSignal(503, h, body) })
	assert.Zero(t, allocs)
}

// FuzzReadSignal feeds arbitrary statuses, headers and bodies to
// ReadSignal: it must not panic and must return a consistent signal, and
// the walk of the error body must read it as encoding/json's Decoder.Token
// walks it (decoderWalk).
func FuzzReadSignal(f *testing.F) {
	for _, p := range loadProviderFixtures(f) {
		h := p.header()
		body := p.body()
		f.Add(p.Status, h.Get("Content-Type"), h.Get("X-Should-Retry"), body)
		f.Add(p.Status, h.Get("Content-Type"), h.Get("X-Should-Retry"), body[:len(body)/2])
	}
	f.Add(429, "text/event-stream", "", []byte("event: error\ndata: {\"error\":{\"details\":[{\"retryDelay\":\"1.5s\"}]}}\n"))
	f.Add(429, "", "true", []byte(`[{"error":{"details":[{"violations":[{"quotaValue":0}]}]}}]`))
	f.Fuzz(func(t *testing.T, status int, contentType, shouldRetry string, body []byte) {
		h := http.Header{}
		h.Set("Content-Type", contentType)
		h.Set("X-Should-Retry", shouldRetry)
		s := ReadSignal(status, h, body)
		if s.Wait < 0 {
			t.Fatalf("negative wait %v", s.Wait)
		}
		if !s.HasWait && s.Wait != 0 {
			t.Fatalf("wait %v without HasWait", s.Wait)
		}
		if s.Final && (s.Retry || s.HasWait) {
			t.Fatalf("final signal with retry or wait: %+v", s)
		}
		if status < 400 && s != (Signal{}) {
			t.Fatalf("status %d gave %+v", status, s)
		}
		var walked, decoded Signal
		walkErrorBody(body, &walked)
		decoderWalk(body, &decoded)
		if walked != decoded {
			t.Fatalf("%q: walked %+v, encoding/json's walk %+v", body, walked, decoded)
		}
	})
}

func BenchmarkReadSignal(b *testing.B) {
	for _, p := range loadProviderFixtures(b) {
		h, body := p.header(), p.body()
		b.Run(p.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				ReadSignal(p.Status, h, body)
			}
		})
	}
}
