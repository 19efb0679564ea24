package llmretry

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
	"context"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"testing/synctest"
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
		// Final is the expected signal.final.
		Final bool `json:"final"`
		// Retry is the expected signal.retry.
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
func (p providerFixture) want(t testing.TB) signal {
	s := signal{final: p.Want.Final, retry: p.Want.Retry}
	if p.Want.Wait != "" {
		d, ok := parseProtoDuration(p.Want.Wait)
		require.True(t, ok, "fixture %s: bad want.wait %q", p.name, p.Want.Wait)
		s.wait, s.hasWait = d, true
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
			got := readSignal(p.Status, p.header(), p.body())
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
			headerOnly := readSignal(p.Status, h, nil)
			for n := 0; n <= len(body); n++ {
				prefix := body[:n:n] // no capacity beyond the cut
				var got signal
				require.NotPanics(t, func() { got = readSignal(p.Status, h, prefix) }, "cut at %d", n)
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
		want   signal
	}{
		{"false is final", 500, "false", nil, signal{final: true}},
		{"false in any case and spacing", 429, " FALSE ", nil, signal{final: true}},
		{"true asks for a retry", 400, "true", nil, signal{retry: true}},
		{"true in any case", 409, "True", nil, signal{retry: true}},
		{"anything else is ignored", 429, "yes", nil, signal{}},
		{"empty is ignored", 429, "", nil, signal{}},
		{"false beats a wait in the body", 429, "false", []byte(`{"error":{"details":[{"retryDelay":"5s"}]}}`), signal{final: true}},
		{"a spent quota in the body beats true", 429, "true", quota, signal{final: true}},
		{"true keeps the body's wait", 429, "true", []byte(`{"error":{"details":[{"retryDelay":"5s"}]}}`), signal{retry: true, wait: 5 * time.Second, hasWait: true}},
		{"a status below 400 says nothing", 200, "false", quota, signal{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := http.Header{}
			if tt.value != "" {
				h.Set("x-should-retry", tt.value)
			}
			assert.Equal(t, tt.want, readSignal(tt.status, h, tt.body))
		})
	}
}

func TestReadSignalBody(t *testing.T) {
	final := signal{final: true}
	wait := func(d time.Duration) signal { return signal{wait: d, hasWait: true} }
	tests := []struct {
		name string
		ct   string
		body string
		want signal
	}{
		{"openai code alone", "application/json", `{"error":{"code":"insufficient_quota"}}`, final},
		{"openai type alone", "application/json", `{"error":{"type":"insufficient_quota","code":null}}`, final},
		{"openai rate limit", "application/json", `{"error":{"type":"requests","code":"rate_limit_exceeded"}}`, signal{}},
		{"quota named outside the top-level error", "application/json", `{"data":{"error":{"code":"insufficient_quota"}}}`, signal{}},
		{"quota named in the message only", "application/json", `{"error":{"message":"insufficient_quota"}}`, signal{}},
		{"quota named as a key", "application/json", `{"error":{"insufficient_quota":"code"}}`, signal{}},
		{"anthropic spend cap", "application/json", `{"type":"error","error":{"type":"rate_limit_error","details":{"error_code":"enforced_spend_limit_reached"}}}`, final},
		{"anthropic null details", "application/json", `{"type":"error","error":{"details":null,"type":"rate_limit_error","message":"Rate limited"}}`, signal{}},
		{"per-day quota in any case", "application/json", `{"error":{"details":[{"violations":[{"quotaId":"TokensPERDAY"}]}]}}`, final},
		{"per-minute quota waits", "application/json", `{"error":{"details":[{"violations":[{"quotaId":"PerMinute","quotaValue":"10"}]},{"retryDelay":"2s"}]}}`, wait(2 * time.Second)},
		{"quota value 0 as a number", "application/json", `{"error":{"details":[{"violations":[{"quotaValue":0}]}]}}`, final},
		{"quota value 0 as a cut number", "application/json", `{"error":{"details":[{"violations":[{"quotaValue":0`, signal{}},
		{"quota value 0 followed by a space", "application/json", `{"error":{"details":[{"violations":[{"quotaValue":0 `, signal{}},
		{"quota value 0 followed by a comma", "application/json", `{"error":{"details":[{"violations":[{"quotaValue":0 ,`, final},
		{"quota value 0.5 cut after the 0", "application/json", `{"error":{"details":[{"violations":[{"quotaValue":0.`, signal{}},
		{"quota value 00 is not JSON", "application/json", `{"error":{"details":[{"violations":[{"quotaValue":00}]}]}}`, signal{}},
		{"quota value 10", "application/json", `{"error":{"details":[{"violations":[{"quotaValue":"10"}]}]}}`, signal{}},
		{"the longest wait wins", "application/json", `{"error":{"details":[{"retryDelay":"3s"},{"retryDelay":"9.5s"},{"retryDelay":"1s"}]}}`, wait(9500 * time.Millisecond)},
		{"a bad wait is ignored", "application/json", `{"error":{"details":[{"retryDelay":"-3s"},{"retryDelay":3}]}}`, signal{}},
		{"a zero wait is a wait", "application/json", `{"error":{"details":[{"retryDelay":"0s"}]}}`, wait(0)},
		{"a huge wait is returned, not capped", "application/json", `{"error":{"details":[{"retryDelay":"86400s"}]}}`, wait(24 * time.Hour)},
		{"problem+json is read", "application/problem+json", `{"error":{"code":"insufficient_quota"}}`, final},
		{"JSON in capitals with parameters", "Application/JSON ; charset=utf-8", `{"error":{"code":"insufficient_quota"}}`, final},
		{"no content type is read", "", `{"error":{"code":"insufficient_quota"}}`, final},
		{"html is not read", "text/html; charset=utf-8", `{"error":{"code":"insufficient_quota"}}`, signal{}},
		{"plain text is not read", "text/plain", `{"error":{"code":"insufficient_quota"}}`, signal{}},
		{"event stream without framing", "text/event-stream", `{"error":{"code":"insufficient_quota"}}`, final},
		{"event stream with data prefix", "text/event-stream", "data: {\"error\":{\"code\":\"insufficient_quota\"}}\n\n", final},
		{"event stream with data prefix and no space", "text/event-stream", "data:{\"error\":{\"code\":\"insufficient_quota\"}}", final},
		{"event stream with an event line", "text/event-stream; charset=utf-8", "event: error\r\ndata: {\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\"}}\r\n\r\n", signal{}},
		{"event stream with a comment and id", "text/event-stream", ": keep-alive\nid: 7\nretry: 10\nevent: error\ndata: {\"error\":{\"details\":[{\"retryDelay\":\"4s\"}]}}\n", wait(4 * time.Second)},
		{"event stream cut in its fields", "text/event-stream", "event: err", signal{}},
		{"byte-order mark", "application/json", "\xef\xbb\xbf{\"error\":{\"code\":\"insufficient_quota\"}}", final},
		{"array wrapper", "application/json", `[{"error":{"code":"insufficient_quota"}}]`, final},
		{"only the first value is read", "application/json", `{"error":{}} {"error":{"code":"insufficient_quota"}}`, signal{}},
		{"a scalar body", "application/json", `"insufficient_quota"`, signal{}},
		{"an empty body", "application/json", ``, signal{}},
		{"garbage", "application/json", "\x00\xff{{]]", signal{}},
		{"a syntax error stops the walk", "application/json", `{"error":{"code" "insufficient_quota"}}`, signal{}},
		{"evidence before a syntax error stands", "application/json", `{"error":{"code":"insufficient_quota",,}}`, final},
		{"escaped strings are decoded", "application/json", `{"error":{"code":"insufficient\u005fquota"}}`, final},
		{"escaped quota value 0", "application/json", `{"error":{"details":[{"violations":[{"quotaValue":"\u0030"}]}]}}`, final},
		{"keys in another case", "application/json", `{"Error":{"Details":[{"RetryDelay":"2s"}]}}`, wait(2 * time.Second)},
		{"an odd quota value does not hide a wait", "application/json", `{"error":{"details":[{"violations":[{"quotaValue":"abc"}]},{"retryDelay":"7s"}]}}`, wait(7 * time.Second)},
		{"fields of unexpected types are skipped", "application/json", `{"error":{"code":429,"type":{},"details":[1,"x",{"retryDelay":"7s"}]}}`, wait(7 * time.Second)},
		{"error as a string", "application/json", `{"error":"insufficient_quota"}`, signal{}},
		{"details as one object", "application/json", `{"error":{"details":{"retryDelay":"7s","violations":[{"quotaId":"x"}]}}}`, wait(7 * time.Second)},
		{"too deep to follow", "application/json", strings.Repeat("[", 20) + `{"error":{"code":"insufficient_quota"}}` + strings.Repeat("]", 20), signal{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := http.Header{}
			if tt.ct != "" {
				h.Set("Content-Type", tt.ct)
			}
			assert.Equal(t, tt.want, readSignal(429, h, []byte(tt.body)))
		})
	}
}

// TestBodyReadersAgree checks that json.Unmarshal and the token walk read
// every complete object body here the same way.
func TestBodyReadersAgree(t *testing.T) {
	bodies := map[string][]byte{}
	for _, p := range loadProviderFixtures(t) {
		bodies[p.name] = ssePayload(p.body())
	}
	for _, raw := range []string{
		`{"error":{"code":"insufficient_quota"}}`,
		`{"error":{"details":{"error_code":"enforced_spend_limit_reached"}}}`,
		`{"error":{"details":[{"violations":[{"quotaId":"aPerDayb"}]}]}}`,
		`{"error":{"details":[{"violations":[{"quotaValue":0}]}]}}`,
		`{"error":{"details":[{"violations":[{"quotaValue":"\u0030"}]}]}}`,
		`{"error":{"details":[{"violations":[{"quotaValue":"abc"}]},{"retryDelay":"7s"}]}}`,
		`{"error":{"code":429,"type":{},"details":[1,"x",{"retryDelay":"7s"},{"retryDelay":"9s"}]}}`,
		`{"ERROR":{"DETAILS":[{"RETRYDELAY":"2s"}]}}`,
		`{"error":"insufficient_quota"}`,
		`{"error":{"details":null}}`,
	} {
		bodies[raw] = []byte(raw)
	}
	for name, body := range bodies {
		require.True(t, json.Valid(body), name)
		var fast, walked signal
		readErrorBody(body, &fast)
		walkErrorBody(body, &walked)
		if walked.final { // the walk stops at a verdict; a final signal has no wait
			fast, walked = signal{final: fast.final}, signal{final: true}
		}
		assert.Equal(t, walked, fast, name)
	}
}

func TestReadSignalNoPanicOnHostileInput(t *testing.T) {
	deep := []byte(strings.Repeat("[", 100000))
	deepObjects := []byte(strings.Repeat(`{"error":`, 20000))
	assert.NotPanics(t, func() {
		assert.Equal(t, signal{}, readSignal(500, nil, deep))
		assert.Equal(t, signal{}, readSignal(500, nil, deepObjects))
		assert.Equal(t, signal{}, readSignal(500, nil, nil))
		assert.Equal(t, signal{}, readSignal(-1, nil, deep))
	})
}

func TestReadSignalDoesNotAllocateWithoutABody(t *testing.T) {
	h := http.Header{}
	h.Set("Content-Type", "text/html")
	h.Set("X-Should-Retry", "true")
	body := []byte(`{"error":{"code":"insufficient_quota"}}`)
	allocs := testing.AllocsPerRun(100, func() { readSignal(503, h, body) })
	assert.Zero(t, allocs)
	h.Set("X-Should-Retry", "false")
	allocs = testing.AllocsPerRun(100, func() { readSignal(503, h, body) })
	assert.Zero(t, allocs)
}

func TestParseProtoDuration(t *testing.T) {
	valid := []struct {
		in   string
		want time.Duration
	}{
		{"26s", 26 * time.Second},
		{"38.804097346s", 38*time.Second + 804097346*time.Nanosecond},
		{"0s", 0},
		{"0.5s", 500 * time.Millisecond},
		{"1.000000001s", time.Second + time.Nanosecond},
		{"007s", 7 * time.Second},
		{"86400s", 24 * time.Hour},
		{"315576000s", 315576000 * time.Second},
		{"9223372036.854775807s", time.Duration(1<<63 - 1)},
	}
	for _, tt := range valid {
		d, ok := parseProtoDuration(tt.in)
		assert.True(t, ok, "%q should parse", tt.in)
		assert.Equal(t, tt.want, d, "%q", tt.in)
	}
	invalid := []string{
		"", "s", "26", "-1s", "+1s", "-0s", "abc", "1e9999s", "1e3s", "NaNs", "Infs",
		".5s", "1.s", "1.5.5s", "1.0000000001s", " 1s", "1s ", "1 s", "1ss", "1S",
		"0x10s", "1_000s", "１s", "26ms", "1m", "9223372036.854775808s", "9223372037s",
		"315576000000s", "99999999999999999999999999999s", strings.Repeat("9", 10000) + "s",
	}
	for _, in := range invalid {
		d, ok := parseProtoDuration(in)
		assert.False(t, ok, "%q should not parse", in)
		assert.Zero(t, d, "%q", in)
	}
}

// What providers say in their error replies changes what the Transport
// does, and the caller still reads the provider's whole body.
func TestProviderSignalsThroughTheTransport(t *testing.T) {
	long := strings.Repeat("x", 3*signalPeek)
	cases := []struct {
		name     string
		first    step
		attempts int           // provider attempts with a schedule of one 1 s retry
		gap      time.Duration // the wait before the retry, when there is one
	}{
		{"openai insufficient_quota is final", step{status: 429, body: `{"error":{"message":"You exceeded your current quota","type":"insufficient_quota","param":null,"code":"insufficient_quota"}}`}, 1, 0},
		{"openai rate limit is retried", step{status: 429, body: `{"error":{"message":"Rate limit reached","type":"tokens","param":null,"code":"rate_limit_exceeded"}}`}, 2, time.Second},
		{"anthropic spend limit is final", step{status: 429, body: `{"type":"error","error":{"type":"rate_limit_error","message":"spend limit","details":{"error_code":"enforced_spend_limit_reached"}}}`}, 1, 0},
		{"anthropic overloaded is retried", step{status: 529, body: `{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}`}, 2, time.Second},
		{"gemini RetryInfo is the wait", step{status: 429, body: `{"error":{"code":429,"message":"quota","status":"RESOURCE_EXHAUSTED","details":[{"@type":"type.googleapis.com/google.rpc.RetryInfo","retryDelay":"26.5s"}]}}`}, 2, 26500 * time.Millisecond},
		{"gemini per-day quota is final", step{status: 429, body: `{"error":{"code":429,"message":"quota","status":"RESOURCE_EXHAUSTED","details":[{"@type":"type.googleapis.com/google.rpc.QuotaFailure","violations":[{"quotaId":"GenerateRequestsPerDayPerProjectPerModel-FreeTier"}]},{"@type":"type.googleapis.com/google.rpc.RetryInfo","retryDelay":"26s"}]}}`}, 1, 0},
		{"x-should-retry false beats 503", step{status: 503, header: map[string][]string{"X-Should-Retry": {"false"}}, body: "down"}, 1, 0},
		{"x-should-retry true makes 409 retried", step{status: 409, header: map[string][]string{"X-Should-Retry": {"true"}}, body: "conflict"}, 2, time.Second},
		{"a long error body is peeked, not read", step{status: 503, body: long}, 2, time.Second},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				// The provider fails the same way every time, so the
				// response the caller sees is the first reply's twin.
				prov := newProvider(c.first)
				resp, err := post(t, mustNew(t, prov.mock, Policy{Waits: []time.Duration{time.Second}}), context.Background())
				require.NoError(t, err)
				assert.Equal(t, c.attempts, prov.attempts())
				if c.attempts == 2 {
					assert.Equal(t, []time.Duration{c.gap}, prov.gaps())
				}
				assert.Equal(t, c.first.status, resp.StatusCode)
				if c.attempts == 1 {
					// Final by the provider's word: SDKs above must not
					// resend it either.
					assert.Equal(t, "false", resp.Header.Get("X-Should-Retry"))
				}
				assert.Equal(t, c.first.body, bodyOf(t, resp), "the caller reads the provider's whole body")
			})
		})
	}
}

