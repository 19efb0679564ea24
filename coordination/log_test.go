package coordination_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/llmretry/llmretry"
	"github.com/llmretry/llmretry/coordination"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// roundTripFunc adapts a function to an http.RoundTripper.
type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// outage is a provider that fails every request with err at once until
// its start plus d, then answers 200 a second after each request.
func outage(start time.Time, d time.Duration, err error) roundTripFunc {
	return func(req *http.Request) (*http.Response, error) {
		if time.Since(start) < d {
			return nil, err
		}
		time.Sleep(time.Second)
		return &http.Response{StatusCode: 200, Status: "200 OK", Header: http.Header{}, Body: io.NopCloser(strings.NewReader(`{}`)), Request: req}, nil
	}
}

// Each record is one line with the message "llmretry hold" and its
// fields, at Info, or at Warn when the call gave up; nothing is written
// at a level the logger does not log, and a nil logger is slog.Default().
func TestLogHolds(t *testing.T) {
	req, err := http.NewRequest(http.MethodPost, "https://api.example.com/v1/chat?key=SECRET", nil)
	require.NoError(t, err)
	start := time.Date(2026, 12, 1, 7, 0, 0, 0, time.UTC)
	h := coordination.Hold{Request: req, N: 2, Key: "api.example.com#0badf00d", Reason: coordination.HoldServerWait, Start: start}
	noTime := func(_ []string, a slog.Attr) slog.Attr {
		if a.Key == slog.TimeKey {
			return slog.Attr{}
		}
		return a
	}
	var buf bytes.Buffer
	log := coordination.LogHolds(slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{ReplaceAttr: noTime})))
	log(h)
	h.End, h.Outcome = start.Add(2*time.Second), coordination.HoldReleased
	log(h)
	h.Outcome = coordination.HoldGaveUp
	log(h)
	log(coordination.Hold{Key: "x.test", Reason: coordination.HoldDown})
	assert.Equal(t, `level=INFO msg="llmretry hold" method=POST url=https://api.example.com/v1/chat?… key=api.example.com#0badf00d reason="server wait" outcome=waiting
level=INFO msg="llmretry hold" method=POST url=https://api.example.com/v1/chat?… key=api.example.com#0badf00d reason="server wait" outcome=released held=2s
level=WARN msg="llmretry hold" method=POST url=https://api.example.com/v1/chat?… key=api.example.com#0badf00d reason="server wait" outcome="gave up" held=2s
level=INFO msg="llmretry hold" key=x.test reason="provider down" outcome=waiting
`, buf.String())

	buf.Reset()
	coordination.LogHolds(slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelWarn})))(coordination.Hold{Outcome: coordination.HoldReleased})
	assert.Empty(t, buf.String(), "below the logger's level")

	old := slog.Default()
	slog.SetDefault(slog.New(slog.NewTextHandler(&buf, nil)))
	t.Cleanup(func() { slog.SetDefault(old) })
	coordination.LogHolds(nil)(coordination.Hold{Key: "default.test"})
	assert.Contains(t, buf.String(), "key=default.test")
}

// Coordinated calls log their holds and probes, and still no credential:
// not in the key, not in a HeldError's last failure. (The calls are made
// one after the other, so the log is written from one goroutine at a
// time.)
func TestLogHoldsNeverLogsCredentials(t *testing.T) {
	const canary = "CANARY-7f3a9c"
	synctest.Test(t, func(t *testing.T) {
		fault := errors.New(`Post "https://generativelanguage.googleapis.com/v1beta/models/m:generateContent?key=` + canary + `": connection refused`)
		var buf bytes.Buffer
		logger := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
		rt, err := llmretry.NewCoordinated(outage(time.Now(), 8*time.Second, fault), llmretry.Policy{OnAttempt: llmretry.LogAttempts(logger)}, coordination.Config{OnHold: coordination.LogHolds(logger)})
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
		// The key went down at 0 s and came back at 8 s+.
		require.NoError(t, send(time.Hour), "the key is up again")
		out := buf.String()
		assert.NotContains(t, out, canary)
		assert.Contains(t, out, `msg="llmretry hold"`)
		assert.Regexp(t, `key=generativelanguage\.googleapis\.com#[0-9a-f]{8} reason="provider down" outcome=waiting`, out)
		assert.Contains(t, out, `outcome="sent as the probe" held=`)
		assert.Contains(t, out, "probe=true")
		assert.Contains(t, out, "held=true")

		// A HeldError names the last failure by its kind only, never by
		// its text: here a nested client's error with the key in its URL.
		rt, err = llmretry.NewCoordinated(outage(time.Now(), time.Hour, fault), llmretry.Policy{Waits: []time.Duration{time.Second}, Reserve: time.Minute}, coordination.Config{})
		require.NoError(t, err)
		err = send(90 * time.Second)
		var held *coordination.HeldError
		require.ErrorAs(t, err, &held)
		assert.NotContains(t, err.Error(), canary)
		assert.Contains(t, err.Error(), "last failure: connection failed")
		assert.NotContains(t, held.Last.Error(), "googleapis", "no URL in a shared fact")
	})
}
