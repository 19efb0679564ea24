package otelretry

import (
	"context"
	"errors"
	"fmt"
	"io"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/llmretry/llmretry"
	"github.com/llmretry/llmretry/coordination"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
)

// The attempts counter counts each attempt by status or error type and
// resend; the wait histogram has each wait, in seconds, by what it followed;
// otelhttp's own metrics go to the same MeterProvider.
func TestMetrics(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRig()
		p := newProvider(step{status: 503}, step{err: &opError{}}, step{status: 429}, step{status: 200})
		rt := r.transport(t, p, llmretry.Policy{Waits: []time.Duration{time.Second, 2 * time.Second, 4 * time.Second}})

		r.callInTurn(t, rt)

		rm := r.collect(t)
		attempts := findMetric(t, rm, metricAttempts)
		assert.Equal(t, "{attempt}", attempts.Unit)
		assert.Equal(t, map[string]int64{
			"http.response.status_code=503 llmretry.resend=false server.address=api.example.com": 1,
			"error.type=*otelretry.opError llmretry.resend=true server.address=api.example.com":  1,
			"http.response.status_code=429 llmretry.resend=true server.address=api.example.com":  1,
			"http.response.status_code=200 llmretry.resend=true server.address=api.example.com":  1,
		}, counts(t, attempts))

		waits := findMetric(t, rm, metricWaitDuration)
		assert.Equal(t, "s", waits.Unit)
		assert.Equal(t, map[string][2]float64{
			"http.response.status_code=503 server.address=api.example.com": {1, 1},
			"error.type=*otelretry.opError server.address=api.example.com": {1, 2},
			"http.response.status_code=429 server.address=api.example.com": {1, 4},
		}, histogram[float64](t, waits))

		duration := findMetric(t, rm, "http.client.request.duration")
		var n uint64
		for _, dp := range duration.Data.(metricdata.Histogram[float64]).DataPoints {
			n += dp.Count
		}
		assert.Equal(t, uint64(4), n, "otelhttp measured every attempt")

		// The error's wait event names its type, like error.type.
		turnSpan := r.spans.Ended()[len(r.spans.Ended())-1]
		reasons := []any{}
		for _, e := range events(turnSpan, eventWait) {
			reasons = append(reasons, eventAttrs(e)[keyReason])
		}
		assert.Equal(t, []any{"503", "*otelretry.opError", "429"}, reasons)

		// The failed connection's span is an error span, ended at once.
		spans := r.clientSpans()
		require.Len(t, spans, 4)
		assert.Equal(t, codes.Error, spans[1].Status().Code)
		et, _ := attr(spans[1].Attributes(), semconv.ErrorTypeKey)
		assert.Equal(t, "*otelretry.opError", et.AsString())
	})
}

