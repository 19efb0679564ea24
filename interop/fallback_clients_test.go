package interop

// The recipes of docs/clients.md for going around a provider that cannot
// answer in time or refuses the primary's key (Policy.Fallback), each
// through the real client: openai-go from OpenAI to Azure OpenAI,
// anthropic-sdk-go from key A to key B and to another model. Each fallback
// host must answer the caller with its own response and receive its own
// credential and no byte of the primary's.

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
	"github.com/llmretry/llmretry/internal/testkit"
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

// assertNoByteOf checks that no part of what reached a fallback (path,
// query, any header's name or value, body) contains secret.
func assertNoByteOf(t *testing.T, secret string, calls []testkit.Call) {
	t.Helper()
	for i, c := range calls {
		assert.NotContains(t, c.Path+"?"+c.Query, secret, "call %d: the URL", i+1)
		assert.NotContains(t, c.Body, secret, "call %d: the body", i+1)
		for name, vs := range c.Header {
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
func azureChatCompletion(text string) testkit.Reply {
	r := testkit.OpenAIChatCompletion(text)
	r.Body = strings.NewReplacer(
		`"model": "gpt-4o-mini-2024-07-18"`, `"model": "gpt-4o-2024-11-20"`,
		`"prompt_tokens": 19, "completion_tokens": 10, "total_tokens": 29`, `"prompt_tokens": 21, "completion_tokens": 7, "total_tokens": 28`,
		`"service_tier": "default",`, `"prompt_filter_results": [{"prompt_index": 0, "content_filter_results": {}}],`,
	).Replace(r.Body)
	r.Header = http.Header{"Content-Type": {"application/json"}, "Apim-Request-Id": {"1f5c0e7a-2b9d-4c3e-8f6a-1b2c3d4e5f60"}, "X-Ms-Region": {"Sweden Central"}}
	return r
}

// openai-go under llmretry with Azure OpenAI as its fallback: OpenAI's 503
// or a refused connection is a blip the first time, retried on OpenAI
// after its wait, and moves the call to Azure the second; a 429 asking for
// an hour or a spent quota says waiting cannot win and moves it at once.
// The caller reads Azure's answer, its model name and usage; Azure
// receives its own key, the deployment's path and api-version, and
// nothing of OpenAI's key or account; the record says why the call moved.
func TestOpenAIFallbackToAzure(t *testing.T) {
	for _, tc := range []struct {
		name  string
		down  testkit.Reply
		blip  bool   // the first failure is retried on OpenAI after its wait
		moved string // Attempt.Moved on the last OpenAI attempt
	}{
		{"503", testkit.OpenAIOverloaded(), true, "provider down"},
		{"a refused connection", testkit.Refused(), true, "provider down"},
		{"a 429 asking for an hour", testkit.OpenAIRateLimited("3600"), false, "waiting cannot win"},
		{"a spent quota", testkit.OpenAIInsufficientQuota(), false, "waiting cannot win"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				openAI := testkit.NewProvider(tc.down)
				azure := testkit.NewProvider(azureChatCompletion("Hello from Azure!"))
				var rec recorder
				rt := retrying(t, testkit.Hosts{"api.openai.test": openAI, "my-resource.openai.azure.test": azure}, llmretry.Policy{
					Waits:     []time.Duration{15 * time.Second, 45 * time.Second},
					OnAttempt: rec.on,
					Fallback:  []llmretry.Route{azureRoute(t, strings.TrimSuffix(fakeOpenAIURL, "/"), fakeAzureURL)},
				})
				client := openAIClient(fakeOpenAIURL, rt, oaoption.WithMaxRetries(0), oaoption.WithOrganization("org-dummy"), oaoption.WithProject("proj_dummy"))

				// A blip waits the schedule's first wait on OpenAI; then, or
				// at once, the call moves.
				primary, wait, routes := 1, time.Duration(0), []int{0, 1}
				if tc.blip {
					primary, wait, routes = 2, 15*time.Second, []int{0, 0, 1}
				}
				start := time.Now()
				got, err := client.Chat.Completions.New(context.Background(), openAIParams())
				require.NoError(t, err)
				assert.Equal(t, wait, time.Since(start))
				require.Len(t, got.Choices, 1)
				assert.Equal(t, "Hello from Azure!", got.Choices[0].Message.Content)
				assert.Equal(t, "gpt-4o-2024-11-20", got.Model, "the fallback's own model")
				assert.Equal(t, int64(21), got.Usage.PromptTokens, "the fallback's own usage")
				assert.Equal(t, int64(7), got.Usage.CompletionTokens)
				assert.Equal(t, int64(28), got.Usage.TotalTokens)

				assert.Equal(t, primary, openAI.Attempts())
				assert.Equal(t, "Bearer "+dummyOpenAIKey, openAI.Received()[0].Header.Get("Authorization"))
				require.Equal(t, 1, azure.Attempts())
				c := azure.Received()[0]
				assert.Equal(t, "/openai/deployments/gpt-4o/chat/completions", c.Path)
				assert.Equal(t, "api-version="+azureAPIVersion, c.Query)
				assert.Equal(t, dummyAzureKey, c.Header.Get("Api-Key"))
				assert.Empty(t, c.Header.Values("Authorization"))
				assert.Empty(t, c.Header.Values("OpenAI-Organization"))
				assert.Empty(t, c.Header.Values("OpenAI-Project"))
				assert.Equal(t, openAI.Received()[0].Body, c.Body, "the caller's whole body")
				assertNoByteOf(t, dummyOpenAIKey, azure.Received())
				assertNoByteOf(t, "org-dummy", azure.Received())

				assert.Equal(t, routes, rec.routes())
				for i, a := range rec.All() {
					if i == primary-1 {
						assert.Equal(t, tc.moved, a.Moved, "attempt %d", a.N)
					} else {
						assert.Empty(t, a.Moved, "attempt %d", a.N)
					}
				}
				assert.Equal(t, "my-resource.openai.azure.test", rec.All()[primary].Request.URL.Host)
			})
		})
	}

	t.Run("a 400 stays with OpenAI", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			openAI := testkit.NewProvider(testkit.OpenAIError(400, "Invalid value for 'temperature'.", "invalid_request_error", "temperature", "invalid_value"))
			azure := testkit.NewProvider(azureChatCompletion("never"))
			rt := retrying(t, testkit.Hosts{"api.openai.test": openAI, "my-resource.openai.azure.test": azure}, llmretry.Policy{
				Fallback: []llmretry.Route{azureRoute(t, strings.TrimSuffix(fakeOpenAIURL, "/"), fakeAzureURL)},
			})
			client := openAIClient(fakeOpenAIURL, rt, oaoption.WithMaxRetries(0))
			apiErr := openAIError(t, client)
			assert.Equal(t, 400, apiErr.StatusCode)
			assert.Equal(t, 1, openAI.Attempts())
			assert.Zero(t, azure.Attempts())
			if ex := llmretry.GaveUp(apiErr.Response); assert.NotNil(t, ex) {
				assert.Equal(t, []int{0}, ex.Routes)
			}
		})
	})

	t.Run("both down: the record names both routes", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			openAI := testkit.NewProvider(testkit.BadGateway())
			azure := testkit.NewProvider(testkit.OpenAIError(503, "The service is temporarily unable to process your request.", "server_error", "", ""))
			rt := retrying(t, testkit.Hosts{"api.openai.test": openAI, "my-resource.openai.azure.test": azure}, llmretry.Policy{
				Waits:      []time.Duration{15 * time.Second},
				MaxRetries: 1,
				Fallback:   []llmretry.Route{azureRoute(t, strings.TrimSuffix(fakeOpenAIURL, "/"), fakeAzureURL)},
			})
			client := openAIClient(fakeOpenAIURL, rt, oaoption.WithMaxRetries(0))
			apiErr := openAIError(t, client)
			assert.Equal(t, 503, apiErr.StatusCode, "the last attempt's: Azure's")
			assert.Equal(t, 2, openAI.Attempts(), "the blip's retry was the policy's one retry")
			assert.Equal(t, []time.Duration{15 * time.Second}, openAI.Gaps())
			assert.Equal(t, 1, azure.Attempts(), "a route not tried yet is tried with the schedule spent")
			if ex := llmretry.GaveUp(apiErr.Response); assert.NotNil(t, ex) {
				assert.Equal(t, []int{0, 1}, ex.Routes)
				assert.ErrorIs(t, ex.Reason, llmretry.ErrRetriesSpent)
				assert.Contains(t, ex.Error(), "on routes 0 (primary), 1")
			}
		})
	})
}

