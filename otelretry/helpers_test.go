package otelretry

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/llmretry/llmretry"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
)

// step is one scripted reply of the in-memory provider: an error, or a
// status with a body.
type step struct {
	status int
	err    error
	leak   bool              // fail with an error that quotes the URL and the Authorization header
	header map[string]string // response headers beside Content-Type
	body   string            // the response body; "" for {"status":…}
	whole  bool              // the body's last bytes come with io.EOF (as a net/http body of known length may send them)
}

// sse is a 200 that streams events, a text/event-stream.
func sse(events string) step {
	return step{status: 200, body: events, header: map[string]string{"Content-Type": "text/event-stream"}}
}

// opError stands in for *net.OpError without a real socket.
type opError struct{}

func (*opError) Error() string { return "read tcp 10.0.0.1:443: connection reset by peer" }

// provider is an in-memory base RoundTripper: it answers each request with
// the next step of its script (the last step repeats), and keeps what each
// request carried and every response body it handed out.
type provider struct {
	mu     sync.Mutex
	script []step
	reqs   []*http.Request
	bodies []*body
	idle   atomic.Int32 // CloseIdleConnections calls
}

// newProvider returns a provider that answers with script.
func newProvider(script ...step) *provider { return &provider{script: script} }

// RoundTrip answers req with the next step.
func (p *provider) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Body != nil {
		io.Copy(io.Discard, req.Body)
		req.Body.Close()
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	s := p.script[min(len(p.reqs), len(p.script)-1)]
	p.reqs = append(p.reqs, req)
	if s.leak {
		// What a base wrapping an http.Client may say.
		return nil, &url.Error{Op: "Post", URL: req.URL.String(), Err: fmt.Errorf("connection reset by peer (sent %s)", req.Header.Get("Authorization"))}
	}
	if s.err != nil {
		return nil, s.err
	}
	text := s.body
	if text == "" {
		text = `{"status":` + strconv.Itoa(s.status) + `}`
	}
	b := &body{Reader: strings.NewReader(text), whole: s.whole}
	p.bodies = append(p.bodies, b)
	h := http.Header{"Content-Type": {"application/json"}}
	for k, v := range s.header {
		h.Set(k, v)
	}
	return &http.Response{
		Status:     strconv.Itoa(s.status) + " " + http.StatusText(s.status),
		StatusCode: s.status,
		Header:     h,
		Body:       b,
		Request:    req,
	}, nil
}

// CloseIdleConnections counts the calls.
func (p *provider) CloseIdleConnections() { p.idle.Add(1) }

// requests returns the requests received so far.
func (p *provider) requests() []*http.Request {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]*http.Request(nil), p.reqs...)
}

// body is a response body that knows whether it was closed.
type body struct {
	*strings.Reader
	whole  bool // its last bytes come with io.EOF
	closed atomic.Bool
}

// Read reads the body; when whole, the read that empties it returns
// io.EOF with its bytes.
func (b *body) Read(p []byte) (int, error) {
	n, err := b.Reader.Read(p)
	if b.whole && err == nil && b.Len() == 0 {
		err = io.EOF
	}
	return n, err
}

func (b *body) Close() error { b.closed.Store(true); return nil }

// rig is an SDK TracerProvider with a SpanRecorder and a MeterProvider
// with a ManualReader: everything this package records, in memory.
type rig struct {
	spans  *tracetest.SpanRecorder
	tp     *sdktrace.TracerProvider
	reader *sdkmetric.ManualReader
	mp     *sdkmetric.MeterProvider
}

func newRig() *rig {
	r := &rig{spans: tracetest.NewSpanRecorder(), reader: sdkmetric.NewManualReader()}
	r.tp = sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(r.spans))
	r.mp = sdkmetric.NewMeterProvider(sdkmetric.WithReader(r.reader))
	return r
}

// opts are the options that send everything to r.
func (r *rig) opts() []Option {
	return []Option{WithTracerProvider(r.tp), WithMeterProvider(r.mp)}
}

