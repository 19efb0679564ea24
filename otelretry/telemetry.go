package otelretry

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/llmretry/llmretry"
	"github.com/llmretry/llmretry/coordination"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
)

// Names of the events, instruments and attributes this package records
// (see the package documentation).
const (
	eventWait = "llmretry.wait"
	eventHold = "llmretry.hold"
	eventMove = "llmretry.move"

	metricAttempts     = "llmretry.attempts"
	metricWaitDuration = "llmretry.wait.duration"
	metricHolds        = "llmretry.holds"
	metricHoldDuration = "llmretry.hold.duration"
	metricCalls        = "llmretry.calls"
	metricCallAttempts = "llmretry.call.attempts"

	keyReason   = attribute.Key("llmretry.reason")
	keyDuration = attribute.Key("llmretry.duration")
	keyAttempt  = attribute.Key("llmretry.attempt")
	keyOutcome  = attribute.Key("llmretry.outcome")
	keyKey      = attribute.Key("llmretry.key")
	keyResend   = attribute.Key("llmretry.resend")
	keyProbe    = attribute.Key("llmretry.probe")
	keyRoute    = attribute.Key("llmretry.route")
	keyAttempts = attribute.Key("llmretry.attempts")

	keyContinued     = attribute.Key("llmretry.continued.strategy")
	keyContinuedFrom = attribute.Key("llmretry.continued.from")
	keyEvent         = attribute.Key("llmretry.event")
)

// waitBuckets are the histogram boundaries for waits and holds, in
// seconds: from the sub-second waits of a jittered backoff to the
// five-minute server waits llmretry honours by default.
var waitBuckets = []float64{0.1, 0.25, 0.5, 1, 2.5, 5, 10, 15, 30, 45, 60, 120, 180, 240, 300, 600}

// attemptBuckets are the histogram boundaries for the attempts a call
// made: every count up to the default schedule's 7, then coarser.
var attemptBuckets = []float64{0, 1, 2, 3, 4, 5, 6, 7, 10, 15, 20, 30, 50}

// telemetry holds one Transport's instruments, and the attribute sets of
// its usual measurements (see optionCache). Instruments are safe for
// concurrent use, and so is telemetry.
type telemetry struct {
	attempts     metric.Int64Counter
	waits        metric.Float64Histogram
	holds        metric.Int64Counter
	holdDuration metric.Float64Histogram
	calls        metric.Int64Counter
	callAttempts metric.Int64Histogram
	sets         optionCache
}

// newTelemetry creates the instruments on m.
func newTelemetry(m metric.Meter) (*telemetry, error) {
	var t telemetry
	var err error
	if t.attempts, err = m.Int64Counter(metricAttempts,
		metric.WithDescription("Attempts sent by llmretry: the first try and every resend."),
		metric.WithUnit("{attempt}")); err != nil {
		return nil, fmt.Errorf("otelretry: creating %s: %w", metricAttempts, err)
	}
	if t.waits, err = m.Float64Histogram(metricWaitDuration,
		metric.WithDescription("Waits llmretry chose before a retry, on the call's own schedule or the server's."),
		metric.WithUnit("s"),
		metric.WithExplicitBucketBoundaries(waitBuckets...)); err != nil {
		return nil, fmt.Errorf("otelretry: creating %s: %w", metricWaitDuration, err)
	}
	if t.holds, err = m.Int64Counter(metricHolds,
		metric.WithDescription("Coordinated holds that ended, by outcome."),
		metric.WithUnit("{hold}")); err != nil {
		return nil, fmt.Errorf("otelretry: creating %s: %w", metricHolds, err)
	}
	if t.holdDuration, err = m.Float64Histogram(metricHoldDuration,
		metric.WithDescription("How long coordinated holds lasted, by outcome."),
		metric.WithUnit("s"),
		metric.WithExplicitBucketBoundaries(waitBuckets...)); err != nil {
		return nil, fmt.Errorf("otelretry: creating %s: %w", metricHoldDuration, err)
	}
	if t.calls, err = m.Int64Counter(metricCalls,
		metric.WithDescription("Calls through llmretry, by how they ended: answered the first time, answered after retries, or given up, and why."),
		metric.WithUnit("{call}")); err != nil {
		return nil, fmt.Errorf("otelretry: creating %s: %w", metricCalls, err)
	}
	if t.callAttempts, err = m.Int64Histogram(metricCallAttempts,
		metric.WithDescription("Attempts each call made, by how it ended."),
		metric.WithUnit("{attempt}"),
		metric.WithExplicitBucketBoundaries(attemptBuckets...)); err != nil {
		return nil, fmt.Errorf("otelretry: creating %s: %w", metricCallAttempts, err)
	}
	return &t, nil
}

