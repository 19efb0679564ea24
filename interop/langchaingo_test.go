package interop

import (
	"context"
	"errors"
	"strings"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	"github.com/llmretry/llmretry"
	"github.com/llmretry/llmretry/internal/testkit"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/tmc/langchaingo/llms"
)

// fakeAnthropicV1 is the base URL langchaingo's Anthropic LLM takes: it
// appends /messages itself.
const fakeAnthropicV1 = fakeAnthropicURL + "v1"

// lcGenerate is the part of langchaingo's llms.Model the tests call.
type lcGenerate interface {
	GenerateContent(ctx context.Context, messages []llms.MessageContent, options ...llms.CallOption) (*llms.ContentResponse, error)
}

// lcAsk sends prompt to llm; stream, if true, asks for a streamed reply
// (llms.WithStreamingFunc) and collects its chunks. It returns the answer's
// text, the streamed text and the error.
func lcAsk(llm lcGenerate, prompt string, stream bool) (string, string, error) {
	opts := []llms.CallOption{llms.WithMaxTokens(256)}
	var streamed strings.Builder
	if stream {
		opts = append(opts, llms.WithStreamingFunc(func(_ context.Context, chunk []byte) error {
			streamed.Write(chunk)
			return nil
		}))
	}
	resp, err := llm.GenerateContent(context.Background(), []llms.MessageContent{llms.TextParts(llms.ChatMessageTypeHuman, prompt)}, opts...)
	if err != nil {
		return "", streamed.String(), err
	}
	if len(resp.Choices) == 0 {
		return "", streamed.String(), errors.New("no choices")
	}
	return resp.Choices[0].Content, streamed.String(), nil
}

// lcClient is one of langchaingo's LLMs over a fake provider speaking its
// wire format.
type lcClient struct {
	name       string
	llm        func(t *testing.T, rt *llmretry.Transport) lcGenerate
	answer     testkit.Reply
	stream     testkit.Reply
	overloaded testkit.Reply // a retryable error of the provider, as JSON
}

// lcClients are langchaingo's OpenAI and Anthropic LLMs.
func lcClients() []lcClient {
	parts := []string{"Hel", "lo", "! How", " can I", " help?"}
	return []lcClient{
		{
			name:       "openai",
			llm:        func(t *testing.T, rt *llmretry.Transport) lcGenerate { return langchainOpenAI(t, fakeOpenAIURL, rt) },
			answer:     testkit.OpenAIChatCompletion("Hello! How can I help?"),
			stream:     testkit.OpenAIChatStream(parts...),
			overloaded: testkit.OpenAIOverloaded(),
		},
		{
			name: "anthropic",
			llm: func(t *testing.T, rt *llmretry.Transport) lcGenerate {
				return langchainAnthropic(t, fakeAnthropicV1, rt)
			},
			answer:     testkit.AnthropicMessage("Hello! How can I help?"),
			stream:     testkit.AnthropicStream(parts...),
			overloaded: testkit.AnthropicOverloaded(),
		},
	}
}

// langchaingo's OpenAI and Anthropic LLMs under llmretry. langchaingo has
// no retries of its own: a 502 from the edge, the provider's own overload
// error, then the answer, after the schedule's 5 s and 10 s.
func TestLangchainRidesOutOutage(t *testing.T) {
	for _, c := range lcClients() {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				prov := testkit.NewProvider(testkit.BadGateway(), c.overloaded, c.answer)
				var rec recorder
				rt := retrying(t, prov, llmretry.Policy{Waits: []time.Duration{5 * time.Second, 10 * time.Second}, OnAttempt: rec.on})

				start := time.Now()
				text, _, err := lcAsk(c.llm(t, rt), "Say hello.", false)
				require.NoError(t, err)
				assert.Equal(t, "Hello! How can I help?", text)
				assert.Equal(t, 3, prov.Attempts(), "exactly the policy's attempts")
				assert.Equal(t, []time.Duration{5 * time.Second, 10 * time.Second}, prov.Gaps())
				assert.Equal(t, 15*time.Second, time.Since(start))
				assert.Equal(t, []int{502, c.overloaded.Status, 200}, rec.statuses())
				calls := prov.Received()
				for _, call := range calls {
					assert.Equal(t, calls[0].Body, call.Body, "every attempt carries the whole body")
				}
			})
		})
	}
}

