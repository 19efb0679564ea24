package interop

// The recipes of docs/clients.md for going around a provider that cannot
// answer in time (Policy.Fallback), each through the real client: openai-go
// from OpenAI to Azure OpenAI, anthropic-sdk-go from key A to key B and to
// another model. Each fallback host must answer the caller with its own
// response and receive its own credential and no byte of the primary's.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2"
	antoption "github.com/anthropics/anthropic-sdk-go/v2/option"
	"github.com/llmretry/llmretry"
	"github.com/openai/openai-go/v3"
	oaoption "github.com/openai/openai-go/v3/option"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The fallbacks' hosts and credentials in these tests.
const (
	fakeAzureURL           = "https://my-resource.openai.azure.test/openai/deployments/gpt-4o"
	azureAPIVersion        = "2024-10-21"
	dummyAzureKey          = "azure-dummy-interop-test"
	dummyAnthropicKeyB     = "sk-ant-key-b-dummy-interop"
	anthropicFallbackModel = "claude-haiku-4-5"
)

// hosts sends each request to the provider of its URL's host, in memory: a
// primary and its fallbacks under one base transport.
type hosts map[string]*provider

func (h hosts) RoundTrip(r *http.Request) (*http.Response, error) {
	p, found := h[r.URL.Host]
	if !found {
		return nil, fmt.Errorf("no provider at %s", r.URL.Host)
	}
	return p.RoundTrip(r)
}

// routes returns the route each recorded attempt took.
func (r *recorder) routes() []int {
	r.mu.Lock()
	defer r.mu.Unlock()
	var rs []int
	for _, a := range r.attempts {
		rs = append(rs, a.Route)
	}
	return rs
}

// assertNoByteOf checks that no part of what reached a fallback (path,
// query, any header's name or value, body) contains secret.
func assertNoByteOf(t *testing.T, secret string, calls []call) {
	t.Helper()
	for i, c := range calls {
		assert.NotContains(t, c.path+"?"+c.query, secret, "call %d: the URL", i+1)
		assert.NotContains(t, c.body, secret, "call %d: the body", i+1)
		for name, vs := range c.header {
			for _, v := range vs {
				assert.NotContains(t, name+": "+v, secret, "call %d: header %s", i+1, name)
			}
		}
	}
}

// --- openai-go: OpenAI direct, Azure OpenAI when it cannot answer ---

// azureRoute is the recipe's Route from openai-go's base to an Azure
// OpenAI deployment: RouteTo with the deployment's path and the api-key
// header, then the api-version query Azure asks for (RouteTo's bases take
// no query). It also drops openai-go's OpenAI-Organization and
// OpenAI-Project headers: they name the primary's account (not
// credentials, so llmretry keeps them), which Azure has no use for.
func azureRoute(t testing.TB, fromBase, toBase string) llmretry.Route {
	t.Helper()
	toAzure, err := llmretry.RouteTo(fromBase, toBase, http.Header{"Api-Key": {dummyAzureKey}})
	require.NoError(t, err)
	return func(r *http.Request) (*http.Request, error) {
		r, err := toAzure(r)
		if err != nil {
			return nil, err
		}
		q := r.URL.Query()
		q.Set("api-version", azureAPIVersion)
		r.URL.RawQuery = q.Encode()
		r.Header.Del("OpenAI-Organization")
		r.Header.Del("OpenAI-Project")
		return r, nil
	}
}

// azureChatCompletion is Azure OpenAI's answer from the gpt-4o deployment:
// its own model name and usage, and Azure's content-filter results.
func azureChatCompletion(text string) reply {
	r := openAIChatCompletion(text)
	r.body = strings.NewReplacer(
		`"model": "gpt-4o-mini-2024-07-18"`, `"model": "gpt-4o-2024-11-20"`,
		`"prompt_tokens": 19, "completion_tokens": 10, "total_tokens": 29`, `"prompt_tokens": 21, "completion_tokens": 7, "total_tokens": 28`,
		`"service_tier": "default",`, `"prompt_filter_results": [{"prompt_index": 0, "content_filter_results": {}}],`,
	).Replace(r.body)
	r.header = http.Header{"Content-Type": {"application/json"}, "Apim-Request-Id": {"1f5c0e7a-2b9d-4c3e-8f6a-1b2c3d4e5f60"}, "X-Ms-Region": {"Sweden Central"}}
	return r
}