// onAttempt returns a Policy.OnAttempt that records a's wait, if any, and
// then calls user (if not nil).
//
// Ours runs first: it is quick and never blocks, so the event is stamped
// when the attempt ended even if user is slow, and it is recorded even if
// user panics.
func (t *telemetry) onAttempt(user func(llmretry.Attempt)) func(llmretry.Attempt) {
	return func(a llmretry.Attempt) {
		t.recordStream(a)
		t.recordWait(a)
		t.recordMove(a)
		if user != nil {
			user(a)
		}
	}
}

// onHold returns a coordination.Config.OnHold that records h once it has
// ended, and then calls user (if not nil), for the same reasons as
// onAttempt.
func (t *telemetry) onHold(user func(coordination.Hold)) func(coordination.Hold) {
	return func(h coordination.Hold) {
		if h.Outcome != coordination.HoldWaiting {
			t.recordHold(h)
		}
		if user != nil {
			user(h)
		}
	}
}

// recordWait adds a wait event to the caller's span and the wait to the
// histogram, if a wait follows a. An attempt whose retry is Held waits in
// a hold instead, which recordHold records.
func (t *telemetry) recordWait(a llmretry.Attempt) {
	if a.RetryIn <= 0 || a.Held || a.Request == nil {
		return
	}
	ctx := a.Request.Context()
	reason, result := outcome(a.Response, a.Err)
	secs := a.RetryIn.Seconds()
	if span := trace.SpanFromContext(ctx); span.IsRecording() {
		span.AddEvent(eventWait, trace.WithAttributes(
			keyReason.String(reason),
			keyDuration.Float64(secs),
			keyAttempt.Int(a.N),
		))
	}
	t.waits.Record(ctx, secs, metric.WithAttributes(serverAddress(a.Request), result))
}

// recordMove adds a move event to the caller's span when the call moved
// to another route after a (see llmretry.Policy.Fallback and LongContext):
// why (llmretry.reason: Attempt.Moved), after which attempt, and from which
// route.
func (t *telemetry) recordMove(a llmretry.Attempt) {
	if a.Moved == "" || a.Request == nil {
		return
	}
	if span := trace.SpanFromContext(a.Request.Context()); span.IsRecording() {
		span.AddEvent(eventMove, trace.WithAttributes(
			keyReason.String(a.Moved),
			keyAttempt.Int(a.N),
			keyRoute.Int(a.Route),
		))
	}
}

// recordHold adds a hold event to the caller's span, stamped when the hold
// began (so that, like a wait's, it marks the start of the pause), and
// counts the hold and its duration.
func (t *telemetry) recordHold(h coordination.Hold) {
	ctx := context.Background()
	if h.Request != nil {
		ctx = h.Request.Context()
	}
	secs := h.End.Sub(h.Start).Seconds()
	if span := trace.SpanFromContext(ctx); span.IsRecording() {
		span.AddEvent(eventHold, trace.WithTimestamp(h.Start), trace.WithAttributes(
			keyReason.String(h.Reason.String()),
			keyDuration.Float64(secs),
			keyOutcome.String(h.Outcome.String()),
			keyKey.String(h.Key),
			keyAttempt.Int(h.N),
		))
	}
	attrs := metric.WithAttributes(
		serverAddress(h.Request),
		keyOutcome.String(h.Outcome.String()),
		keyReason.String(h.Reason.String()),
	)
	t.holds.Add(ctx, 1, attrs)
	t.holdDuration.Record(ctx, secs, attrs)
}

// outcome names an attempt's result: the reason text for an event (the
// status code, or the error's type) and the matching attribute,
// http.response.status_code or error.type.
func outcome(resp *http.Response, err error) (string, attribute.KeyValue) {
	if err != nil || resp == nil {
		et := semconv.ErrorType(err)
		return et.Value.AsString(), et
	}
	return strconv.Itoa(resp.StatusCode), semconv.HTTPResponseStatusCode(resp.StatusCode)
}

// facts are what an attempt's llmretry.attempts point and span say of
// it beside its server and result.
type facts struct {
	resend    bool   // llmretry.resend: not the first try
	probe     bool   // llmretry.probe, present only when true
	route     int    // llmretry.route, present only for a fallback (llmretry.Policy.Fallback)
	continued string // llmretry.continued.strategy, present only for a continuation
	event     string // llmretry.event, present only for a stream that opened with an error event
}

