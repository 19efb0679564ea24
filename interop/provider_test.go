package interop

// Shared test helpers: a scripted fake model provider, realistic provider
// replies (OpenAI, Anthropic, Gemini), SDK clients wired to a RoundTripper,
// and a recorder for llmretry's attempt record.
//
// Every test file of this module may use them (outage_test.go included).
// The provider is two things at once:
//
//   - an http.RoundTripper, to be used as llmretry's base transport. It
//     never touches the network and starts no goroutine, so it works inside
//     a testing/synctest bubble, where waits of minutes pass instantly. Use
//     it for anything timed.
//   - an http.Handler, to be put behind an httptest.Server where timing does
//     not matter and the real wire is wanted (streams flushed event by
//     event). httptest servers cannot run inside synctest bubbles.
//
// Typical use:
//
//	synctest.Test(t, func(t *testing.T) {
//		prov := newProvider(badGateway(), openAIRateLimited("20"), openAIChatCompletion("Hi"))
//		rt := retrying(t, prov, llmretry.Policy{Waits: []time.Duration{5 * time.Second}})
//		client := openAIClient(fakeOpenAIURL, rt, oaoption.WithMaxRetries(0))
//		...
//		assert.Equal(t, 2, prov.attempts())
//		assert.Equal(t, []time.Duration{20 * time.Second}, prov.gaps())
//	})

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"reflect"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2"
	antoption "github.com/anthropics/anthropic-sdk-go/v2/option"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/bedrockruntime"
	brtypes "github.com/aws/aws-sdk-go-v2/service/bedrockruntime/types"
	"github.com/aws/smithy-go/eventstream"
	"github.com/llmretry/llmretry"
	"github.com/openai/openai-go/v3"
	oaoption "github.com/openai/openai-go/v3/option"
	goopenai "github.com/sashabaranov/go-openai"
	"github.com/stretchr/testify/require"
	lcanthropic "github.com/tmc/langchaingo/llms/anthropic"
	lcopenai "github.com/tmc/langchaingo/llms/openai"
	"google.golang.org/genai"
)

// Base URLs of the in-memory providers. The .test TLD never resolves, so a
// request that escaped the fake base would fail rather than reach a real
// provider.
const (
	fakeOpenAIURL    = "https://api.openai.test/v1/"
	fakeAnthropicURL = "https://api.anthropic.test/"
	fakeGeminiURL    = "https://generativelanguage.googleapis.test/"
	fakeBedrockURL   = "https://bedrock-runtime.us-east-1.amazonaws.test"
)

// Obvious dummy credentials: nothing here talks to a real provider.
const (
	dummyOpenAIKey    = "sk-dummy-interop-test"
	dummyAnthropicKey = "sk-ant-dummy-interop-test"
	dummyGeminiKey    = "dummy-gemini-interop-test"
	dummyAWSKeyID     = "AKIDINTEROPDUMMY"
	dummyAWSSecret    = "dummy-aws-secret-interop-test"
)

// Models named in requests and replies.
const (
	openAIModel    = "gpt-4o-mini"
	anthropicModel = "claude-sonnet-4-5"
	geminiModel    = "gemini-2.5-flash"
	bedrockModel   = "anthropic.claude-3-5-haiku-20241022-v1:0"
)

// reply is one scripted answer of the fake provider: a transport error, or
// a status with headers and a body. Events, when set, is a streamed body:
// ServeHTTP writes and flushes each element in turn; RoundTrip sends them
// concatenated (Body is then ignored).
type reply struct {
	status int
	header http.Header
	body   string
	events []string
	err    error // RoundTrip only: the error instead of a response
	// delay is how long the provider takes to answer (RoundTrip only): a
	// timer, or the request's context ending first, as over a connection.
	delay time.Duration
	// stall makes the body go silent after its bytes instead of ending:
	// a Read then blocks until the body is closed (and fails) or the
	// request's context ends (RoundTrip only): a provider that sent its
	// headers, and perhaps some events, then nothing.
	stall bool
}

// with returns a copy of r with header k set to v.
func (r reply) with(k, v string) reply {
	h := r.header.Clone()
	if h == nil {
		h = http.Header{}
	}
	h.Set(k, v)
	r.header = h
	return r
}

// after returns a copy of r that the provider sends d after the request
// reached it.
func (r reply) after(d time.Duration) reply {
	r.delay = d
	return r
}

// stalled returns a copy of r whose body goes silent after its bytes.
func (r reply) stalled() reply {
	r.stall = true
	return r
}

// payload returns the whole body of r.
func (r reply) payload() string {
	if r.events != nil {
		return strings.Join(r.events, "")
	}
	return r.body
}

// call is what reached the provider in one attempt.
type call struct {
	at      time.Time
	method  string
	path    string // the URL path, as the provider saw it
	rawPath string // the escaped path, when it differs from path's encoding
	query   string
	host    string
	header  http.Header
	body    string

	// How the client built the request (RoundTrip only; over the wire
	// the server sees its own).
	getBody       bool   // GetBody was set
	bodyType      string // the Go type of Body ("<nil>" for none)
	contentLength int64
}

