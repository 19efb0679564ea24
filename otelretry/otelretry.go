package otelretry

import (
	"context"
	"net/http"

	"github.com/llmretry/llmretry"
	"github.com/llmretry/llmretry/coordination"
	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"
)

// scope is the instrumentation scope of the meter and of the attributes
// this package records.
const scope = "github.com/llmretry/llmretry/otelretry"

// Option configures New and NewCoordinated. A nil Option is ignored.
type Option func(*config)

// config is what the options set.
type config struct {
	tp trace.TracerProvider
	mp metric.MeterProvider
}

// WithTracerProvider makes the attempt spans with tp. Without this option,
// or with a nil tp, they are made with the global TracerProvider, looked
// up (otel.GetTracerProvider) when the Transport is made. Wait and hold
// events go on the caller's own span, whatever its provider.
func WithTracerProvider(tp trace.TracerProvider) Option {
	return func(c *config) { c.tp = tp }
}

// WithMeterProvider records this package's metrics, and otelhttp's, with
// mp. Without this option, or with a nil mp, they are recorded with the
// global MeterProvider, looked up (otel.GetMeterProvider) when the
// Transport is made.
func WithMeterProvider(mp metric.MeterProvider) Option {
	return func(c *config) { c.mp = mp }
}

// Transport is an llmretry Transport, traced and measured: an
// http.RoundTripper that retries by its policy, as *llmretry.Transport
// does, and records each call's attempts (as spans and counts) and how
// the call ended (see the package documentation). Make it with New or
// NewCoordinated.
//
// The zero Transport sends as the zero llmretry.Transport does, and
// records nothing. A Transport is safe for concurrent use.
type Transport struct {
	rt  *llmretry.Transport
	tel *telemetry
}

// zero is what the zero Transport sends through.
var zero llmretry.Transport

// RoundTrip sends req through the llmretry Transport, and records how the
// call ended: llmretry.calls, llmretry.call.attempts and the outcome on
// the caller's span. What it returns is what llmretry's RoundTrip returns.
//
// A request sent while another llmretry call is retrying it (its context
// is an attempt's, see llmretry.AttemptFromContext) is passed through by
// llmretry, and is not a call of its own here either.
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	if t.rt == nil {
		return zero.RoundTrip(req)
	}
	if req == nil {
		return t.rt.RoundTrip(req)
	}
	if _, inner := llmretry.AttemptFromContext(req.Context()); inner {
		return t.rt.RoundTrip(req)
	}
	resp, err := t.rt.RoundTrip(req)
	t.tel.recordCall(req, resp, err)
	return resp, err
}

// CloseIdleConnections closes the base transport's idle connections, if
// it has such a method.
func (t *Transport) CloseIdleConnections() {
	if t.rt == nil {
		zero.CloseIdleConnections()
		return
	}
	t.rt.CloseIdleConnections()
}

// Retrying returns the llmretry Transport that t records: the one that
// llmretry.New or llmretry.NewCoordinated would have made, sending through
// otelhttp. A call sent through it directly has its attempts recorded,
// its waits and holds too, but not how it ended. It returns nil for the
// zero Transport.
func (t *Transport) Retrying() *llmretry.Transport { return t.rt }

// New returns a Transport that retries as llmretry.New(base, p) would and
// is traced and measured: the layers are this package's call record, then
// llmretry, then otelhttp (one CLIENT span per attempt), then base
// (http.DefaultTransport if nil). See the package documentation for what
// is recorded.
//
// p's own OnAttempt still runs, after this package has recorded the
// attempt. An invalid policy is an error, and no Transport is made. Like
// any llmretry Transport, the result is safe for concurrent use (p's
// OnAttempt must then be too).
func New(base http.RoundTripper, p llmretry.Policy, opts ...Option) (*Transport, error) {
	tel, rt, err := build(base, opts)
	if err != nil {
		return nil, err
	}
	p.OnAttempt = tel.onAttempt(p.OnAttempt)
	t, err := llmretry.New(rt, p)
	if err != nil {
		return nil, err // llmretry's, which names the bad field
	}
	return &Transport{rt: t, tel: tel}, nil
}