// openai-go under llmretry with Azure OpenAI as its fallback: OpenAI's 503
// (a refused connection, a 429 asking for an hour, a spent quota) moves the call
// to Azure at once; the caller reads Azure's answer, its model name and
// usage; Azure receives its own key, the deployment's path and
// api-version, and nothing of OpenAI's key or account.
func TestOpenAIFallbackToAzure(t *testing.T) {
	for _, tc := range []struct {
		name string
		down reply
	}{
		{"503", openAIError(503, "The server is overloaded or not ready yet.", "server_error", "", "")},
		{"a refused connection", connRefused()},
		{"a 429 asking for an hour", openAIRateLimited("3600")},
		{"a spent quota", openAIInsufficientQuota()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				openAI := newProvider(tc.down)
				azure := newProvider(azureChatCompletion("Hello from Azure!"))
				var rec recorder
				rt := retrying(t, hosts{"api.openai.test": openAI, "my-resource.openai.azure.test": azure}, llmretry.Policy{
					Waits:     []time.Duration{15 * time.Second, 45 * time.Second},
					OnAttempt: rec.on,
					Fallback:  []llmretry.Route{azureRoute(t, strings.TrimSuffix(fakeOpenAIURL, "/"), fakeAzureURL)},
				})
				client := openAIClient(fakeOpenAIURL, rt, oaoption.WithMaxRetries(0), oaoption.WithOrganization("org-dummy"), oaoption.WithProject("proj_dummy"))

				start := time.Now()
				got, err := client.Chat.Completions.New(context.Background(), openAIParams())
				require.NoError(t, err)
				assert.Zero(t, time.Since(start), "at once: no wait on the primary")
				require.Len(t, got.Choices, 1)
				assert.Equal(t, "Hello from Azure!", got.Choices[0].Message.Content)
				assert.Equal(t, "gpt-4o-2024-11-20", got.Model, "the fallback's own model")
				assert.Equal(t, int64(21), got.Usage.PromptTokens, "the fallback's own usage")
				assert.Equal(t, int64(7), got.Usage.CompletionTokens)
				assert.Equal(t, int64(28), got.Usage.TotalTokens)

				assert.Equal(t, 1, openAI.attempts())
				assert.Equal(t, "Bearer "+dummyOpenAIKey, openAI.received()[0].header.Get("Authorization"))
				require.Equal(t, 1, azure.attempts())
				c := azure.received()[0]
				assert.Equal(t, "/openai/deployments/gpt-4o/chat/completions", c.path)
				assert.Equal(t, "api-version="+azureAPIVersion, c.query)
				assert.Equal(t, dummyAzureKey, c.header.Get("Api-Key"))
				assert.Empty(t, c.header.Values("Authorization"))
				assert.Empty(t, c.header.Values("OpenAI-Organization"))
				assert.Empty(t, c.header.Values("OpenAI-Project"))
				assert.Equal(t, openAI.received()[0].body, c.body, "the caller's whole body")
				assertNoByteOf(t, dummyOpenAIKey, azure.received())
				assertNoByteOf(t, "org-dummy", azure.received())

				assert.Equal(t, []int{0, 1}, rec.routes())
				assert.Equal(t, "my-resource.openai.azure.test", rec.attempts[1].Request.URL.Host)
			})
		})
	}

	t.Run("a 400 stays with OpenAI", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			openAI := newProvider(openAIError(400, "Invalid value for 'temperature'.", "invalid_request_error", "temperature", "invalid_value"))
			azure := newProvider(azureChatCompletion("never"))
			rt := retrying(t, hosts{"api.openai.test": openAI, "my-resource.openai.azure.test": azure}, llmretry.Policy{
				Fallback: []llmretry.Route{azureRoute(t, strings.TrimSuffix(fakeOpenAIURL, "/"), fakeAzureURL)},
			})
			client := openAIClient(fakeOpenAIURL, rt, oaoption.WithMaxRetries(0))
			_, err := client.Chat.Completions.New(context.Background(), openAIParams())
			var apiErr *openai.Error
			require.ErrorAs(t, err, &apiErr)
			assert.Equal(t, 400, apiErr.StatusCode)
			assert.Zero(t, azure.attempts())
			if ex := llmretry.GaveUp(apiErr.Response); assert.NotNil(t, ex) {
				assert.Equal(t, []int{0}, ex.Routes)
			}
		})
	})

	t.Run("both down: the record names both routes", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			openAI := newProvider(badGateway())
			azure := newProvider(openAIError(503, "The service is temporarily unable to process your request.", "server_error", "", ""))
			rt := retrying(t, hosts{"api.openai.test": openAI, "my-resource.openai.azure.test": azure}, llmretry.Policy{
				Waits:      []time.Duration{15 * time.Second},
				MaxRetries: 1,
				Fallback:   []llmretry.Route{azureRoute(t, strings.TrimSuffix(fakeOpenAIURL, "/"), fakeAzureURL)},
			})
			client := openAIClient(fakeOpenAIURL, rt, oaoption.WithMaxRetries(0))
			_, err := client.Chat.Completions.New(context.Background(), openAIParams())
			var apiErr *openai.Error
			require.ErrorAs(t, err, &apiErr)
			assert.Equal(t, 503, apiErr.StatusCode, "the last attempt's: Azure's")
			assert.Equal(t, 1, openAI.attempts())
			assert.Equal(t, 1, azure.attempts(), "the move was the policy's one retry")
			if ex := llmretry.GaveUp(apiErr.Response); assert.NotNil(t, ex) {
				assert.Equal(t, []int{0, 1}, ex.Routes)
				assert.ErrorIs(t, ex.Reason, llmretry.ErrRetriesSpent)
				assert.Contains(t, ex.Error(), "on routes 0 (primary), 1")
			}
		})
	})
}