// provider is a scripted fake model provider. It answers the i-th request
// with script[i] (the last reply repeats forever), or with answer's reply
// when answer is set, and records every attempt. It is safe for concurrent
// use; answer runs with the provider locked and must not call it.
type provider struct {
	mu     sync.Mutex
	script []reply
	answer func(c call, n int) reply // n counts from 1
	calls  []call
}

// newProvider returns a provider that answers with script, in order.
func newProvider(script ...reply) *provider {
	if len(script) == 0 {
		panic("newProvider: empty script")
	}
	return &provider{script: script}
}

// newProviderFunc returns a provider whose reply to the n-th request
// (counting from 1) is answer(c, n), c being what reached it: for a
// provider whose answer depends on its clock or on the request itself.
func newProviderFunc(answer func(c call, n int) reply) *provider {
	return &provider{answer: answer}
}

// next records the request and returns the reply for it.
func (p *provider) next(r *http.Request) reply {
	var body []byte
	if r.Body != nil {
		body, _ = io.ReadAll(r.Body)
		r.Body.Close()
	}
	c := call{
		at:            time.Now(),
		method:        r.Method,
		path:          r.URL.Path,
		rawPath:       r.URL.RawPath,
		query:         r.URL.RawQuery,
		host:          r.Host,
		header:        r.Header.Clone(),
		body:          string(body),
		getBody:       r.GetBody != nil,
		bodyType:      bodyType(r.Body),
		contentLength: r.ContentLength,
	}
	if c.host == "" {
		c.host = r.URL.Host
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.calls = append(p.calls, c)
	if p.answer != nil {
		return p.answer(c, len(p.calls))
	}
	return p.script[min(len(p.calls)-1, len(p.script)-1)]
}

// bodyType names the Go type of a request body, and the type of the reader
// it wraps when it is a wrapper struct (io.NopCloser's, say): what decides
// whether the body can be handed over without a copy.
func bodyType(body io.ReadCloser) string {
	name := fmt.Sprintf("%T", body)
	v := reflect.ValueOf(body)
	for v.Kind() == reflect.Pointer && !v.IsNil() {
		v = v.Elem()
	}
	if v.Kind() != reflect.Struct || v.NumField() == 0 {
		return name
	}
	if f := v.Field(0); (f.Kind() == reflect.Interface || f.Kind() == reflect.Pointer) && !f.IsNil() {
		inner := f.Type().String()
		if f.Kind() == reflect.Interface {
			inner = f.Elem().Type().String()
		}
		return name + " wrapping " + inner
	}
	return name
}

// response renders the reply as the in-memory response to req.
func (r reply) response(req *http.Request) *http.Response {
	body := r.payload()
	var rc io.ReadCloser = io.NopCloser(strings.NewReader(body))
	length := int64(len(body))
	if r.stall {
		rc = &stallBody{r: strings.NewReader(body), ctx: req.Context(), closed: make(chan struct{})}
		length = -1 // a stream of unknown length, as over the wire
	}
	return &http.Response{
		Status:        fmt.Sprintf("%d %s", r.status, http.StatusText(r.status)),
		StatusCode:    r.status,
		Proto:         "HTTP/1.1",
		ProtoMajor:    1,
		ProtoMinor:    1,
		Header:        r.header.Clone(),
		Body:          rc,
		ContentLength: length,
		Request:       req,
	}
}

// stallBody is the body of a stalled reply: its bytes, then silence until
// it is closed (a Read then fails as on a closed connection) or the
// request's context ends. It blocks on channels only, so a synctest
// bubble sees it durably blocked and moves its clock on.
type stallBody struct {
	r      *strings.Reader // read by Read only
	ctx    context.Context
	closed chan struct{}
	once   sync.Once
}

func (b *stallBody) Read(p []byte) (int, error) {
	select {
	case <-b.closed:
		return 0, errStallClosed
	default:
	}
	if b.r.Len() > 0 {
		return b.r.Read(p)
	}
	select {
	case <-b.closed:
		return 0, errStallClosed
	case <-b.ctx.Done():
		return 0, b.ctx.Err()
	}
}

func (b *stallBody) Close() error {
	b.once.Do(func() { close(b.closed) })
	return nil
}

// errStallClosed is what a stalled body's Read returns once it is closed
// (net/http's own words for a read on a closed body).
var errStallClosed = errors.New("http: read on closed response body")

// RoundTrip answers req in memory, reading its body as a server would.
func (p *provider) RoundTrip(req *http.Request) (*http.Response, error) {
	rep := p.next(req)
	if rep.delay > 0 {
		t := time.NewTimer(rep.delay)
		defer t.Stop()
		select {
		case <-t.C:
		case <-req.Context().Done():
			return nil, req.Context().Err()
		}
	}
	if rep.err != nil {
		return nil, rep.err
	}
	return rep.response(req), nil
}

// ServeHTTP answers over a real connection, flushing each stream event. A
// scripted transport error is answered by dropping the connection.
func (p *provider) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	rep := p.next(r)
	if rep.err != nil {
		panic(http.ErrAbortHandler)
	}
	for k, v := range rep.header {
		w.Header()[k] = append([]string(nil), v...)
	}
	w.WriteHeader(rep.status)
	if rep.events == nil {
		_, _ = io.WriteString(w, rep.body)
		if rep.stall {
			if f, ok := w.(http.Flusher); ok {
				f.Flush()
			}
			<-r.Context().Done()
		}
		return
	}
	f, _ := w.(http.Flusher)
	for _, ev := range rep.events {
		_, _ = io.WriteString(w, ev)
		if f != nil {
			f.Flush()
		}
	}
	if rep.stall {
		<-r.Context().Done() // silent until the client goes
	}
}