// The same over real connections, streaming: OpenAI's stream opens with an
// error chunk (RetryStreams), once a blip retried on OpenAI after its wait,
// twice a move; Azure's stream is read whole, the log says why the call
// moved, and Azure's server sees its own key and no byte of OpenAI's.
func TestOpenAIFallbackToAzureStream(t *testing.T) {
	openAI := testkit.NewProvider(testkit.Reply{Status: 200, Header: testkit.OpenAIHeaders("text/event-stream; charset=utf-8"),
		Events: []string{`data: {"error":{"message":"The server had an error while processing your request.","type":"server_error","param":null,"code":null}}` + "\n\n"}})
	azure := testkit.NewProvider(testkit.OpenAIChatStream("Hello", " from", " Azure!"))
	openAISrv, azureSrv := httptest.NewServer(openAI), httptest.NewServer(azure)
	defer openAISrv.Close()
	defer azureSrv.Close()

	var rec recorder
	var log bytes.Buffer
	logAttempt := llmretry.LogAttempts(slog.New(slog.NewTextHandler(&log, nil)))
	rt := retrying(t, http.DefaultTransport, llmretry.Policy{
		RetryStreams: true,
		Waits:        []time.Duration{10 * time.Millisecond, 10 * time.Millisecond}, // short on a real clock
		OnAttempt:    func(a llmretry.Attempt) { rec.on(a); logAttempt(a) },
		Fallback:     []llmretry.Route{azureRoute(t, openAISrv.URL+"/v1", azureSrv.URL+"/openai/deployments/gpt-4o")},
	})
	client := openAIClient(openAISrv.URL+"/v1/", rt, oaoption.WithMaxRetries(0))
	text, err := openAIStreamText(client)
	require.NoError(t, err)
	assert.Equal(t, "Hello from Azure!", text)
	assert.Equal(t, []int{0, 0, 1}, rec.routes())
	lines := strings.Split(strings.TrimSpace(log.String()), "\n")
	require.Len(t, lines, 3)
	assert.Contains(t, lines[0], "event=server_error")
	assert.Contains(t, lines[0], "retry_in=10ms")
	assert.NotContains(t, lines[0], "moved=")
	assert.Contains(t, lines[1], `moved="provider down"`)
	for _, l := range lines[:2] {
		assert.NotContains(t, l, "route=")
	}
	assert.Contains(t, lines[2], "route=1")
	assert.NotContains(t, lines[2], "moved=")
	assert.NotContains(t, log.String(), dummyAzureKey)
	assert.Equal(t, 2, openAI.Attempts())
	require.Equal(t, 1, azure.Attempts())
	c := azure.Received()[0]
	assert.Equal(t, "/openai/deployments/gpt-4o/chat/completions", c.Path)
	assert.Equal(t, dummyAzureKey, c.Header.Get("Api-Key"))
	assert.Contains(t, c.Body, `"stream":true`)
	assertNoByteOf(t, dummyOpenAIKey, azure.Received())
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
func anthropicAnswer(text, model string, in, out int) testkit.Reply {
	r := testkit.AnthropicMessage(text)
	r.Body = strings.NewReplacer(
		`"model": "claude-sonnet-4-5-20250929"`, `"model": `+testkit.Quote(model),
		`"input_tokens": 12`, fmt.Sprintf(`"input_tokens": %d`, in),
		`"output_tokens": 9`, fmt.Sprintf(`"output_tokens": %d`, out),
	).Replace(r.Body)
	return r
}

// anthropic-sdk-go under llmretry with key B as its fallback, on the same
// host: key A's 529 overloaded is a blip the first time, retried with key A
// after its wait, and moves the call to key B the second; a 429 asking for
// an hour or key A's spent monthly cap moves it at once. The caller reads
// key B's answer and usage; key B's requests carry key B and no byte of
// key A. With withModel, the fallback asks for another model, and the
// caller reads that model's name.
func TestAnthropicFallbackToKeyB(t *testing.T) {
	base := strings.TrimSuffix(fakeAnthropicURL, "/")
	for _, tc := range []struct {
		name  string
		down  testkit.Reply
		blip  bool   // the first failure is retried with key A after its wait
		model string // the fallback's model; "" the caller's
	}{
		{"529 overloaded", testkit.AnthropicOverloaded(), true, ""},
		{"a 429 asking for an hour", testkit.AnthropicRateLimited("3600"), false, ""},
		{"key A's spend limit", testkit.AnthropicSpendLimit(), false, ""},
		{"529 overloaded, to another model", testkit.AnthropicOverloaded(), true, anthropicFallbackModel},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				answeredBy := "claude-sonnet-4-5-20250929"
				route := keyB(t, base)
				if tc.model != "" {
					route, answeredBy = withModel(route, tc.model), "claude-haiku-4-5-20251001"
				}
				// One host, two keys: the fake answers by the key it receives.
				prov := testkit.NewProviderFunc(func(c testkit.Call, _ int) testkit.Reply {
					if c.Header.Get("X-Api-Key") == dummyAnthropicKeyB {
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

				primary, wait, routes := 1, time.Duration(0), []int{0, 1}
				if tc.blip {
					primary, wait, routes = 2, 15*time.Second, []int{0, 0, 1}
				}
				start := time.Now()
				msg, err := client.Messages.New(context.Background(), anthropicParams())
				require.NoError(t, err)
				assert.Equal(t, wait, time.Since(start), "the blip's wait, or none")
				require.Len(t, msg.Content, 1)
				assert.Equal(t, "Hello from key B!", msg.Content[0].Text)
				assert.Equal(t, anthropic.Model(answeredBy), msg.Model, "the fallback's own model")
				assert.Equal(t, int64(14), msg.Usage.InputTokens, "the fallback's own usage")
				assert.Equal(t, int64(5), msg.Usage.OutputTokens)

				calls := prov.Received()
				require.Len(t, calls, primary+1)
				first, fallback := calls[0], calls[primary]
				for _, c := range calls[:primary] {
					assert.Contains(t, c.Header.Get("Authorization")+c.Header.Get("X-Api-Key"), dummyAnthropicKey)
				}
				assert.Equal(t, "/v1/messages", fallback.Path)
				assert.Equal(t, dummyAnthropicKeyB, fallback.Header.Get("X-Api-Key"))
				assert.Empty(t, fallback.Header.Values("Authorization"))
				assert.Equal(t, first.Header.Get("Anthropic-Version"), fallback.Header.Get("Anthropic-Version"), "the API's own headers kept")
				assertNoByteOf(t, dummyAnthropicKey, calls[primary:])
				if tc.model == "" {
					assert.Equal(t, first.Body, fallback.Body, "the caller's whole body")
				} else {
					var p, f map[string]any
					require.NoError(t, json.Unmarshal([]byte(first.Body), &p))
					require.NoError(t, json.Unmarshal([]byte(fallback.Body), &f))
					assert.Equal(t, anthropicModel, p["model"])
					assert.Equal(t, tc.model, f["model"], "the Route's model")
					delete(p, "model")
					delete(f, "model")
					assert.Equal(t, p, f, "every other field as the caller sent it")
				}
				assert.Equal(t, routes, rec.routes())
			})
		})
	}

	// The trap withModel avoids: a Route that changes the body's length
	// but not ContentLength. net/http refuses the request before sending
	// it; llmretry takes that as the route's fault, not the call's: the
	// route is passed over for the rest of the call, which goes on with
	// key A, and the record says why key B was not asked. (Key A's first
	// 529 is a blip, retried with key A; its second moves the call.)
	t.Run("a Route that forgets ContentLength is passed over", func(t *testing.T) {
		prov := testkit.NewProviderFunc(func(c testkit.Call, _ int) testkit.Reply {
			if c.Header.Get("X-Api-Key") == dummyAnthropicKeyB {
				return anthropicAnswer("Hello from key B!", "claude-haiku-4-5-20251001", 14, 5)
			}
			return testkit.AnthropicOverloaded()
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
		apiErr := anthropicError(t, client)
		assert.Equal(t, 529, apiErr.StatusCode, "key A's own failure, not the route's")
		assert.Equal(t, []int{0, 0, 1, 0}, rec.routes(), "key A, its blip's retry, the sloppy route (refused before sending, no retry spent), key A for the second retry")
		assert.Equal(t, 3, prov.Attempts(), "key B never reached")
		ex := llmretry.GaveUp(apiErr.Response)
		require.NotNil(t, ex)
		assert.ErrorContains(t, ex.Err, "route 1: its request failed before any answer")
		assert.ErrorContains(t, ex.Err, "ContentLength=")
	})

	// A 401 refuses key A: key B, a route that sets a credential of its
	// own, answers at once, and key A is not sent the request again.
	t.Run("a 401 answers with key B", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			prov := testkit.NewProviderFunc(func(c testkit.Call, _ int) testkit.Reply {
				if c.Header.Get("X-Api-Key") == dummyAnthropicKeyB {
					return anthropicAnswer("Hello from key B!", "claude-sonnet-4-5-20250929", 14, 5)
				}
				return testkit.AnthropicError(401, "authentication_error", "invalid x-api-key")
			})
			var rec recorder
			rt := retrying(t, prov, llmretry.Policy{OnAttempt: rec.on, Fallback: []llmretry.Route{keyB(t, base)}})
			client := anthropicClient(fakeAnthropicURL, rt, antoption.WithMaxRetries(0))
			start := time.Now()
			msg, err := client.Messages.New(context.Background(), anthropicParams())
			require.NoError(t, err)
			assert.Zero(t, time.Since(start), "at once")
			assert.Equal(t, "Hello from key B!", msg.Content[0].Text)
			calls := prov.Received()
			require.Len(t, calls, 2, "key A once, key B once")
			assert.Contains(t, calls[0].Header.Get("Authorization")+calls[0].Header.Get("X-Api-Key"), dummyAnthropicKey)
			assert.Equal(t, dummyAnthropicKeyB, calls[1].Header.Get("X-Api-Key"))
			assertNoByteOf(t, dummyAnthropicKey, calls[1:])
			assert.Equal(t, []int{0, 1}, rec.routes())
			assert.Equal(t, "credential refused", rec.All()[0].Moved)
		})
	})
}