// NewCoordinated returns a Transport that retries as
// llmretry.NewCoordinated(base, p, c) would, traced and measured like
// New's; each coordinated hold is also an event on the caller's span and
// is counted by outcome, and each probe is marked.
//
// p's own OnAttempt and c's OnHold still run, after this package has
// recorded the attempt or the hold. An invalid policy or configuration is
// an error, and no Transport is made. The result is safe for concurrent
// use (p's and c's hooks must then be too).
func NewCoordinated(base http.RoundTripper, p llmretry.Policy, c coordination.Config, opts ...Option) (*Transport, error) {
	tel, rt, err := build(base, opts)
	if err != nil {
		return nil, err
	}
	p.OnAttempt = tel.onAttempt(p.OnAttempt)
	c.OnHold = tel.onHold(c.OnHold)
	t, err := llmretry.NewCoordinated(rt, p, c)
	if err != nil {
		return nil, err // llmretry's, which names the bad field
	}
	return &Transport{rt: t, tel: tel}, nil
}

// build resolves the options and returns the instruments and the round
// tripper that llmretry sends each attempt through: otelhttp over the
// attempt layer over base.
func build(base http.RoundTripper, opts []Option) (*telemetry, http.RoundTripper, error) {
	var cfg config
	for _, o := range opts {
		if o != nil {
			o(&cfg)
		}
	}
	if cfg.tp == nil {
		cfg.tp = otel.GetTracerProvider()
	}
	if cfg.mp == nil {
		cfg.mp = otel.GetMeterProvider()
	}
	if base == nil {
		base = http.DefaultTransport
	}
	tel, err := newTelemetry(cfg.mp.Meter(scope))
	if err != nil {
		return nil, nil, err
	}
	spans := otelhttp.NewTransport(&attemptTransport{base: base, tel: tel},
		otelhttp.WithTracerProvider(cfg.tp),
		otelhttp.WithMeterProvider(cfg.mp),
		otelhttp.WithSpanNameFormatter(spanName),
	)
	return tel, &instrumented{spans: spans, base: base}, nil
}

// instrumented is the round tripper under llmretry. It exists so that
// CloseIdleConnections reaches base: otelhttp's Transport has no such
// method, and llmretry's Transport calls only its own base's.
type instrumented struct {
	spans *otelhttp.Transport
	base  http.RoundTripper
}

// RoundTrip sends one attempt through otelhttp. otelhttp records the
// client labeler it finds on the context, and every attempt of a call
// shares the caller's context: when the caller (or an otelhttp Transport
// around this one) put a labeler there, the attempt gets a fresh one with
// its labels, so that one attempt's error.type and server.port never land
// on another attempt's measurement, nor on the caller's.
func (t *instrumented) RoundTrip(req *http.Request) (*http.Response, error) {
	if hasClientLabeler(req.Context()) {
		outer, _ := otelhttp.ClientLabelerFromContext(req.Context())
		own := new(otelhttp.Labeler)
		own.Add(outer.Get()...)
		req = req.WithContext(otelhttp.ContextWithClientLabeler(req.Context(), own))
	}
	return t.spans.RoundTrip(req)
}

// hasClientLabeler reports whether ctx carries an otelhttp client labeler,
// allocating nothing when it does not (the labeler otelhttp makes in its
// place does not escape).
func hasClientLabeler(ctx context.Context) bool {
	_, ok := otelhttp.ClientLabelerFromContext(ctx)
	return ok
}

// CloseIdleConnections closes base's idle connections, if it has such a
// method.
func (t *instrumented) CloseIdleConnections() {
	if c, ok := t.base.(interface{ CloseIdleConnections() }); ok {
		c.CloseIdleConnections()
	}
}