// The same over real connections, streaming: OpenAI's stream opens with an
// error chunk (RetryStreams), Azure's stream is read whole, and Azure's
// server sees its own key and no byte of OpenAI's.
func TestOpenAIFallbackToAzureStream(t *testing.T) {
	openAI := newProvider(reply{status: 200, header: openAIHeaders("text/event-stream; charset=utf-8"),
		events: []string{`data: {"error":{"message":"The server had an error while processing your request.","type":"server_error","param":null,"code":null}}` + "\n\n"}})
	azure := newProvider(openAIChatStream("Hello", " from", " Azure!"))
	openAISrv, azureSrv := httptest.NewServer(openAI), httptest.NewServer(azure)
	defer openAISrv.Close()
	defer azureSrv.Close()

	var rec recorder
	var log bytes.Buffer
	logAttempt := llmretry.LogAttempts(slog.New(slog.NewTextHandler(&log, nil)))
	rt := retrying(t, http.DefaultTransport, llmretry.Policy{
		RetryStreams: true,
		OnAttempt:    func(a llmretry.Attempt) { rec.on(a); logAttempt(a) },
		Fallback:     []llmretry.Route{azureRoute(t, openAISrv.URL+"/v1", azureSrv.URL+"/openai/deployments/gpt-4o")},
	})
	client := openAIClient(openAISrv.URL+"/v1/", rt, oaoption.WithMaxRetries(0))
	stream := client.Chat.Completions.NewStreaming(context.Background(), openAIParams())
	defer stream.Close()
	var text strings.Builder
	for stream.Next() {
		for _, c := range stream.Current().Choices {
			text.WriteString(c.Delta.Content)
		}
	}
	require.NoError(t, stream.Err())
	assert.Equal(t, "Hello from Azure!", text.String())
	assert.Equal(t, []int{0, 1}, rec.routes())
	lines := strings.Split(strings.TrimSpace(log.String()), "\n")
	require.Len(t, lines, 2)
	assert.NotContains(t, lines[0], "route=")
	assert.Contains(t, lines[1], "route=1")
	assert.NotContains(t, log.String(), dummyAzureKey)
	require.Equal(t, 1, azure.attempts())
	c := azure.received()[0]
	assert.Equal(t, "/openai/deployments/gpt-4o/chat/completions", c.path)
	assert.Equal(t, dummyAzureKey, c.header.Get("Api-Key"))
	assert.Contains(t, c.body, `"stream":true`)
	assertNoByteOf(t, dummyOpenAIKey, azure.received())
}

// --- anthropic-sdk-go: key A, then key B; another model ---

// withModel wraps route so that the request it sends asks for model: the
// recipe's Route for a fallback to another model. It rewrites the JSON
// body's top-level "model" (keeping every other field as sent) and sets
// the body's length and GetBody to match.
func withModel(route llmretry.Route, model string) llmretry.Route {
	return func(r *http.Request) (*http.Request, error) {
		r, err := route(r)
		if err != nil {
			return nil, err
		}
		raw, err := io.ReadAll(r.Body)
		r.Body.Close()
		if err != nil {
			return nil, err
		}
		var body map[string]json.RawMessage
		if err := json.Unmarshal(raw, &body); err != nil {
			return nil, fmt.Errorf("a body to rewrite the model of: %w", err)
		}
		if body["model"], err = json.Marshal(model); err != nil {
			return nil, err
		}
		if raw, err = json.Marshal(body); err != nil {
			return nil, err
		}
		r.Body, r.ContentLength = io.NopCloser(bytes.NewReader(raw)), int64(len(raw))
		r.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(raw)), nil }
		return r, nil
	}
}