// transport returns New(base, p) recording to r, failing t if New fails.
func (r *rig) transport(t *testing.T, base http.RoundTripper, p llmretry.Policy) *Transport {
	t.Helper()
	rt, err := New(base, p, r.opts()...)
	require.NoError(t, err)
	return rt
}

// turn starts the caller's span ("turn") on ctx.
func (r *rig) turn(ctx context.Context) (context.Context, trace.Span) {
	return r.tp.Tracer("test").Start(ctx, "turn")
}

// clientSpans returns the ended CLIENT spans, in the order they started.
func (r *rig) clientSpans() []sdktrace.ReadOnlySpan {
	var out []sdktrace.ReadOnlySpan
	for _, s := range r.spans.Ended() {
		if s.SpanKind() == trace.SpanKindClient {
			out = append(out, s)
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].StartTime().Before(out[j].StartTime()) })
	return out
}

// requireAllEnded fails unless every span that started has ended.
func (r *rig) requireAllEnded(t *testing.T) {
	t.Helper()
	started, ended := r.spans.Started(), r.spans.Ended()
	require.NotEmpty(t, started)
	require.Len(t, ended, len(started), "every span that started has ended")
}

// collect reads the metrics recorded so far.
func (r *rig) collect(t *testing.T) metricdata.ResourceMetrics {
	t.Helper()
	var rm metricdata.ResourceMetrics
	require.NoError(t, r.reader.Collect(context.Background(), &rm))
	return rm
}

// findMetric returns the metric named name, failing if there is none.
func findMetric(t *testing.T, rm metricdata.ResourceMetrics, name string) metricdata.Metrics {
	t.Helper()
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name == name {
				return m
			}
		}
	}
	require.FailNowf(t, "no metric", "%s not recorded", name)
	return metricdata.Metrics{}
}

// hasMetric reports whether a metric named name has any data.
func hasMetric(rm metricdata.ResourceMetrics, name string) bool {
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name == name {
				return true
			}
		}
	}
	return false
}

// counts returns an int64 counter's values by attribute set, each set
// rendered as sorted key=value pairs.
func counts(t *testing.T, m metricdata.Metrics) map[string]int64 {
	t.Helper()
	sum, ok := m.Data.(metricdata.Sum[int64])
	require.Truef(t, ok, "%s is a %T, not an int64 sum", m.Name, m.Data)
	require.True(t, sum.IsMonotonic, "%s is a counter", m.Name)
	out := map[string]int64{}
	for _, dp := range sum.DataPoints {
		out[render(dp.Attributes)] = dp.Value
	}
	return out
}

// histogram returns a histogram's (count, sum) by attribute set, its
// values of type N.
func histogram[N int64 | float64](t *testing.T, m metricdata.Metrics) map[string][2]N {
	t.Helper()
	h, ok := m.Data.(metricdata.Histogram[N])
	require.Truef(t, ok, "%s is a %T, not a %T", m.Name, m.Data, h)
	out := map[string][2]N{}
	for _, dp := range h.DataPoints {
		out[render(dp.Attributes)] = [2]N{N(dp.Count), dp.Sum}
	}
	return out
}

// render writes an attribute set as "k=v k=v", sorted by key.
func render(s attribute.Set) string {
	var parts []string
	for _, kv := range s.ToSlice() {
		parts = append(parts, string(kv.Key)+"="+kv.Value.String())
	}
	return strings.Join(parts, " ")
}

// attr returns the value of span attribute k, and whether it is set.
func attr(attrs []attribute.KeyValue, k attribute.Key) (attribute.Value, bool) {
	for _, kv := range attrs {
		if kv.Key == k {
			return kv.Value, true
		}
	}
	return attribute.Value{}, false
}

// events returns the events of s named name.
func events(s sdktrace.ReadOnlySpan, name string) []sdktrace.Event {
	var out []sdktrace.Event
	for _, e := range s.Events() {
		if e.Name == name {
			out = append(out, e)
		}
	}
	return out
}

// eventAttrs renders an event's attributes by key.
func eventAttrs(e sdktrace.Event) map[attribute.Key]any {
	out := map[attribute.Key]any{}
	for _, kv := range e.Attributes {
		out[kv.Key] = kv.Value.AsInterface()
	}
	return out
}