// append appends f's attributes to kvs.
func (f facts) append(kvs []attribute.KeyValue) []attribute.KeyValue {
	kvs = append(kvs, keyResend.Bool(f.resend))
	if f.probe {
		kvs = append(kvs, keyProbe.Bool(true))
	}
	if f.route > 0 {
		kvs = append(kvs, keyRoute.Int(f.route))
	}
	if f.continued != "" {
		kvs = append(kvs, keyContinued.String(f.continued))
	}
	if f.event != "" {
		kvs = append(kvs, keyEvent.String(f.event))
	}
	return kvs
}

// countAttempt counts one attempt sent to req's server, by its result
// (resp or err) and f.
func (t *telemetry) countAttempt(ctx context.Context, req *http.Request, resp *http.Response, err error, f facts) {
	if err != nil || resp == nil {
		// Error types are many and rare: their sets are not kept.
		_, result := outcome(resp, err)
		t.attempts.Add(ctx, 1, metric.WithAttributes(f.append([]attribute.KeyValue{serverAddress(req), result})...))
		return
	}
	t.countStatus(ctx, req, resp.StatusCode, f)
}

// countStatus counts one attempt sent to req's server and answered with
// status code, by f.
func (t *telemetry) countStatus(ctx context.Context, req *http.Request, code int, f facts) {
	t.attempts.Add(ctx, 1, t.sets.get(setKey{kind: setAttempt, host: host(req), code: code, facts: f}).add...)
}

// host is req's URL's host without the port.
func host(req *http.Request) string {
	if req == nil || req.URL == nil {
		return ""
	}
	return req.URL.Hostname()
}

// serverAddress is the server.address attribute of req: its URL's host
// without the port.
func serverAddress(req *http.Request) attribute.KeyValue {
	if req == nil || req.URL == nil {
		return semconv.ServerAddress("")
	}
	return semconv.ServerAddress(req.URL.Hostname())
}

// setKind says which measurement a cached attribute set is for.
type setKind uint8

const (
	setAttempt      setKind = iota // llmretry.attempts: host, status code, facts
	setCall                        // llmretry.calls: host, outcome, reason
	setCallAttempts                // llmretry.call.attempts: host, outcome
)

// setKey names one cached attribute set.
type setKey struct {
	kind   setKind
	host   string
	code   int    // setAttempt: the status code
	facts  facts  // setAttempt: resend, probe, route, continuation, event
	what   string // setCall, setCallAttempts: the outcome
	reason string // setCall: the reason of a give-up
}

// attributes are the attributes k names.
func (k setKey) attributes() []attribute.KeyValue {
	addr := semconv.ServerAddress(k.host)
	switch k.kind {
	case setAttempt:
		return k.facts.append([]attribute.KeyValue{addr, semconv.HTTPResponseStatusCode(k.code)})
	case setCall:
		if k.reason != "" {
			return []attribute.KeyValue{addr, keyOutcome.String(k.what), keyReason.String(k.reason)}
		}
		return []attribute.KeyValue{addr, keyOutcome.String(k.what)}
	}
	return []attribute.KeyValue{addr, keyOutcome.String(k.what)}
}

// options are a cached attribute set as the options an instrument takes,
// in slices, so that passing them allocates nothing.
type options struct {
	add []metric.AddOption
	rec []metric.RecordOption
}

// maxSets bounds the sets an optionCache keeps: a few hosts times the
// statuses and outcomes they see. Past it, sets are built per measurement.
const maxSets = 1024

// optionCache keeps the attribute sets of the usual measurements, so that
// a request that works the first time builds none. Reads take no lock: the
// map is replaced, never changed, when a set is added. The zero
// optionCache is empty and ready; it is safe for concurrent use.
type optionCache struct {
	mu sync.Mutex // serializes additions
	m  atomic.Pointer[map[setKey]options]
}

// get returns the options of k's attributes, from the cache or built.
func (c *optionCache) get(k setKey) options {
	if m := c.m.Load(); m != nil {
		if o, ok := (*m)[k]; ok {
			return o
		}
	}
	set := metric.WithAttributeSet(attribute.NewSet(k.attributes()...))
	o := options{add: []metric.AddOption{set}, rec: []metric.RecordOption{set}}
	c.mu.Lock()
	defer c.mu.Unlock()
	old := c.m.Load()
	if old != nil && len(*old) >= maxSets {
		return o
	}
	m := make(map[setKey]options, 1+lenOf(old))
	if old != nil {
		for k, v := range *old {
			m[k] = v
		}
	}
	m[k] = o
	c.m.Store(&m)
	return o
}

// lenOf is the length of *m, 0 for nil.
func lenOf(m *map[setKey]options) int {
	if m == nil {
		return 0
	}
	return len(*m)
}