// A coordinated Transport records each hold as an event on the caller's
// span and counts it by outcome when it ends; the user's OnHold still runs.
func TestCoordinatedHolds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRig()
		p := newProvider(step{status: 503}, step{status: 200})
		var mu sync.Mutex
		var seen []coordination.Hold
		rt, err := NewCoordinated(p, llmretry.Policy{
			Waits:   []time.Duration{time.Second},
			Reserve: time.Second,
		}, coordination.Config{
			OnHold: func(h coordination.Hold) {
				mu.Lock()
				defer mu.Unlock()
				seen = append(seen, h)
			},
		}, r.opts()...)
		require.NoError(t, err)

		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
		defer cancel()
		turns := make([]trace.Span, 2)
		call := func(i int) {
			ctx, turn := r.turn(ctx)
			turns[i] = turn
			defer turn.End()
			resp, err := rt.RoundTrip(post(t, ctx, chatURL))
			if assert.NoError(t, err) {
				assert.Equal(t, 200, resp.StatusCode)
				finish(t, resp)
			}
		}
		var wg sync.WaitGroup
		wg.Go(func() { call(0) })
		synctest.Wait() // the first call got its 503 and is held: the key is down
		wg.Go(func() { call(1) })
		wg.Wait()
		r.requireAllEnded(t)

		// Each call was held once, while the provider was down: one went
		// as the probe, the other was released when the probe came back.
		var outcomes []string
		var delayed []int64
		for i, turn := range turns {
			s := turn.(sdktrace.ReadOnlySpan)
			assert.Emptyf(t, events(s, eventWait), "call %d: a held retry adds no wait event", i+1)
			holds := events(s, eventHold)
			require.Lenf(t, holds, 1, "call %d", i+1)
			a := eventAttrs(holds[0])
			assert.Equal(t, "provider down", a[keyReason])
			assert.Equal(t, "api.example.com", a[keyKey])
			assert.Greater(t, a[keyDuration], 0.0)
			outcomes = append(outcomes, a[keyOutcome].(string))
			delayed = append(delayed, a[keyAttempt].(int64))
		}
		assert.ElementsMatch(t, []string{"sent as the probe", "released"}, outcomes)
		assert.ElementsMatch(t, []int64{1, 2}, delayed, "the attempt each hold delayed: the new call's first, the held call's retry")

		// The attempt sent as the probe, and only it, is marked on its span.
		var probes []int64
		for _, s := range r.clientSpans() {
			if v, ok := attr(s.Attributes(), keyProbe); ok {
				assert.True(t, v.AsBool())
				status, _ := attr(s.Attributes(), semconv.HTTPResponseStatusCodeKey)
				probes = append(probes, status.AsInt64())
			}
		}
		assert.Equal(t, []int64{200}, probes, "one probe, answered")

		rm := r.collect(t)
		probeAttempts := int64(0)
		for k, n := range counts(t, findMetric(t, rm, metricAttempts)) {
			if strings.Contains(k, "llmretry.probe=true") {
				probeAttempts += n
			}
		}
		assert.Equal(t, int64(1), probeAttempts, "the probe is marked on its llmretry.attempts point too")
		assert.Equal(t, map[string]int64{
			"llmretry.outcome=sent as the probe llmretry.reason=provider down server.address=api.example.com": 1,
			"llmretry.outcome=released llmretry.reason=provider down server.address=api.example.com":          1,
		}, counts(t, findMetric(t, rm, metricHolds)))
		hd := histogram[float64](t, findMetric(t, rm, metricHoldDuration))
		assert.Len(t, hd, 2)

		// The user's OnHold saw each hold begin and end, and the event
		// durations are the holds'.
		mu.Lock()
		defer mu.Unlock()
		require.Len(t, seen, 4)
		ended := map[string]coordination.Hold{}
		for _, h := range seen {
			if h.Outcome != coordination.HoldWaiting {
				ended[h.Outcome.String()] = h
			}
		}
		for _, turn := range turns {
			e := events(turn.(sdktrace.ReadOnlySpan), eventHold)[0]
			a := eventAttrs(e)
			h := ended[a[keyOutcome].(string)]
			assert.Equal(t, h.End.Sub(h.Start).Seconds(), a[keyDuration])
			assert.Equal(t, h.Start, e.Time, "the event is stamped when the hold began")
		}
	})
}

// A hold for pacing (a response said the key's published rate limit is
// spent) is its own reason on the hold event and the holds counter.
func TestPacedHolds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRig()
		spent := map[string]string{"X-Ratelimit-Limit-Requests": "10", "X-Ratelimit-Remaining-Requests": "0", "X-Ratelimit-Reset-Requests": "10s"}
		p := newProvider(step{status: 200, header: spent}, step{status: 200})
		rt, err := NewCoordinated(p, llmretry.Policy{}, coordination.Config{}, r.opts()...)
		require.NoError(t, err)
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
		defer cancel()
		for range 2 {
			ctx, turn := r.turn(ctx)
			resp, err := rt.RoundTrip(post(t, ctx, chatURL))
			require.NoError(t, err)
			finish(t, resp)
			turn.End()
		}
		r.requireAllEnded(t)
		rm := r.collect(t)
		assert.Equal(t, map[string]int64{
			"llmretry.outcome=released llmretry.reason=paced under a rate limit server.address=api.example.com": 1,
		}, counts(t, findMetric(t, rm, metricHolds)), "the second call waited its turn: one request back a second")
	})
}