// The same over real connections, streaming, with key B on another
// server and another model: key A's stream opens with overloaded_error
// (RetryStreams), a blip the first time, retried with key A, and a move
// the second; key B's is read whole; key B's server sees key B, the
// other model, the stream flag, and no byte of key A.
func TestAnthropicFallbackToKeyBStream(t *testing.T) {
	overloaded := testkit.Reply{Status: 200, Header: testkit.AnthropicHeaders("text/event-stream; charset=utf-8"),
		Events: []string{"event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\",\"message\":\"Overloaded\"}}\n\n"}}
	keyA, keyBProv := testkit.NewProvider(overloaded), testkit.NewProvider(testkit.AnthropicStream("Hello", " from", " key B!"))
	srvA, srvB := httptest.NewServer(keyA), httptest.NewServer(keyBProv)
	defer srvA.Close()
	defer srvB.Close()

	toB, err := llmretry.RouteTo(srvA.URL, srvB.URL, http.Header{"X-Api-Key": {dummyAnthropicKeyB}})
	require.NoError(t, err)
	var rec recorder
	rt := retrying(t, http.DefaultTransport, llmretry.Policy{
		RetryStreams: true,
		Waits:        []time.Duration{10 * time.Millisecond, 10 * time.Millisecond}, // short on a real clock
		OnAttempt:    rec.on,
		Fallback:     []llmretry.Route{withModel(toB, anthropicFallbackModel)},
	})
	text, err := anthropicStreamText(t, anthropicClient(srvA.URL+"/", rt, antoption.WithMaxRetries(0)))
	require.NoError(t, err)
	assert.Equal(t, "Hello from key B!", text)
	assert.Equal(t, []int{0, 0, 1}, rec.routes())
	assert.Equal(t, "provider down", rec.All()[1].Moved)
	assert.Equal(t, 2, keyA.Attempts())
	require.Equal(t, 1, keyBProv.Attempts())
	c := keyBProv.Received()[0]
	assert.Equal(t, "/v1/messages", c.Path)
	assert.Contains(t, c.Body, `"model":"`+anthropicFallbackModel+`"`)
	assert.Contains(t, c.Body, `"stream":true`)
	assert.Equal(t, dummyAnthropicKeyB, c.Header.Get("X-Api-Key"))
	assert.Empty(t, c.Header.Values("Authorization"))
	assertNoByteOf(t, dummyAnthropicKey, keyBProv.Received())
}