// keyB is the recipe's Route from key A to key B: the same base, key B in
// x-api-key.
func keyB(t testing.TB, base string) llmretry.Route {
	t.Helper()
	r, err := llmretry.RouteTo(base, base, http.Header{"X-Api-Key": {dummyAnthropicKeyB}})
	require.NoError(t, err)
	return r
}

// anthropicAnswer is a message from model with its own usage.
func anthropicAnswer(text, model string, in, out int) reply {
	r := anthropicMessage(text)
	r.body = strings.NewReplacer(
		`"model": "claude-sonnet-4-5-20250929"`, `"model": `+quote(model),
		`"input_tokens": 12`, fmt.Sprintf(`"input_tokens": %d`, in),
		`"output_tokens": 9`, fmt.Sprintf(`"output_tokens": %d`, out),
	).Replace(r.body)
	return r
}

// anthropic-sdk-go under llmretry with key B as its fallback, on the same
// host: key A's 529 overloaded, a 429 asking for an hour, or its spent
// monthly cap moves the call to key B at once; the caller reads key B's
// answer and usage; key B's requests carry key B and no byte of key A.
// With withModel, the fallback asks for another model, and the caller
// reads that model's name.
func TestAnthropicFallbackToKeyB(t *testing.T) {
	base := strings.TrimSuffix(fakeAnthropicURL, "/")
	for _, tc := range []struct {
		name  string
		down  reply
		model string // the fallback's model; "" the caller's
	}{
		{"529 overloaded", anthropicError(529, "overloaded_error", "Overloaded"), ""},
		{"a 429 asking for an hour", anthropicRateLimited("3600"), ""},
		{"key A's spend limit", anthropicSpendLimit(), ""},
		{"529 overloaded, to another model", anthropicError(529, "overloaded_error", "Overloaded"), anthropicFallbackModel},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				answeredBy := "claude-sonnet-4-5-20250929"
				route := keyB(t, base)
				if tc.model != "" {
					route, answeredBy = withModel(route, tc.model), "claude-haiku-4-5-20251001"
				}
				// One host, two keys: the fake answers by the key it receives.
				prov := newProviderFunc(func(c call, _ int) reply {
					if c.header.Get("X-Api-Key") == dummyAnthropicKeyB {
						return anthropicAnswer("Hello from key B!", answeredBy, 14, 5)
					}
					return tc.down
				})
				var rec recorder
				rt := retrying(t, prov, llmretry.Policy{
					Waits:     []time.Duration{15 * time.Second, 45 * time.Second},
					OnAttempt: rec.on,
					Fallback:  []llmretry.Route{route},
				})
				client := anthropicClient(fakeAnthropicURL, rt, antoption.WithMaxRetries(0))

				start := time.Now()
				msg, err := client.Messages.New(context.Background(), anthropicParams())
				require.NoError(t, err)
				assert.Zero(t, time.Since(start), "at once")
				require.Len(t, msg.Content, 1)
				assert.Equal(t, "Hello from key B!", msg.Content[0].Text)
				assert.Equal(t, anthropic.Model(answeredBy), msg.Model, "the fallback's own model")
				assert.Equal(t, int64(14), msg.Usage.InputTokens, "the fallback's own usage")
				assert.Equal(t, int64(5), msg.Usage.OutputTokens)

				calls := prov.received()
				require.Len(t, calls, 2)
				primary, fallback := calls[0], calls[1]
				assert.Contains(t, primary.header.Get("Authorization")+primary.header.Get("X-Api-Key"), dummyAnthropicKey)
				assert.Equal(t, "/v1/messages", fallback.path)
				assert.Equal(t, dummyAnthropicKeyB, fallback.header.Get("X-Api-Key"))
				assert.Empty(t, fallback.header.Values("Authorization"))
				assert.Equal(t, primary.header.Get("Anthropic-Version"), fallback.header.Get("Anthropic-Version"), "the API's own headers kept")
				assertNoByteOf(t, dummyAnthropicKey, calls[1:])
				if tc.model == "" {
					assert.Equal(t, primary.body, fallback.body, "the caller's whole body")
				} else {
					var p, f map[string]any
					require.NoError(t, json.Unmarshal([]byte(primary.body), &p))
					require.NoError(t, json.Unmarshal([]byte(fallback.body), &f))
					assert.Equal(t, anthropicModel, p["model"])
					assert.Equal(t, tc.model, f["model"], "the Route's model")
					delete(p, "model")
					delete(f, "model")
					assert.Equal(t, p, f, "every other field as the caller sent it")
				}
				assert.Equal(t, []int{0, 1}, rec.routes())
			})
		})
	}

	// The trap withModel avoids: a Route that changes the body's length
	// but not ContentLength. net/http refuses the request before sending
	// it; llmretry takes that as the route's fault, not the call's: the
	// route is passed over for the rest of the call, which goes on with
	// key A, and the record says why key B was not asked.
	t.Run("a Route that forgets ContentLength is passed over", func(t *testing.T) {
		prov := newProviderFunc(func(c call, _ int) reply {
			if c.header.Get("X-Api-Key") == dummyAnthropicKeyB {
				return anthropicAnswer("Hello from key B!", "claude-haiku-4-5-20251001", 14, 5)
			}
			return anthropicError(529, "overloaded_error", "Overloaded")
		})
		srv := httptest.NewServer(prov) // net/http checks the length on the wire
		defer srv.Close()
		toB := keyB(t, srv.URL)
		sloppy := func(r *http.Request) (*http.Request, error) {
			r, err := toB(r)
			if err != nil {
				return nil, err
			}
			raw, err := io.ReadAll(r.Body)
			if err != nil {
				return nil, err
			}
			raw = bytes.Replace(raw, []byte(`"`+anthropicModel+`"`), []byte(`"`+anthropicFallbackModel+`"`), 1)
			r.Body = io.NopCloser(bytes.NewReader(raw)) // ContentLength left as the caller's
			return r, nil
		}
		var rec recorder
		rt := retrying(t, http.DefaultTransport, llmretry.Policy{Waits: []time.Duration{10 * time.Millisecond}, MaxRetries: 2, OnAttempt: rec.on, Fallback: []llmretry.Route{sloppy}})
		client := anthropicClient(srv.URL+"/", rt, antoption.WithMaxRetries(0))
		_, err := client.Messages.New(context.Background(), anthropicParams())
		var apiErr *anthropic.Error
		require.ErrorAs(t, err, &apiErr)
		assert.Equal(t, 529, apiErr.StatusCode, "key A's own failure, not the route's")
		assert.Equal(t, []int{0, 1, 0, 0}, rec.routes(), "key A, the sloppy route (refused before sending, no retry spent), key A for the two retries")
		assert.Equal(t, 3, prov.attempts(), "key B never reached")
		ex := llmretry.GaveUp(apiErr.Response)
		require.NotNil(t, ex)
		assert.ErrorContains(t, ex.Err, "route 1: its request failed before any answer")
		assert.ErrorContains(t, ex.Err, "ContentLength=")
	})

	t.Run("a 401 stays with key A", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			prov := newProvider(anthropicError(401, "authentication_error", "invalid x-api-key"))
			rt := retrying(t, prov, llmretry.Policy{Fallback: []llmretry.Route{keyB(t, base)}})
			client := anthropicClient(fakeAnthropicURL, rt, antoption.WithMaxRetries(0))
			_, err := client.Messages.New(context.Background(), anthropicParams())
			var apiErr *anthropic.Error
			require.ErrorAs(t, err, &apiErr)
			assert.Equal(t, 401, apiErr.StatusCode)
			assert.Equal(t, 1, prov.attempts(), "key B never asked")
		})
	})
}