// FuzzReadSignal feeds arbitrary statuses, headers and bodies to
// readSignal: it must not panic and must return a consistent signal.
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
		s := readSignal(status, h, body)
		if s.wait < 0 {
			t.Fatalf("negative wait %v", s.wait)
		}
		if !s.hasWait && s.wait != 0 {
			t.Fatalf("wait %v without hasWait", s.wait)
		}
		if s.final && (s.retry || s.hasWait) {
			t.Fatalf("final signal with retry or wait: %+v", s)
		}
		if status < 400 && s != (signal{}) {
			t.Fatalf("status %d gave %+v", status, s)
		}
	})
}

// FuzzParseProtoDuration checks parseProtoDuration against
// time.ParseDuration, which accepts every string it accepts.
func FuzzParseProtoDuration(f *testing.F) {
	for _, s := range []string{"26s", "38.804097346s", "0s", "0.5s", "", "26", "-1s", "abc", "1e9999s", "NaNs", "9223372036.854775807s", "9223372036.854775808s"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		d, ok := parseProtoDuration(s)
		if !ok {
			if d != 0 {
				t.Fatalf("%q rejected with %v", s, d)
			}
			return
		}
		if d < 0 {
			t.Fatalf("%q gave negative %v", s, d)
		}
		want, err := time.ParseDuration(s)
		if err != nil || want != d {
			t.Fatalf("%q gave %v, time.ParseDuration gives %v, %v", s, d, want, err)
		}
	})
}

func BenchmarkReadSignal(b *testing.B) {
	for _, p := range loadProviderFixtures(b) {
		h, body := p.header(), p.body()
		b.Run(p.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				readSignal(p.Status, h, body)
			}
		})
	}
}