// langchaingo marks a stream only with "stream":true in the body, after
// the messages and before other members, and sends no Accept header.
// llmretry's scanner finds it wherever it is, in a body of any size
// (langchaingo_*_stream.http in testdata/clients): an error before the
// stream starts is the caller's, sent once.
func TestLangchainStream(t *testing.T) {
	for _, c := range lcClients() {
		t.Run(c.name+"/succeeds", func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				prov := testkit.NewProvider(c.stream)
				text, streamed, err := lcAsk(c.llm(t, retrying(t, prov, llmretry.Policy{})), "Say hello.", true)
				require.NoError(t, err)
				assert.Equal(t, "Hello! How can I help?", streamed, "every chunk reached the streaming func")
				assert.Equal(t, "Hello! How can I help?", text)
				assert.Equal(t, 1, prov.Attempts())
			})
		})

		t.Run(c.name+"/error first, small body: sent once by default", func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				prov := testkit.NewProvider(c.overloaded, c.stream)
				rt := retrying(t, prov, llmretry.Policy{Waits: []time.Duration{2 * time.Second}})
				_, streamed, err := lcAsk(c.llm(t, rt), "Say hello.", true)
				require.Error(t, err)
				assert.Empty(t, streamed)
				assert.Equal(t, 1, prov.Attempts(), "the caller got the first attempt's error")
				assert.True(t, llmretry.IsStream(prov.Received()[0].Request(t)))
			})
		})

		t.Run(c.name+"/error first, 9 KiB body: sent once by default", func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				prov := testkit.NewProvider(c.overloaded, c.stream)
				rt := retrying(t, prov, llmretry.Policy{Waits: []time.Duration{2 * time.Second}})
				_, streamed, err := lcAsk(c.llm(t, rt), longPrompt(), true)
				require.Error(t, err)
				assert.Empty(t, streamed)
				body := prov.Received()[0].Body
				assert.Greater(t, strings.Index(body, `"stream":true`), 8<<10, "in the middle of a large body")
				assert.True(t, llmretry.IsStream(prov.Received()[0].Request(t)))
				assert.Equal(t, 1, prov.Attempts(), "the caller got the first attempt's error")
			})
		})
	}
}

// What the caller of langchaingo sees once llmretry gives up (k = 2, so 3
// attempts). Both LLMs turn a failed response into a plain string error
// ("API returned unexpected status code: N[: message]"): no type to test,
// no headers. For a failed connection they differ: the Anthropic LLM wraps
// net/http's error with %w, so *llmretry.Exhausted and the cause are
// reachable; the OpenAI LLM replaces any net.Error — which net/http's
// *url.Error always is — with the string "network error: failed to reach
// API server", so errors.As finds nothing and the attempts are counted
// with Policy.OnAttempt instead.
func TestLangchainExhausted(t *testing.T) {
	tests := []struct {
		client  string
		label   string
		failure testkit.Reply
		want    string // the error's text
		chain   bool   // *llmretry.Exhausted and the cause are reachable
	}{
		{client: "openai", label: "502", failure: testkit.BadGateway(), want: "API returned unexpected status code: 502"},
		{client: "openai", label: "429", failure: testkit.OpenAIRateLimited("2"), want: "API returned unexpected status code: 429: Rate limit reached for gpt-4o-mini"},
		{client: "openai", label: "conn refused", failure: testkit.Refused(), want: "network error: failed to reach API server"},
		{client: "anthropic", label: "502", failure: testkit.BadGateway(), want: "anthropic: failed to create message: API returned unexpected status code: 502"},
		{client: "anthropic", label: "529", failure: testkit.AnthropicOverloaded(), want: "anthropic: failed to create message: API returned unexpected status code: 529: Overloaded"},
		{client: "anthropic", label: "conn refused", failure: testkit.Refused(), want: "anthropic: failed to create message: send request: Post \"" + fakeAnthropicV1 + "/messages\": llmretry: gave up after 3 attempts, retries spent", chain: true},
	}
	clients := map[string]lcClient{}
	for _, c := range lcClients() {
		clients[c.name] = c
	}
	for _, tt := range tests {
		t.Run(tt.client+"/"+tt.label, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				prov := testkit.NewProvider(tt.failure)
				var rec recorder
				p := layerPolicy()
				p.OnAttempt = rec.on
				_, _, err := lcAsk(clients[tt.client].llm(t, retrying(t, prov, p)), "Say hello.", false)
				require.Error(t, err)
				assert.True(t, strings.HasPrefix(err.Error(), tt.want), "error %q", err)
				assert.Equal(t, layerK+1, prov.Attempts(), "no retries but llmretry's")

				var ex *llmretry.Exhausted
				assert.Equal(t, tt.chain, errors.As(err, &ex), "*llmretry.Exhausted reachable")
				if tt.failure.Err == nil {
					return
				}
				assert.Equal(t, tt.chain, errors.Is(err, syscall.ECONNREFUSED), "the cause reachable")
				if tt.chain {
					assert.Equal(t, layerK+1, ex.Attempts)
				}
				// OnAttempt sees every attempt and its cause, whatever the
				// client does with the error.
				require.Len(t, rec.attempts, layerK+1)
				for _, a := range rec.attempts {
					assert.ErrorIs(t, a.Err, syscall.ECONNREFUSED)
				}
			})
		})
	}
}
