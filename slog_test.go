package llmretry

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// textLogger logs every level to buf as text.
func textLogger(buf *syncBuffer) *slog.Logger {
	return slog.New(slog.NewTextHandler(buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// The record as a log: one line per attempt with the expected fields, and
// never a credential, wherever the canary was put.
func TestLogAttemptsNeverLogsCredentials(t *testing.T) {
	const canary = "CANARY-7f3a9c"
	synctest.Test(t, func(t *testing.T) {
		// The provider fails three ways, the last an error from a nested
		// client that quotes the whole URL, query and all.
		prov := newProvider(
			fail(503, "Set-Cookie", "session="+canary),
			step{err: errors.New(`Post "https://generativelanguage.googleapis.com/v1beta/models/m:generateContent?alt=sse&key=` + canary + `": connection reset; retry with api_key=` + canary + ` token=` + canary)},
			ok)
		var buf syncBuffer
		// alt=sse makes it a stream: RetryStreams lets it be retried.
		rt := mustNew(t, prov.mock, Policy{Waits: []time.Duration{time.Second, 2 * time.Second}, RetryStreams: true, OnAttempt: LogAttempts(textLogger(&buf))})
		req, err := http.NewRequest(http.MethodPost, "https://generativelanguage.googleapis.com/v1beta/models/m:generateContent?alt=sse&key="+canary, strings.NewReader(`{}`))
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer "+canary)
		req.Header.Set("X-Api-Key", canary)
		req.Header.Set("Api-Key", canary)
		req.Header.Set("X-Goog-Api-Key", canary)
		req.Header.Set("Cookie", "session="+canary)
		resp, err := rt.RoundTrip(req)
		require.NoError(t, err)
		assert.Equal(t, 200, resp.StatusCode)
		bodyOf(t, resp)

		out := buf.String()
		assert.NotContains(t, out, canary)
		assert.NotContains(t, strings.ToLower(out), "authorization")
		assert.NotContains(t, strings.ToLower(out), "cookie")
		lines := strings.Split(strings.TrimSpace(out), "\n")
		require.Len(t, lines, 3, "one line per attempt")
		url := "url=https://generativelanguage.googleapis.com/v1beta/models/m:generateContent?…"
		for i, want := range [][]string{
			{"level=WARN", `msg="llmretry attempt"`, "method=POST", url, "attempt=1", "status=503", "retry_in=1s"},
			{"level=WARN", "attempt=2", `error="Post \"https://generativelanguage.googleapis.com/v1beta/models/m:generateContent?…\": connection reset; retry with api_key=… token=…"`, "retry_in=2s"},
			{"level=INFO", "method=POST", url, "attempt=3", "status=200"},
		} {
			for _, field := range want {
				assert.Contains(t, lines[i], field, "line %d", i+1)
			}
			assert.Regexp(t, `attempt_id=[0-9a-f]{16}\b`, lines[i])
		}
		assert.NotContains(t, lines[2], "retry_in", "no retry follows the last attempt")
		assert.NotContains(t, out, "stop=", "nothing stopped: the last attempt answered")
	})
}

// The attempt after which no retry follows says why.
func TestLogAttemptsSaysWhyItStopped(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var buf syncBuffer
		prov := newProvider(fail(503))
		resp, err := post(t, mustNew(t, prov.mock, Policy{Waits: []time.Duration{time.Second}, OnAttempt: LogAttempts(textLogger(&buf))}), context.Background())
		require.NoError(t, err)
		resp.Body.Close()
		lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
		require.Len(t, lines, 2)
		assert.NotContains(t, lines[0], "stop=")
		assert.Contains(t, lines[1], `stop="retries spent"`)
	})
}

// Do's attempts have no request: no method or url, the error still
// scrubbed; a disabled level builds nothing; a nil logger is slog.Default.
func TestLogAttemptsForDoAndLevels(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var buf syncBuffer
		calls := 0
		_, err := Do(context.Background(), Policy{Waits: []time.Duration{time.Second}, OnAttempt: LogAttempts(textLogger(&buf))}, func(context.Context) (int, error) {
			calls++
			if calls == 1 {
				return 0, errors.New("fetch https://x.test/data?sig=SIG123&token=TOK456: 502")
			}
			return 1, nil
		})
		require.NoError(t, err)
		out := buf.String()
		assert.NotContains(t, out, "SIG123")
		assert.NotContains(t, out, "TOK456")
		// A value runs to a delimiter; the ":" after it goes too.
		assert.Contains(t, out, `error="fetch https://x.test/data?sig=…&token=… 502" retry_in=1s`)
		assert.Contains(t, out, "attempt=2")
		assert.NotContains(t, out, "method=")
		assert.NotContains(t, out, "url=")

		var quiet syncBuffer
		warnOnly := slog.New(slog.NewTextHandler(&quiet, &slog.HandlerOptions{Level: slog.LevelWarn}))
		log := LogAttempts(warnOnly)
		log(Attempt{ID: "0000000000000001", N: 1, Response: &http.Response{StatusCode: 200}})
		assert.Empty(t, quiet.String(), "a success is Info")
		log(Attempt{ID: "0000000000000002", N: 1, Response: &http.Response{StatusCode: 429}, RetryIn: time.Second})
		assert.Contains(t, quiet.String(), "status=429")
	})
}