// attempts returns how many requests reached the provider.
func (p *provider) attempts() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.calls)
}

// received returns a copy of what reached the provider, in order.
func (p *provider) received() []call {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]call(nil), p.calls...)
}

// gaps returns the time between consecutive attempts (nil for fewer than
// two). Inside a synctest bubble these are exact.
func (p *provider) gaps() []time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	var g []time.Duration
	for i := 1; i < len(p.calls); i++ {
		g = append(g, p.calls[i].at.Sub(p.calls[i-1].at))
	}
	return g
}

// headerValues returns header k of every attempt, in order.
func (p *provider) headerValues(k string) []string {
	var vs []string
	for _, c := range p.received() {
		vs = append(vs, c.header.Get(k))
	}
	return vs
}

// --- Replies anyone in front of a provider sends ---

// badGateway is the 502 a provider's edge (here Cloudflare) sends when its
// upstream is down: an HTML page, not the provider's JSON error.
func badGateway() reply {
	return reply{
		status: http.StatusBadGateway,
		header: http.Header{
			"Content-Type": {"text/html"},
			"Server":       {"cloudflare"},
			"Cf-Ray":       {"8e1f0c2b9d4a7f31-FRA"},
		},
		body: "<html>\r\n<head><title>502 Bad Gateway</title></head>\r\n<body>\r\n" +
			"<center><h1>502 Bad Gateway</h1></center>\r\n<hr><center>cloudflare</center>\r\n" +
			"</body>\r\n</html>\r\n",
	}
}

// connRefused is what net/http returns when nothing listens: the provider
// (or a proxy in front of it) is unreachable.
func connRefused() reply {
	return reply{err: &net.OpError{
		Op:   "dial",
		Net:  "tcp",
		Addr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 443},
		Err:  &os.SyscallError{Syscall: "connect", Err: syscall.ECONNREFUSED},
	}}
}

// --- OpenAI ---

// openAIHeaders are the headers api.openai.com sends on every reply.
func openAIHeaders(contentType string) http.Header {
	return http.Header{
		"Content-Type":                   {contentType},
		"X-Request-Id":                   {"req_5f1c0e7a2b9d4c3e8f6a1b2c3d4e5f60"},
		"Openai-Organization":            {"org-dummy"},
		"Openai-Processing-Ms":           {"412"},
		"Openai-Version":                 {"2020-10-01"},
		"X-Ratelimit-Limit-Requests":     {"5000"},
		"X-Ratelimit-Remaining-Requests": {"4999"},
		"X-Ratelimit-Reset-Requests":     {"12ms"},
	}
}

// openAIChatCompletion is a chat.completion answering text.
func openAIChatCompletion(text string) reply {
	return reply{
		status: http.StatusOK,
		header: openAIHeaders("application/json"),
		body: `{
  "id": "chatcmpl-B9MHDbslfkBeAs8l4bebGdFOJ6PeG",
  "object": "chat.completion",
  "created": 1741570283,
  "model": "gpt-4o-mini-2024-07-18",
  "choices": [
    {
      "index": 0,
      "message": {"role": "assistant", "content": ` + quote(text) + `, "refusal": null, "annotations": []},
      "logprobs": null,
      "finish_reason": "stop"
    }
  ],
  "usage": {
    "prompt_tokens": 19, "completion_tokens": 10, "total_tokens": 29,
    "prompt_tokens_details": {"cached_tokens": 0, "audio_tokens": 0},
    "completion_tokens_details": {"reasoning_tokens": 0, "audio_tokens": 0, "accepted_prediction_tokens": 0, "rejected_prediction_tokens": 0}
  },
  "service_tier": "default",
  "system_fingerprint": "fp_06737a9306"
}`,
	}
}

// openAIChatStream streams parts as chat.completion.chunk events, ending
// with a finish_reason chunk and data: [DONE].
func openAIChatStream(parts ...string) reply {
	const head = `{"id":"chatcmpl-B9MHDbslfkBeAs8l4bebGdFOJ6PeG","object":"chat.completion.chunk","created":1741570283,"model":"gpt-4o-mini-2024-07-18","service_tier":"default","system_fingerprint":"fp_06737a9306","choices":[{"index":0,"delta":`
	events := []string{"data: " + head + `{"role":"assistant","content":"","refusal":null},"logprobs":null,"finish_reason":null}]}` + "\n\n"}
	for _, p := range parts {
		events = append(events, "data: "+head+`{"content":`+quote(p)+`},"logprobs":null,"finish_reason":null}]}`+"\n\n")
	}
	events = append(events,
		"data: "+head+`{},"logprobs":null,"finish_reason":"stop"}]}`+"\n\n",
		"data: [DONE]\n\n")
	return reply{status: http.StatusOK, header: openAIHeaders("text/event-stream; charset=utf-8"), events: events}
}

