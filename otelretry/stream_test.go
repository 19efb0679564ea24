package otelretry

import (
	"encoding/json"
	"io"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/llmretry/llmretry"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
)

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
			name: "opened with an error event that ends the body in the same read", url: anthropicURL, policy: retry,
			script: []step{func() step { s := sse(overloaded); s.whole = true; return s }(), sse(messages("Hi"))},
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
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				r := newRig()
				p := c.policy
				ctx := t.Context()
				if c.own {
					ctx = llmretry.WithPolicy(ctx, p)
					p = llmretry.Policy{}
				}
				rt, err := New(newProvider(c.script...), p, r.opts()...)
				require.NoError(t, err)
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
