package otelretry

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"testing"

	"github.com/llmretry/llmretry"
	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// memBase answers every request in memory with a 200 and a short JSON
// body, reading the request body as a server would, so that the benchmark
// measures the layers and not a network.
type memBase struct{}

func (memBase) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Body != nil {
		_, _ = io.Copy(io.Discard, req.Body)
		req.Body.Close()
	}
	return &http.Response{StatusCode: 200, Status: "200 OK", Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header: http.Header{}, Body: http.NoBody, Request: req}, nil
}

// benchURL is a real provider's: https on the default port.
const benchURL = "https://api.openai.com/v1/chat/completions"

var benchBody = []byte(`{"model":"gpt","messages":[{"role":"user","content":"hello"}]}`)

// benchRequest is a realistic model request: a JSON body and an API key.
func benchRequest() *http.Request {
	req, err := http.NewRequest(http.MethodPost, benchURL, bytes.NewReader(benchBody))
	if err != nil {
		panic(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer sk-bench-0123456789abcdefghijklmnopqrstuvwxyz")
	return req
}

// benchProviders are SDK providers that record everything and export
// nothing: every span is sampled and every measurement aggregated, as in
// production, with no exporter's cost in the figures.
func benchProviders() (*sdktrace.TracerProvider, *sdkmetric.MeterProvider) {
	return sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.AlwaysSample())),
		sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
}

// sendOnce sends one request that works the first time through rt, reads
// the answer to the end and closes it.
func sendOnce(tb testing.TB, rt http.RoundTripper) {
	resp, err := rt.RoundTrip(benchRequest())
	if err != nil {
		tb.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
}

// costLayers are the four stacks compared, built on one pair of providers.
func costLayers(tb testing.TB) []struct {
	name string
	rt   http.RoundTripper
} {
	tp, mp := benchProviders()
	plain, err := llmretry.New(memBase{}, llmretry.Policy{})
	if err != nil {
		tb.Fatal(err)
	}
	traced, err := New(memBase{}, llmretry.Policy{}, WithTracerProvider(tp), WithMeterProvider(mp))
	if err != nil {
		tb.Fatal(err)
	}
	return []struct {
		name string
		rt   http.RoundTripper
	}{
		{"bare", memBase{}},
		{"llmretry", plain},
		{"otelhttp", otelhttp.NewTransport(memBase{}, otelhttp.WithTracerProvider(tp), otelhttp.WithMeterProvider(mp))},
		{"otelretry", traced},
	}
}

// BenchmarkCost compares a request that works the first time through the
// bare base, llmretry.New, otelhttp alone and otelretry.New, in one run;
// then otelhttp and otelretry again inside a caller's span that each call
// starts and ends (where otelretry also sets the call's outcome).
func BenchmarkCost(b *testing.B) {
	layers := costLayers(b)
	for _, l := range layers {
		b.Run(l.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				sendOnce(b, l.rt)
			}
		})
	}
	tp, _ := benchProviders()
	tracer := tp.Tracer("bench")
	for _, l := range layers[2:] {
		b.Run(l.name+"-in-a-turn", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				sendInTurn(b, tracer, l.rt)
			}
		})
	}
}

// sendInTurn is sendOnce inside a caller's span ("turn") that it starts
// and ends.
func sendInTurn(tb testing.TB, tracer trace.Tracer, rt http.RoundTripper) {
	ctx, turn := tracer.Start(context.Background(), "turn")
	resp, err := rt.RoundTrip(benchRequest().WithContext(ctx))
	if err != nil {
		tb.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	turn.End()
}

// A request that works the first time costs at most 4 allocations more
// through otelretry.New than through otelhttp alone, with a realistic
// request to a real provider's URL (https, the default port: server.port
// is added to the span and the duration metric), with or without a
// caller's span (which gets the call's outcome). Allocation counts are
// exact except under the race detector, whose sync.Pool drops items at
// random: the test is skipped there.
func TestSuccessPathCost(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts are not exact under the race detector")
	}
	allocs := map[string]float64{}
	for _, l := range costLayers(t) {
		sendOnce(t, l.rt) // instruments' first measurements, cached sets
		allocs[l.name] = testing.AllocsPerRun(200, func() { sendOnce(t, l.rt) })
	}
	tp, _ := benchProviders()
	tracer := tp.Tracer("test")
	for _, l := range costLayers(t)[2:] {
		sendInTurn(t, tracer, l.rt)
		allocs[l.name+" in a turn"] = testing.AllocsPerRun(200, func() { sendInTurn(t, tracer, l.rt) })
	}
	t.Logf("allocs/op: %v", allocs)
	for _, turn := range []string{"", " in a turn"} {
		if extra := allocs["otelretry"+turn] - allocs["otelhttp"+turn]; extra > 4 {
			t.Errorf("otelretry%s costs %.0f allocations more than otelhttp alone on a first-try success; the target is at most 4", turn, extra)
		}
	}
}