// openAIError is OpenAI's error object with status.
func openAIError(status int, message, typ, param, code string) reply {
	return reply{
		status: status,
		header: openAIHeaders("application/json; charset=utf-8"),
		body:   `{"error":{"message":` + quote(message) + `,"type":` + quote(typ) + `,"param":` + nullable(param) + `,"code":` + nullable(code) + `}}`,
	}
}

// openAIRateLimited is a retryable OpenAI 429 asking for retryAfter seconds.
func openAIRateLimited(retryAfter string) reply {
	return openAIError(http.StatusTooManyRequests,
		"Rate limit reached for gpt-4o-mini in organization org-dummy on tokens per min (TPM): Limit 200000, Used 199342, Requested 1250. Please try again in 20s. Visit https://platform.openai.com/account/rate-limits to learn more.",
		"tokens", "", "rate_limit_exceeded").
		with("Retry-After", retryAfter).
		with("X-Ratelimit-Reset-Tokens", "20s")
}

// openAIInsufficientQuota is OpenAI's 429 for a spent quota: waiting does not help.
func openAIInsufficientQuota() reply {
	return openAIError(http.StatusTooManyRequests,
		"You exceeded your current quota, please check your plan and billing details. For more information on this error, read the docs: https://platform.openai.com/docs/guides/error-codes/api-errors.",
		"insufficient_quota", "", "insufficient_quota")
}

// --- Anthropic ---

// anthropicHeaders are the headers api.anthropic.com sends on every reply.
func anthropicHeaders(contentType string) http.Header {
	return http.Header{
		"Content-Type":                           {contentType},
		"Request-Id":                             {"req_011CSHoEeqs5C35K2UUqR7Fy"},
		"Anthropic-Organization-Id":              {"4e4f8a29-7c1b-4b8e-9a52-1d2e3f4a5b6c"},
		"Anthropic-Ratelimit-Requests-Limit":     {"50"},
		"Anthropic-Ratelimit-Requests-Remaining": {"49"},
		"Via":                                    {"1.1 google"},
	}
}

// anthropicMessage is a Messages API message answering text.
func anthropicMessage(text string) reply {
	return reply{
		status: http.StatusOK,
		header: anthropicHeaders("application/json"),
		body: `{
  "id": "msg_01XFDUDYJgAACzvnptvVoYEL",
  "type": "message",
  "role": "assistant",
  "model": "claude-sonnet-4-5-20250929",
  "content": [{"type": "text", "text": ` + quote(text) + `}],
  "stop_reason": "end_turn",
  "stop_sequence": null,
  "usage": {"input_tokens": 12, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0, "output_tokens": 9, "service_tier": "standard"}
}`,
	}
}

// anthropicStream streams parts as Messages API events: message_start,
// content_block_start, ping, one content_block_delta per part,
// content_block_stop, message_delta, message_stop.
func anthropicStream(parts ...string) reply {
	ev := func(name, data string) string { return "event: " + name + "\ndata: " + data + "\n\n" }
	events := []string{
		ev("message_start", `{"type":"message_start","message":{"id":"msg_01XFDUDYJgAACzvnptvVoYEL","type":"message","role":"assistant","model":"claude-sonnet-4-5-20250929","content":[],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":12,"cache_creation_input_tokens":0,"cache_read_input_tokens":0,"output_tokens":1,"service_tier":"standard"}}}`),
		ev("content_block_start", `{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}`),
		ev("ping", `{"type": "ping"}`),
	}
	for _, p := range parts {
		events = append(events, ev("content_block_delta", `{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":`+quote(p)+`}}`))
	}
	events = append(events,
		ev("content_block_stop", `{"type":"content_block_stop","index":0}`),
		ev("message_delta", `{"type":"message_delta","delta":{"stop_reason":"end_turn","stop_sequence":null},"usage":{"output_tokens":9}}`),
		ev("message_stop", `{"type":"message_stop"}`))
	return reply{status: http.StatusOK, header: anthropicHeaders("text/event-stream; charset=utf-8"), events: events}.
		with("Cache-Control", "no-cache")
}

// anthropicError is Anthropic's error object with status.
func anthropicError(status int, typ, message string) reply {
	return reply{
		status: status,
		header: anthropicHeaders("application/json"),
		body:   `{"type":"error","error":{"type":` + quote(typ) + `,"message":` + quote(message) + `},"request_id":"req_011CSHoEeqs5C35K2UUqR7Fy"}`,
	}
}

// anthropicRateLimited is Anthropic's retryable 429, which also carries
// x-should-retry: true.
func anthropicRateLimited(retryAfter string) reply {
	return anthropicError(http.StatusTooManyRequests, "rate_limit_error",
		"This request would exceed the rate limit for your organization (4e4f8a29-7c1b-4b8e-9a52-1d2e3f4a5b6c) of 30,000 input tokens per minute. For details, refer to: https://docs.claude.com/en/api/rate-limits. You can see the response headers for current usage. Please reduce the prompt length or the maximum tokens requested, or try again later.").
		with("Retry-After", retryAfter).
		with("X-Should-Retry", "true").
		with("Anthropic-Ratelimit-Input-Tokens-Remaining", "0")
}