// Every attribute this package names follows OpenTelemetry's naming
// rules: lowercase snake_case words in dot-separated namespaces, under
// llmretry, and no name is also a namespace of another (so no
// llmretry.continued beside llmretry.continued.from).
func TestAttributeNames(t *testing.T) {
	keys := []attribute.Key{keyReason, keyDuration, keyAttempt, keyOutcome, keyKey, keyResend, keyProbe,
		keyRoute, keyAttempts, keyContinued, keyContinuedFrom, keyEvent}
	word := regexp.MustCompile(`^[a-z][a-z0-9]*(_[a-z0-9]+)*$`)
	names := map[string]bool{}
	for _, k := range keys {
		name := string(k)
		assert.Falsef(t, names[name], "%s named twice", name)
		names[name] = true
		parts := strings.Split(name, ".")
		assert.Equal(t, "llmretry", parts[0], name)
		for _, w := range parts {
			assert.Regexp(t, word, w, name)
		}
	}
	for a := range names {
		for b := range names {
			assert.Falsef(t, strings.HasPrefix(b, a+"."), "%s is an attribute and a namespace of %s", a, b)
		}
	}
}

// An attempt whose 200 stream opened with an error event carries
// llmretry.event on its span and its llmretry.attempts point; a
// continuation of a cut stream carries llmretry.continued.strategy on
// both and llmretry.continued.from (the bytes delivered before) on its
// span only. The attempt that is neither carries none of them. Each
// attempt is counted once, whether its record (the Transport's policy) or
// its body's end (a policy of the request's own) counts it.
func TestStreamAttempts(t *testing.T) {
	retry := llmretry.Policy{RetryStreams: true, Waits: []time.Duration{time.Second}}
	cont := llmretry.Policy{RetryStreams: true, ContinueStreams: true, Waits: []time.Duration{time.Second}}
	for _, c := range []struct {
		name    string
		url     string
		script  []step
		policy  llmretry.Policy
		own     bool     // the request carries the policy (llmretry.WithPolicy): no record reaches this package
		text    string   // what the caller reads
		spans   []string // each span's llmretry attributes, rendered
		counted map[string]int64
	}{
		{
			name: "opened with an error event", url: anthropicURL, policy: retry,
			script: []step{sse(overloaded), sse(messages("Hi"))},
			text:   messages("Hi"),
			spans:  []string{"llmretry.event=overloaded_error", ""},
			counted: map[string]int64{
				"http.response.status_code=200 llmretry.event=overloaded_error llmretry.resend=false server.address=api.anthropic.com": 1,
				"http.response.status_code=200 llmretry.resend=true server.address=api.anthropic.com":                                  1,
			},
		},
		{
			name: "opened with an error event, under a policy of its own", url: anthropicURL, policy: retry, own: true,
			script: []step{sse(overloaded), sse(messages("Hi"))},
			text:   messages("Hi"),
			spans:  []string{"", ""},
			counted: map[string]int64{
				"http.response.status_code=200 llmretry.resend=false server.address=api.anthropic.com": 1,
				"http.response.status_code=200 llmretry.resend=true server.address=api.anthropic.com":  1,
			},
		},
		{
			name: "continued by regeneration", url: openaiURL, policy: cont,
			script: []step{sse(chat(false, "Hello", " wor")), sse(chat(true, "Hel", "lo world!"))},
			text:   "Hello world!",
			spans:  []string{"", "llmretry.continued.from=9 llmretry.continued.strategy=regenerate"},
			counted: map[string]int64{
				"http.response.status_code=200 llmretry.resend=false server.address=api.openai.com":                                       1,
				"http.response.status_code=200 llmretry.continued.strategy=regenerate llmretry.resend=true server.address=api.openai.com": 1,
			},
		},
		{
			name: "a stream that opened well", url: openaiURL, policy: retry,
			script:  []step{sse(chat(true, "Hello"))},
			text:    "Hello",
			spans:   []string{""},
			counted: map[string]int64{"http.response.status_code=200 llmretry.resend=false server.address=api.openai.com": 1},
		},
	} {
		for _, whole := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s, io.EOF with the last bytes %v", c.name, whole), func(t *testing.T) {
				synctest.Test(t, func(t *testing.T) {
					script := slices.Clone(c.script)
					for i := range script {
						script[i].whole = whole
					}
					r := newRig()
					p := c.policy
					ctx := t.Context()
					if c.own {
						ctx = llmretry.WithPolicy(ctx, p)
						p = llmretry.Policy{}
					}
					rt := r.transport(t, newProvider(script...), p)
					req := postBody(t, ctx, c.url, streamBody)
					resp, err := rt.RoundTrip(req)
					require.NoError(t, err)
					got, err := io.ReadAll(resp.Body)
					require.NoError(t, err)
					require.NoError(t, resp.Body.Close())
					if c.url == openaiURL {
						assert.Equal(t, c.text, chatText(t, string(got)))
					} else {
						assert.Equal(t, c.text, string(got))
					}
					r.requireAllEnded(t)

					var spans []string
					for _, s := range r.clientSpans() {
						spans = append(spans, render(attribute.NewSet(ours(s.Attributes(), keyEvent, keyContinued, keyContinuedFrom)...)))
					}
					assert.Equal(t, c.spans, spans)
					assert.Equal(t, c.counted, counts(t, findMetric(t, r.collect(t), metricAttempts)))
				})
			})
		}
	}
}