func TestLogAttemptsNilLoggerIsDefault(t *testing.T) {
	var buf syncBuffer
	old := slog.Default()
	slog.SetDefault(textLogger(&buf))
	t.Cleanup(func() { slog.SetDefault(old) })
	LogAttempts(nil)(Attempt{ID: "00000000000000ff", N: 4, Err: errors.New("refused")})
	assert.Contains(t, buf.String(), `attempt_id=00000000000000ff attempt=4 error=refused`)
}

// Coordinated calls log their holds and probes, and still no credential:
// not in the key, not in a DownError's last failure.
func TestLogHoldsNeverLogsCredentials(t *testing.T) {
	const canary = "CANARY-7f3a9c"
	synctest.Test(t, func(t *testing.T) {
		p := newFlaky(step{err: errors.New(`Post "https://generativelanguage.googleapis.com/v1beta/models/m:generateContent?key=` + canary + `": connection refused`)},
			time.Second, window{0, 8 * time.Second})
		var buf syncBuffer
		logger := textLogger(&buf)
		rt, err := NewCoordinated(p, Policy{OnAttempt: LogAttempts(logger), OnHold: LogHolds(logger)}, Coordination{})
		require.NoError(t, err)
		send := func(deadline time.Duration) error {
			ctx, cancel := context.WithTimeout(context.Background(), deadline)
			defer cancel()
			req, err := http.NewRequestWithContext(ctx, http.MethodPost, "https://generativelanguage.googleapis.com/v1beta/models/m:generateContent?key="+canary, strings.NewReader(`{}`))
			require.NoError(t, err)
			req.Header.Set("X-Goog-Api-Key", canary)
			resp, err := rt.RoundTrip(req)
			if err == nil {
				resp.Body.Close()
			}
			return err
		}
		require.NoError(t, send(time.Hour))
		// The key went down at 0 s and came back at 8 s+; a call now
		// with less than the reserve left cannot be held at all.
		require.NoError(t, send(time.Hour), "the key is up again")
		out := buf.String()
		assert.NotContains(t, out, canary)
		assert.Contains(t, out, `msg="llmretry hold"`)
		assert.Regexp(t, `key=generativelanguage\.googleapis\.com#[0-9a-f]{8} reason="provider down" outcome=waiting`, out)
		assert.Contains(t, out, `outcome="sent as the probe" held=`)
		assert.Contains(t, out, "probe=true")
		assert.Contains(t, out, "held=true")

		// A DownError names the last failure by its kind only, never by
		// its text: here a nested client's error with the key in its URL.
		p2 := newFlaky(p.fault, time.Second, window{0, time.Hour})
		rt2, err := NewCoordinated(p2, Policy{Waits: []time.Duration{time.Second}, Reserve: time.Minute}, Coordination{})
		require.NoError(t, err)
		rt = rt2
		err = send(90 * time.Second)
		var down *DownError
		require.ErrorAs(t, err, &down)
		assert.NotContains(t, err.Error(), canary)
		assert.Contains(t, err.Error(), "last failure: connection failed")
		assert.NotContains(t, down.Last.Error(), "googleapis", "no URL in a shared fact")
	})
}