// anthropicSpendLimit is Anthropic's 429 for the monthly spend cap: final.
func anthropicSpendLimit() reply {
	return reply{
		status: http.StatusTooManyRequests,
		header: anthropicHeaders("application/json"),
		body:   `{"type":"error","error":{"type":"rate_limit_error","message":"You have reached your API usage limits: your organization has crossed its monthly API usage threshold, set based on your organization's API tier. You will regain access on 2026-01-01 at 00:00 UTC.","details":{"error_code":"enforced_spend_limit_reached"}},"request_id":"req_018EeWyXxfu5pfWkrYcMdjWG"}`,
	}
}

// --- Gemini ---

// geminiHeaders are the headers generativelanguage.googleapis.com sends.
func geminiHeaders(contentType string) http.Header {
	return http.Header{
		"Content-Type":           {contentType},
		"Server":                 {"scaffolding on HTTPServer2"},
		"Vary":                   {"Origin", "X-Origin", "Referer"},
		"X-Content-Type-Options": {"nosniff"},
		"Server-Timing":          {"gfet4t7; dur=512"},
	}
}

// geminiChunk is one GenerateContentResponse with text; finish is "" for
// a chunk in the middle of a stream.
func geminiChunk(text, finish string) string {
	cand := `{"content":{"parts":[{"text":` + quote(text) + `}],"role":"model"},"index":0`
	if finish != "" {
		cand += `,"finishReason":` + quote(finish)
	}
	return `{"candidates":[` + cand + `}],"usageMetadata":{"promptTokenCount":8,"candidatesTokenCount":9,"totalTokenCount":17,"promptTokensDetails":[{"modality":"TEXT","tokenCount":8}]},"modelVersion":"gemini-2.5-flash","responseId":"mMYzaLXZO9ryjMcPmtLp6Qk"}`
}

// geminiResponse is a generateContent response answering text.
func geminiResponse(text string) reply {
	return reply{status: http.StatusOK, header: geminiHeaders("application/json; charset=UTF-8"), body: geminiChunk(text, "STOP")}
}

// geminiStream streams parts as streamGenerateContent?alt=sse events
// (Gemini ends each with CRLF CRLF), the last with finishReason STOP.
func geminiStream(parts ...string) reply {
	var events []string
	for i, p := range parts {
		finish := ""
		if i == len(parts)-1 {
			finish = "STOP"
		}
		events = append(events, "data: "+geminiChunk(p, finish)+"\r\n\r\n")
	}
	return reply{status: http.StatusOK, header: geminiHeaders("text/event-stream"), events: events}.
		with("Content-Disposition", "attachment")
}

// geminiError is a google.rpc.Status error body.
func geminiError(code int, status, message string) reply {
	return reply{
		status: code,
		header: geminiHeaders("application/json; charset=UTF-8"),
		body:   `{"error":{"code":` + fmt.Sprint(code) + `,"message":` + quote(message) + `,"status":` + quote(status) + `}}`,
	}
}

// geminiQuota is Gemini's 429 RESOURCE_EXHAUSTED for quotaID, with the wait
// in the body (RetryInfo.retryDelay) and no Retry-After header.
func geminiQuota(quotaID, quotaValue, retryDelay string) reply {
	return reply{
		status: http.StatusTooManyRequests,
		header: geminiHeaders("application/json; charset=UTF-8"),
		body: `{"error":{"code":429,"message":"You exceeded your current quota, please check your plan and billing details. For more information on this error, head to: https://ai.google.dev/gemini-api/docs/rate-limits.","status":"RESOURCE_EXHAUSTED","details":[` +
			`{"@type":"type.googleapis.com/google.rpc.QuotaFailure","violations":[{"quotaMetric":"generativelanguage.googleapis.com/generate_content_free_tier_requests","quotaId":` + quote(quotaID) + `,"quotaDimensions":{"location":"global","model":"gemini-2.5-flash"},"quotaValue":` + quote(quotaValue) + `}]},` +
			`{"@type":"type.googleapis.com/google.rpc.Help","links":[{"description":"Learn more about Gemini API quotas","url":"https://ai.google.dev/gemini-api/docs/rate-limits"}]},` +
			`{"@type":"type.googleapis.com/google.rpc.RetryInfo","retryDelay":` + quote(retryDelay) + `}]}}`,
	}
}

// --- Amazon Bedrock ---

// bedrockHeaders are the headers bedrock-runtime sends on every reply. No
// Date: the SDK corrects its signing clock by the Date of a reply, and a
// fixed one would skew the synctest clock.
func bedrockHeaders(contentType string) http.Header {
	return http.Header{
		"Content-Type":     {contentType},
		"X-Amzn-Requestid": {"5c1e7b2a-9d4f-4e3a-8b6c-1f2e3d4c5b6a"},
	}
}

// bedrockError is a Bedrock (restJson1) error: the error type in the
// X-Amzn-ErrorType header, the message in a JSON body.
func bedrockError(status int, typ, message string) reply {
	return reply{
		status: status,
		header: bedrockHeaders("application/json"),
		body:   `{"message":` + quote(message) + `}`,
	}.with("X-Amzn-Errortype", typ+":http://internal.amazon.com/coral/com.amazon.bedrock/")
}

// bedrockThrottled is Bedrock's 429 ThrottlingException (no Retry-After).
func bedrockThrottled() reply {
	return bedrockError(http.StatusTooManyRequests, "ThrottlingException", "Too many requests, please wait before trying again.")
}

