package otelretry

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
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
	t.attempts = counter(m, &err, metricAttempts, "{attempt}",
		"Attempts sent by llmretry: the first try and every resend.")
	t.waits = secondsHistogram(m, &err, metricWaitDuration,
		"Waits llmretry chose before a retry, on the call's own schedule or the server's.")
	t.holds = counter(m, &err, metricHolds, "{hold}",
		"Coordinated holds that ended, by outcome.")
	t.holdDuration = secondsHistogram(m, &err, metricHoldDuration,
		"How long coordinated holds lasted, by outcome.")
	t.calls = counter(m, &err, metricCalls, "{call}",
		"Calls through llmretry, by how they ended: answered the first time, answered after retries, or given up, and why.")
	t.callAttempts = instrument[metric.Int64HistogramOption](&err, metricCallAttempts, m.Int64Histogram,
		metric.WithDescription("Attempts each call made, by how it ended."),
		metric.WithUnit("{attempt}"),
		metric.WithExplicitBucketBoundaries(attemptBuckets...))
	if err != nil {
		return nil, err
	}
	return &t, nil
}

// counter creates the counter name on m, of unit, described by desc, as
// instrument does.
func counter(m metric.Meter, err *error, name, unit, desc string) metric.Int64Counter {
	return instrument[metric.Int64CounterOption](err, name, m.Int64Counter,
		metric.WithDescription(desc), metric.WithUnit(unit))
}

// secondsHistogram creates the histogram name on m, of waits or holds in
// seconds (waitBuckets), described by desc, as instrument does.
func secondsHistogram(m metric.Meter, err *error, name, desc string) metric.Float64Histogram {
	return instrument[metric.Float64HistogramOption](err, name, m.Float64Histogram,
		metric.WithDescription(desc), metric.WithUnit("s"), metric.WithExplicitBucketBoundaries(waitBuckets...))
}

// instrument creates the instrument name with create and opts (of create's
// option type O), unless *err says an earlier one failed; a failure is
// left in *err, naming name.
func instrument[O, I any](err *error, name string, create func(string, ...O) (I, error), opts ...O) I {
	var i I
	if *err != nil {
		return i
	}
	i, e := create(name, opts...)
	if e != nil {
		*err = fmt.Errorf("otelretry: creating %s: %w", name, e)
	}
	return i
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

// opensStream reports whether resp is a 2xx stream of events
// (text/event-stream): one whose opening llmretry may read ahead, and find
// an error event in.
func opensStream(resp *http.Response) bool {
	if resp == nil || resp.StatusCode < 200 || resp.StatusCode > 299 || resp.Body == nil || resp.Body == http.NoBody {
		return false
	}
	ct, _, _ := strings.Cut(resp.Header.Get("Content-Type"), ";")
	return strings.EqualFold(strings.TrimSpace(ct), "text/event-stream")
}

// pendingKey is the context key of a response's pending count, in the
// context of its Request.
type pendingKey struct{}

// pending is an attempt whose answer is a 2xx stream, not yet counted in
// llmretry.attempts: its point carries llmretry.event when the stream
// opened with an error event, which is known only once llmretry has read
// its opening. It is counted once, by whichever comes first: the attempt's
// record (onAttempt, with its Event), or the end or close of its body (a
// request with a policy of its own, whose OnAttempt is not this
// package's). It is safe for concurrent use.
type pending struct {
	tel  *telemetry
	ctx  context.Context
	req  *http.Request
	code int
	f    facts
	done atomic.Bool
}

// count counts the attempt, with event for llmretry.event ("" none), if
// it has not been counted.
func (p *pending) count(event string) {
	if !p.done.CompareAndSwap(false, true) {
		return
	}
	f := p.f
	f.event = event
	p.tel.countStatus(p.ctx, p.req, p.code, f)
}

// pend defers the count of the attempt that req sent and resp answered, a
// stream (opensStream), described by f: resp's body counts it when it
// ends or is closed, and its Request's context carries it to onAttempt
// (see recordStream). It returns resp.
func (t *telemetry) pend(ctx context.Context, req *http.Request, resp *http.Response, f facts) *http.Response {
	p := &pending{tel: t, ctx: ctx, req: req, code: resp.StatusCode, f: f}
	resp.Body = &pendingBody{ReadCloser: resp.Body, p: p}
	r := resp.Request
	resp.Request = r.WithContext(context.WithValue(r.Context(), pendingKey{}, p))
	return resp
}

// pendingBody is the body of a pending attempt's stream. It counts the
// attempt when the stream ends or is closed, if its record has not; and it
// holds back an io.EOF that comes with data until the next Read, so that
// the attempt's span, which otelhttp ends at io.EOF, is still open when
// the record, right after llmretry has read the stream's opening, sets
// llmretry.event on it.
type pendingBody struct {
	io.ReadCloser
	p *pending
}

// Read reads the stream; see pendingBody.
func (b *pendingBody) Read(buf []byte) (int, error) {
	n, err := b.ReadCloser.Read(buf)
	if err == io.EOF {
		if n > 0 {
			return n, nil // the next Read returns it
		}
		b.p.count("")
	}
	return n, err
}

// Close counts the attempt, if it has not been, and closes the stream.
func (b *pendingBody) Close() error {
	b.p.count("")
	return b.ReadCloser.Close()
}

// recordStream counts a's attempt, if its answer is a pending stream,
// with the error event it opened with (a.Event), and sets that event on
// the attempt's span as llmretry.event.
func (t *telemetry) recordStream(a llmretry.Attempt) {
	if a.Response == nil || a.Response.Request == nil {
		return
	}
	ctx := a.Response.Request.Context()
	p, ok := ctx.Value(pendingKey{}).(*pending)
	if !ok {
		return
	}
	p.count(a.Event)
	if a.Event == "" {
		return
	}
	if span := trace.SpanFromContext(ctx); span.IsRecording() {
		span.SetAttributes(keyEvent.String(a.Event))
	}
}