// callInTurn sends one POST through rt inside a caller's span (the turn),
// reads and closes the answer, ends the turn and requires every span to
// have ended; it returns the turn.
func (r *rig) callInTurn(t *testing.T, rt http.RoundTripper) trace.Span {
	t.Helper()
	ctx, turn := r.turn(t.Context())
	resp, err := rt.RoundTrip(post(t, ctx, chatURL))
	require.NoError(t, err)
	finish(t, resp)
	turn.End()
	r.requireAllEnded(t)
	return turn
}

// post returns a POST request to url with a JSON body and ctx.
func post(t *testing.T, ctx context.Context, url string) *http.Request {
	t.Helper()
	return postBody(t, ctx, url, `{"model":"m"}`)
}

// postBody returns a POST request to url with the JSON body and ctx.
func postBody(t *testing.T, ctx context.Context, url, body string) *http.Request {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	return req
}

// finish reads the response body to the end and closes it, as a caller must.
func finish(t *testing.T, resp *http.Response) {
	t.Helper()
	_, err := io.Copy(io.Discard, resp.Body)
	require.NoError(t, err)
	require.NoError(t, resp.Body.Close())
}

const chatURL = "https://api.example.com/v1/chat/completions"

const (
	anthropicURL = "https://api.anthropic.com/v1/messages"
	openaiURL    = "https://api.openai.com/v1/chat/completions"
	streamBody   = `{"model":"m","messages":[{"role":"user","content":"Say hello"}],"stream":true}`
)

// overloaded is the error event an Anthropic stream opens with under load.
const overloaded = "event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\",\"message\":\"Overloaded\"}}\n\n"

// messages is an Anthropic Messages stream answering parts.
func messages(parts ...string) string {
	ev := func(name, data string) string { return "event: " + name + "\ndata: " + data + "\n\n" }
	s := ev("message_start", `{"type":"message_start","message":{"id":"msg_1","type":"message","role":"assistant","model":"m","content":[],"stop_reason":null,"usage":{"input_tokens":1,"output_tokens":1}}}`) +
		ev("content_block_start", `{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}`)
	for _, p := range parts {
		s += ev("content_block_delta", `{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":`+quote(p)+`}}`)
	}
	return s + ev("content_block_stop", `{"type":"content_block_stop","index":0}`) +
		ev("message_delta", `{"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":2}}`) +
		ev("message_stop", `{"type":"message_stop"}`)
}

// chat is a Chat Completions stream of parts: the role chunk, a chunk per
// part and, when complete, the finish chunk and [DONE]; cut short
// otherwise.
func chat(complete bool, parts ...string) string {
	chunk := func(delta, finish string) string {
		return `data: {"id":"c1","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":` + delta + `,"finish_reason":` + finish + `}]}` + "\n\n"
	}
	s := chunk(`{"role":"assistant","content":""}`, "null")
	for _, p := range parts {
		s += chunk(`{"content":`+quote(p)+`}`, "null")
	}
	if complete {
		s += chunk(`{}`, `"stop"`) + "data: [DONE]\n\n"
	}
	return s
}

func quote(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// ours are the attributes of kvs whose keys are keys.
func ours(kvs []attribute.KeyValue, keys ...attribute.Key) []attribute.KeyValue {
	var out []attribute.KeyValue
	for _, k := range keys {
		if v, ok := attr(kvs, k); ok {
			out = append(out, attribute.KeyValue{Key: k, Value: v})
		}
	}
	return out
}

// chatText is the content a Chat Completions stream carries.
func chatText(t *testing.T, stream string) string {
	t.Helper()
	var text string
	for _, line := range strings.Split(stream, "\n") {
		data, ok := strings.CutPrefix(line, "data: ")
		if !ok || data == "[DONE]" {
			continue
		}
		var chunk struct {
			Choices []struct {
				Delta struct {
					Content string `json:"content"`
				} `json:"delta"`
			} `json:"choices"`
		}
		require.NoError(t, json.Unmarshal([]byte(data), &chunk), data)
		for _, ch := range chunk.Choices {
			text += ch.Delta.Content
		}
	}
	return text
}