// bedrockUnavailable is Bedrock's 503 ServiceUnavailableException.
func bedrockUnavailable() reply {
	return bedrockError(http.StatusServiceUnavailable, "ServiceUnavailableException", "Bedrock is unable to process your request.")
}

// bedrockSignatureExpired is the 403 InvalidSignatureException AWS sends
// for a request signed at signed and received at now, more than 5 minutes
// later.
func bedrockSignatureExpired(signed, now time.Time) reply {
	const f = "20060102T150405Z"
	return bedrockError(http.StatusForbidden, "InvalidSignatureException",
		"Signature expired: "+signed.UTC().Format(f)+" is now earlier than "+now.Add(-5*time.Minute).UTC().Format(f)+
			" ("+now.UTC().Format(f)+" - 5 min.)")
}

// bedrockConverse is a Converse response answering text.
func bedrockConverse(text string) reply {
	return reply{
		status: http.StatusOK,
		header: bedrockHeaders("application/json"),
		body: `{"metrics":{"latencyMs":412},"output":{"message":{"content":[{"text":` + quote(text) + `}],"role":"assistant"}},` +
			`"stopReason":"end_turn","usage":{"inputTokens":12,"outputTokens":9,"totalTokens":21}}`,
	}
}

// bedrockInvoke is an InvokeModel response: the model's own body (here an
// Anthropic message) with Bedrock's token-count headers.
func bedrockInvoke(text string) reply {
	r := anthropicMessage(text)
	r.header = bedrockHeaders("application/json")
	r.header.Set("X-Amzn-Bedrock-Input-Token-Count", "12")
	r.header.Set("X-Amzn-Bedrock-Output-Token-Count", "9")
	r.header.Set("X-Amzn-Bedrock-Invocation-Latency", "412")
	return r
}

// bedrockEvent encodes one event of an application/vnd.amazon.eventstream
// body: the binary frame with its CRCs, as Bedrock streams it.
func bedrockEvent(eventType, payload string) string {
	var b bytes.Buffer
	err := eventstream.NewEncoder().Encode(&b, eventstream.Message{
		Headers: eventstream.Headers{
			{Name: ":event-type", Value: eventstream.StringValue(eventType)},
			{Name: ":content-type", Value: eventstream.StringValue("application/json")},
			{Name: ":message-type", Value: eventstream.StringValue("event")},
		},
		Payload: []byte(payload),
	})
	if err != nil {
		panic(err)
	}
	return b.String()
}

// bedrockConverseStream streams parts as ConverseStream events:
// messageStart, one contentBlockDelta per part, contentBlockStop,
// messageStop and metadata.
func bedrockConverseStream(parts ...string) reply {
	events := []string{bedrockEvent("messageStart", `{"p":"abcdefgh","role":"assistant"}`)}
	for _, p := range parts {
		events = append(events, bedrockEvent("contentBlockDelta", `{"contentBlockIndex":0,"delta":{"text":`+quote(p)+`},"p":"abcd"}`))
	}
	events = append(events,
		bedrockEvent("contentBlockStop", `{"contentBlockIndex":0,"p":"abcdefghijk"}`),
		bedrockEvent("messageStop", `{"p":"abcdefghij","stopReason":"end_turn"}`),
		bedrockEvent("metadata", `{"metrics":{"latencyMs":412},"p":"abc","usage":{"inputTokens":12,"outputTokens":9,"totalTokens":21}}`))
	return reply{status: http.StatusOK, header: bedrockHeaders("application/vnd.amazon.eventstream"), events: events}
}

// bedrockInvokeStream streams parts as InvokeModelWithResponseStream chunk
// events, each carrying one Anthropic stream event (base64 in "bytes").
func bedrockInvokeStream(parts ...string) reply {
	chunk := func(data string) string {
		return bedrockEvent("chunk", `{"bytes":"`+base64.StdEncoding.EncodeToString([]byte(data))+`","p":"abcdef"}`)
	}
	events := []string{
		chunk(`{"type":"message_start","message":{"id":"msg_bdrk_01XFDUDYJgAACzvnptvVoYEL","type":"message","role":"assistant","model":"claude-3-5-haiku-20241022","content":[],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":12,"output_tokens":1}}}`),
		chunk(`{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}`),
	}
	for _, p := range parts {
		events = append(events, chunk(`{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":`+quote(p)+`}}`))
	}
	events = append(events,
		chunk(`{"type":"content_block_stop","index":0}`),
		chunk(`{"type":"message_delta","delta":{"stop_reason":"end_turn","stop_sequence":null},"usage":{"output_tokens":9}}`),
		chunk(`{"type":"message_stop","amazon-bedrock-invocationMetrics":{"inputTokenCount":12,"outputTokenCount":9,"invocationLatency":412,"firstByteLatency":198}}`))
	return reply{status: http.StatusOK, header: bedrockHeaders("application/vnd.amazon.eventstream"), events: events}
}

// quote returns s as a JSON string (s holds no characters needing escapes
// beyond quotes and backslashes in these tests).
func quote(s string) string {
	return `"` + strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`).Replace(s) + `"`
}

// nullable returns s as a JSON string, or null when s is empty.
func nullable(s string) string {
	if s == "" {
		return "null"
	}
	return quote(s)
}