// --- The README's set-up: one Transport, both routes ---

// The README's set-up, line for line (TestReadmeSnippetsAreCompiled, in
// the root, holds the README to these lines): one Transport under both
// SDKs, with OpenAI → Azure OpenAI (its v1 API: no api-version, the model
// is the deployment's name) and Anthropic key A → key B. The primary's
// first 503 or 529 is a blip, retried on the primary; the second moves the
// call. Each route applies to its own API only: an OpenAI call takes route
// 1, an Anthropic call passes route 1 over (RouteTo refuses a request
// outside its fromBase) and takes route 2. The README's New(nil, …) sends
// through
// http.DefaultTransport, which holds the fake providers, by host, while
// New takes it as its base.
func TestFallbackReadmeSetUp(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		openAI := testkit.NewProvider(testkit.OpenAIOverloaded())
		azureProv := testkit.NewProvider(azureChatCompletion("Hello from Azure!"))
		anthropicProv := testkit.NewProviderFunc(func(c testkit.Call, _ int) testkit.Reply {
			if c.Header.Get("X-Api-Key") == dummyAnthropicKeyB {
				return anthropicAnswer("Hello from key B!", "claude-sonnet-4-5-20250929", 14, 5)
			}
			return testkit.AnthropicOverloaded()
		})
		azureKey, anthropicKeyB := dummyAzureKey, dummyAnthropicKeyB
		var rec recorder

		defaultTransport := http.DefaultTransport
		http.DefaultTransport = testkit.Hosts{"api.openai.com": openAI, "my-resource.openai.azure.com": azureProv, "api.anthropic.com": anthropicProv}
		azure, err := llmretry.RouteTo("https://api.openai.com/v1", "https://my-resource.openai.azure.com/openai/v1", http.Header{"Api-Key": {azureKey}})
		require.NoError(t, err)
		keyB, err := llmretry.RouteTo("https://api.anthropic.com", "https://api.anthropic.com", http.Header{"X-Api-Key": {anthropicKeyB}})
		require.NoError(t, err)
		rt, err := llmretry.New(nil, llmretry.Policy{
			Fallback:     []llmretry.Route{azure, keyB}, // a call takes the first that applies to its URL
			RetryStreams: true,                          // streams move too, until committed
			OnAttempt:    rec.on,
		})
		http.DefaultTransport = defaultTransport
		require.NoError(t, err)

		oa := openAIClient("https://api.openai.com/v1/", rt, oaoption.WithMaxRetries(0))
		got, err := oa.Chat.Completions.New(context.Background(), openAIParams())
		require.NoError(t, err)
		assert.Equal(t, "gpt-4o-2024-11-20", got.Model)
		assert.Equal(t, 2, openAI.Attempts(), "a blip, then the move")
		require.Equal(t, 1, azureProv.Attempts())
		c := azureProv.Received()[0]
		assert.Equal(t, "/openai/v1/chat/completions", c.Path)
		assert.Empty(t, c.Query)
		assert.Equal(t, dummyAzureKey, c.Header.Get("Api-Key"))
		assert.Contains(t, c.Body, `"model":"gpt-4o-mini"`, "on Azure's v1 API, the name of a deployment")
		assertNoByteOf(t, dummyOpenAIKey, azureProv.Received())
		assert.Equal(t, []int{0, 0, 1}, rec.routes())
		require.Len(t, rec.All(), 3)
		assert.Equal(t, []string{"", "provider down", ""}, []string{rec.All()[0].Moved, rec.All()[1].Moved, rec.All()[2].Moved}, "the second 503 moved the call")

		rec = recorder{}
		an := anthropicClient("https://api.anthropic.com/", rt, antoption.WithMaxRetries(0))
		msg, err := an.Messages.New(context.Background(), anthropicParams())
		require.NoError(t, err)
		assert.Equal(t, "Hello from key B!", msg.Content[0].Text)
		assert.Equal(t, []int{0, 0, 2}, rec.routes(), "route 1 (Azure) passed over")
		assert.Equal(t, 3, anthropicProv.Attempts())
		assertNoByteOf(t, dummyAnthropicKey, anthropicProv.Received()[2:])
		assert.Equal(t, 1, azureProv.Attempts(), "Azure never saw the Anthropic call")
	})
}