// The same over real connections, streaming, with key B on another
// server and another model: key A's stream opens with overloaded_error
// (RetryStreams), key B's is read whole; key B's server sees key B, the
// other model, the stream flag, and no byte of key A.
func TestAnthropicFallbackToKeyBStream(t *testing.T) {
	overloaded := reply{status: 200, header: anthropicHeaders("text/event-stream; charset=utf-8"),
		events: []string{"event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\",\"message\":\"Overloaded\"}}\n\n"}}
	keyA, keyBProv := newProvider(overloaded), newProvider(anthropicStream("Hello", " from", " key B!"))
	srvA, srvB := httptest.NewServer(keyA), httptest.NewServer(keyBProv)
	defer srvA.Close()
	defer srvB.Close()

	toB, err := llmretry.RouteTo(srvA.URL, srvB.URL, http.Header{"X-Api-Key": {dummyAnthropicKeyB}})
	require.NoError(t, err)
	var rec recorder
	rt := retrying(t, http.DefaultTransport, llmretry.Policy{RetryStreams: true, OnAttempt: rec.on, Fallback: []llmretry.Route{withModel(toB, anthropicFallbackModel)}})
	text, err := anthropicStreamText(t, anthropicClient(srvA.URL+"/", rt, antoption.WithMaxRetries(0)))
	require.NoError(t, err)
	assert.Equal(t, "Hello from key B!", text)
	assert.Equal(t, []int{0, 1}, rec.routes())
	require.Equal(t, 1, keyBProv.attempts())
	c := keyBProv.received()[0]
	assert.Equal(t, "/v1/messages", c.path)
	assert.Contains(t, c.body, `"model":"`+anthropicFallbackModel+`"`)
	assert.Contains(t, c.body, `"stream":true`)
	assert.Equal(t, dummyAnthropicKeyB, c.header.Get("X-Api-Key"))
	assert.Empty(t, c.header.Values("Authorization"))
	assertNoByteOf(t, dummyAnthropicKey, keyBProv.received())
}