// --- Clients ---

// retrying returns an llmretry Transport over base, or fails the test.
func retrying(t testing.TB, base http.RoundTripper, p llmretry.Policy) *llmretry.Transport {
	t.Helper()
	rt, err := llmretry.New(base, p)
	require.NoError(t, err)
	return rt
}

// openAIClient returns an openai-go client that sends through rt to
// baseURL with a dummy key; opts come last and win.
func openAIClient(baseURL string, rt http.RoundTripper, opts ...oaoption.RequestOption) openai.Client {
	return openai.NewClient(append([]oaoption.RequestOption{
		oaoption.WithBaseURL(baseURL),
		oaoption.WithAPIKey(dummyOpenAIKey),
		oaoption.WithHTTPClient(&http.Client{Transport: rt}),
	}, opts...)...)
}

// anthropicClient returns an anthropic-sdk-go client that sends through rt
// to baseURL with a dummy key, ignoring ANTHROPIC_* variables and profiles;
// opts come last and win.
func anthropicClient(baseURL string, rt http.RoundTripper, opts ...antoption.RequestOption) anthropic.Client {
	return anthropic.NewClient(append([]antoption.RequestOption{
		antoption.WithoutEnvironmentDefaults(),
		antoption.WithBaseURL(baseURL),
		antoption.WithAPIKey(dummyAnthropicKey),
		antoption.WithHTTPClient(&http.Client{Transport: rt}),
	}, opts...)...)
}

// geminiClient returns a genai client for the Gemini API that sends
// through rt to baseURL with a dummy key. retry, if non-nil, turns on the
// SDK's own retry (off by default).
func geminiClient(t testing.TB, baseURL string, rt http.RoundTripper, retry *genai.HTTPRetryOptions) *genai.Client {
	t.Helper()
	c, err := genai.NewClient(context.Background(), &genai.ClientConfig{
		APIKey:      dummyGeminiKey,
		Backend:     genai.BackendGeminiAPI,
		HTTPClient:  &http.Client{Transport: rt},
		HTTPOptions: genai.HTTPOptions{BaseURL: baseURL, RetryOptions: retry},
	})
	require.NoError(t, err)
	return c
}

// goOpenAIClient returns a sashabaranov/go-openai client that sends
// through rt to baseURL with a dummy key. go-openai has no retries of its
// own: there is nothing to turn off.
func goOpenAIClient(baseURL string, rt http.RoundTripper) *goopenai.Client {
	cfg := goopenai.DefaultConfig(dummyOpenAIKey)
	cfg.BaseURL = strings.TrimSuffix(baseURL, "/")
	cfg.HTTPClient = &http.Client{Transport: rt}
	return goopenai.NewClientWithConfig(cfg)
}

// langchainOpenAI returns langchaingo's OpenAI LLM sending through rt to
// baseURL with a dummy key (the options win over OPENAI_* variables).
func langchainOpenAI(t testing.TB, baseURL string, rt http.RoundTripper) *lcopenai.LLM {
	t.Helper()
	llm, err := lcopenai.New(
		lcopenai.WithToken(dummyOpenAIKey),
		lcopenai.WithBaseURL(strings.TrimSuffix(baseURL, "/")),
		lcopenai.WithModel(openAIModel),
		lcopenai.WithHTTPClient(&http.Client{Transport: rt}),
	)
	require.NoError(t, err)
	return llm
}

// langchainAnthropic returns langchaingo's Anthropic LLM sending through
// rt to baseURL (which ends in /v1) with a dummy key.
func langchainAnthropic(t testing.TB, baseURL string, rt http.RoundTripper) *lcanthropic.LLM {
	t.Helper()
	llm, err := lcanthropic.New(
		lcanthropic.WithToken(dummyAnthropicKey),
		lcanthropic.WithBaseURL(strings.TrimSuffix(baseURL, "/")),
		lcanthropic.WithModel(anthropicModel),
		lcanthropic.WithHTTPClient(&http.Client{Transport: rt}),
	)
	require.NoError(t, err)
	return llm
}

// bedrockClient returns an aws-sdk-go-v2 bedrockruntime client that sends
// through rt to fakeBedrockURL, signing with SigV4 and dummy static
// credentials. It keeps the SDK's default retryer; opts come last and win
// (Retryer: aws.NopRetryer{} is the recommended set-up under llmretry).
func bedrockClient(rt http.RoundTripper, opts ...func(*bedrockruntime.Options)) *bedrockruntime.Client {
	return bedrockruntime.New(bedrockruntime.Options{
		Region:       "us-east-1",
		BaseEndpoint: aws.String(fakeBedrockURL),
		Credentials: aws.CredentialsProviderFunc(func(context.Context) (aws.Credentials, error) {
			return aws.Credentials{AccessKeyID: dummyAWSKeyID, SecretAccessKey: dummyAWSSecret, Source: "interop"}, nil
		}),
		HTTPClient: &http.Client{Transport: rt},
	}, append([]func(*bedrockruntime.Options){func(o *bedrockruntime.Options) {
		// SigV4 even where AWS_BEARER_TOKEN_BEDROCK is set.
		o.AuthSchemePreference = nil
		o.BearerAuthTokenProvider = nil
	}}, opts...)...)
}