// failingMeter fails to create the instrument named fail.
type failingMeter struct {
	noop.Meter
	fail string
}

func (m failingMeter) Int64Counter(name string, opts ...metric.Int64CounterOption) (metric.Int64Counter, error) {
	return refuse(m.fail, name, m.Meter.Int64Counter, opts)
}

func (m failingMeter) Float64Histogram(name string, opts ...metric.Float64HistogramOption) (metric.Float64Histogram, error) {
	return refuse(m.fail, name, m.Meter.Float64Histogram, opts)
}

func (m failingMeter) Int64Histogram(name string, opts ...metric.Int64HistogramOption) (metric.Int64Histogram, error) {
	return refuse(m.fail, name, m.Meter.Int64Histogram, opts)
}

// refuse fails if name is fail, and creates the instrument otherwise.
func refuse[I, O any](fail, name string, create func(string, ...O) (I, error), opts []O) (I, error) {
	if name == fail {
		var i I
		return i, errors.New("refused")
	}
	return create(name, opts...)
}

// An instrument the meter refuses makes no telemetry, and the error names
// it.
func TestInstrumentRefused(t *testing.T) {
	for _, name := range []string{metricAttempts, metricWaitDuration, metricHolds, metricHoldDuration, metricCalls, metricCallAttempts} {
		tel, err := newTelemetry(failingMeter{fail: name})
		assert.Nil(t, tel, name)
		assert.EqualError(t, err, "otelretry: creating "+name+": refused")
	}
	tel, err := newTelemetry(failingMeter{})
	require.NoError(t, err)
	assert.NotNil(t, tel.callAttempts)
}

// A stream cut after RoundTrip returned, and not continued, fails the
// caller's Read with ErrStreamCut; the call stays counted as it ended at
// RoundTrip (answered), and the cut is not a second count.
func TestStreamCutAfterTheAnswer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRig()
		rt := r.transport(t, newProvider(sse(chat(false, "Hello"))), llmretry.Policy{RetryStreams: true})
		resp, err := rt.RoundTrip(postBody(t, t.Context(), openaiURL, streamBody))
		require.NoError(t, err)
		_, err = io.ReadAll(resp.Body)
		require.ErrorIs(t, err, llmretry.ErrStreamCut)
		assert.Equal(t, "stream_cut", reasonName(err))
		require.NoError(t, resp.Body.Close())
		r.requireAllEnded(t)
		assert.Equal(t, map[string]int64{
			"llmretry.outcome=answered_first_time server.address=api.openai.com": 1,
		}, counts(t, findMetric(t, r.collect(t), metricCalls)))
	})
}