// --- The README's set-up: one Transport, both routes ---

// The README's five lines: one Transport under both SDKs, with OpenAI →
// Azure OpenAI (its v1 API: no api-version, the model is the deployment's
// name) and Anthropic key A → key B. Each route applies to its own API
// only: an OpenAI call takes route 1, an Anthropic call passes route 1
// over (RouteTo refuses a request outside its fromBase) and takes route 2.
func TestFallbackReadmeSetUp(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		azureV1 := strings.TrimSuffix(fakeAzureURL, "/deployments/gpt-4o") + "/v1"
		azure, err := llmretry.RouteTo(strings.TrimSuffix(fakeOpenAIURL, "/"), azureV1, http.Header{"Api-Key": {dummyAzureKey}})
		require.NoError(t, err)
		keyB, err := llmretry.RouteTo(strings.TrimSuffix(fakeAnthropicURL, "/"), strings.TrimSuffix(fakeAnthropicURL, "/"), http.Header{"X-Api-Key": {dummyAnthropicKeyB}})
		require.NoError(t, err)

		openAI := newProvider(openAIError(503, "The server is overloaded or not ready yet.", "server_error", "", ""))
		azureProv := newProvider(azureChatCompletion("Hello from Azure!"))
		anthropicProv := newProviderFunc(func(c call, _ int) reply {
			if c.header.Get("X-Api-Key") == dummyAnthropicKeyB {
				return anthropicAnswer("Hello from key B!", "claude-sonnet-4-5-20250929", 14, 5)
			}
			return anthropicError(529, "overloaded_error", "Overloaded")
		})
		var rec recorder
		rt := retrying(t, hosts{"api.openai.test": openAI, "my-resource.openai.azure.test": azureProv, "api.anthropic.test": anthropicProv}, llmretry.Policy{
			OnAttempt: rec.on,
			Fallback:  []llmretry.Route{azure, keyB},
		})

		oa := openAIClient(fakeOpenAIURL, rt, oaoption.WithMaxRetries(0))
		got, err := oa.Chat.Completions.New(context.Background(), openAIParams())
		require.NoError(t, err)
		assert.Equal(t, "gpt-4o-2024-11-20", got.Model)
		require.Equal(t, 1, azureProv.attempts())
		c := azureProv.received()[0]
		assert.Equal(t, "/openai/v1/chat/completions", c.path)
		assert.Empty(t, c.query)
		assert.Equal(t, dummyAzureKey, c.header.Get("Api-Key"))
		assert.Contains(t, c.body, `"model":"gpt-4o-mini"`, "on Azure's v1 API, the name of a deployment")
		assertNoByteOf(t, dummyOpenAIKey, azureProv.received())
		assert.Equal(t, []int{0, 1}, rec.routes())

		rec = recorder{}
		an := anthropicClient(fakeAnthropicURL, rt, antoption.WithMaxRetries(0))
		msg, err := an.Messages.New(context.Background(), anthropicParams())
		require.NoError(t, err)
		assert.Equal(t, "Hello from key B!", msg.Content[0].Text)
		assert.Equal(t, []int{0, 2}, rec.routes(), "route 1 (Azure) passed over")
		assert.Equal(t, 2, anthropicProv.attempts())
		assertNoByteOf(t, dummyAnthropicKey, anthropicProv.received()[1:])
		assert.Equal(t, 1, azureProv.attempts(), "Azure never saw the Anthropic call")
	})
}