// noAWSRetries is the recommended set-up of a bedrockruntime client under
// llmretry: the SDK's own retryer off.
func noAWSRetries(o *bedrockruntime.Options) { o.Retryer = aws.NopRetryer{} }

// bedrockConverseInput is a small Converse request.
func bedrockConverseInput() *bedrockruntime.ConverseInput {
	return &bedrockruntime.ConverseInput{
		ModelId: aws.String(bedrockModel),
		Messages: []brtypes.Message{{
			Role:    brtypes.ConversationRoleUser,
			Content: []brtypes.ContentBlock{&brtypes.ContentBlockMemberText{Value: "Say hello."}},
		}},
		InferenceConfig: &brtypes.InferenceConfiguration{MaxTokens: aws.Int32(256)},
	}
}

// bedrockConverseStreamInput is bedrockConverseInput for ConverseStream.
func bedrockConverseStreamInput() *bedrockruntime.ConverseStreamInput {
	in := bedrockConverseInput()
	return &bedrockruntime.ConverseStreamInput{ModelId: in.ModelId, Messages: in.Messages, InferenceConfig: in.InferenceConfig}
}

// bedrockInvokeBody is an InvokeModel body in Anthropic's format on Bedrock.
const bedrockInvokeBody = `{"anthropic_version":"bedrock-2023-05-31","max_tokens":256,"messages":[{"role":"user","content":[{"type":"text","text":"Say hello."}]}]}`

// openAIParams is a small chat request.
func openAIParams() openai.ChatCompletionNewParams {
	return openai.ChatCompletionNewParams{
		Model:    openAIModel,
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Say hello.")},
	}
}

// anthropicParams is a small Messages request.
func anthropicParams() anthropic.MessageNewParams {
	return anthropic.MessageNewParams{
		Model:     anthropicModel,
		MaxTokens: 1024,
		Messages:  []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("Say hello."))},
	}
}

// geminiPrompt is a small generateContent prompt.
func geminiPrompt() []*genai.Content { return genai.Text("Say hello.") }

// --- The record ---

// recorder collects llmretry's attempt record (Policy.OnAttempt).
type recorder struct {
	mu       sync.Mutex
	attempts []llmretry.Attempt
}

// on is a Policy.OnAttempt.
func (r *recorder) on(a llmretry.Attempt) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.attempts = append(r.attempts, a)
}

// retryIns returns each recorded attempt's RetryIn.
func (r *recorder) retryIns() []time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	var d []time.Duration
	for _, a := range r.attempts {
		d = append(d, a.RetryIn)
	}
	return d
}

// statuses returns each recorded attempt's status code (0 for an error).
func (r *recorder) statuses() []int {
	r.mu.Lock()
	defer r.mu.Unlock()
	var s []int
	for _, a := range r.attempts {
		if a.Response != nil {
			s = append(s, a.Response.StatusCode)
		} else {
			s = append(s, 0)
		}
	}
	return s
}

// stripShouldRetry is a RoundTripper that removes X-Should-Retry from every
// response of next: it stands for an llmretry that did not mark the
// responses it gave up on, to show what the mark prevents.
type stripShouldRetry struct{ next http.RoundTripper }

func (s stripShouldRetry) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := s.next.RoundTrip(req)
	if resp != nil {
		resp.Header = resp.Header.Clone()
		resp.Header.Del("X-Should-Retry")
	}
	return resp, err
}

// The fake provider itself: the script runs in order, its last reply
// repeats, a scripted error drops the connection over the wire, and the
// in-memory form returns it as is.
func TestProviderScript(t *testing.T) {
	script := []reply{badGateway(), connRefused(), openAIChatCompletion("Hi")}

	t.Run("in memory", func(t *testing.T) {
		prov := newProvider(script...)
		var got []string
		for range 4 {
			req, err := http.NewRequest(http.MethodPost, fakeOpenAIURL+"chat/completions", strings.NewReader(`{"n":1}`))
			require.NoError(t, err)
			resp, err := prov.RoundTrip(req)
			if err != nil {
				require.ErrorIs(t, err, syscall.ECONNREFUSED)
				got = append(got, "refused")
				continue
			}
			body, err := io.ReadAll(resp.Body)
			require.NoError(t, err)
			require.Equal(t, int64(len(body)), resp.ContentLength)
			got = append(got, resp.Status)
		}
		require.Equal(t, []string{"502 Bad Gateway", "refused", "200 OK", "200 OK"}, got)
		require.Equal(t, 4, prov.attempts())
		require.Equal(t, `{"n":1}`, prov.received()[3].body)
	})

	t.Run("over the wire", func(t *testing.T) {
		prov := newProvider(script...)
		srv := httptest.NewServer(prov)
		defer srv.Close()
		var got []string
		for range 3 {
			resp, err := srv.Client().Post(srv.URL+"/v1/chat/completions", "application/json", strings.NewReader(`{}`))
			if err != nil {
				got = append(got, "dropped")
				continue
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			got = append(got, resp.Status)
		}
		require.Equal(t, []string{"502 Bad Gateway", "dropped", "200 OK"}, got)
		require.Equal(t, "/v1/chat/completions", prov.received()[0].path)
	})
}
