package llmretry_test

import (
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"strings"
	"time"

	"github.com/jarcoal/httpmock"

	"github.com/llmretry/llmretry"
)

// Anthropic key A, then key B: RouteTo with the same base and key B in
// x-api-key. Key A's monthly spend limit is reached, which no wait fixes:
// the call goes to key B at once, and key B's request carries key B alone.
func ExampleRouteTo() {
	toKeyB, err := llmretry.RouteTo("https://api.anthropic.com", "https://api.anthropic.com",
		http.Header{"X-Api-Key": {"KEY_B"}})
	if err != nil {
		log.Fatal(err)
	}

	anthropic := httpmock.NewMockTransport() // in memory, in place of api.anthropic.com
	anthropic.RegisterResponder(http.MethodPost, "https://api.anthropic.com/v1/messages",
		func(r *http.Request) (*http.Response, error) {
			body, _ := io.ReadAll(r.Body)
			fmt.Printf("x-api-key %q, body %s\n", r.Header.Get("X-Api-Key"), body)
			if r.Header.Get("X-Api-Key") == "KEY_A" {
				return httpmock.NewStringResponse(http.StatusTooManyRequests,
					`{"type":"error","error":{"type":"rate_limit_error","message":"You have reached your API usage limits.","details":{"error_code":"enforced_spend_limit_reached"}}}`), nil
			}
			return httpmock.NewStringResponse(http.StatusOK, `{"model":"claude-sonnet-4-5-20250929","content":[{"type":"text","text":"Hi!"}]}`), nil
		})

	rt, err := llmretry.New(anthropic, llmretry.Policy{
		Fallback: []llmretry.Route{toKeyB},
		OnAttempt: func(a llmretry.Attempt) {
			fmt.Printf("attempt %d, route %d: %s\n", a.N, a.Route, a.Response.Status)
		},
	})
	if err != nil {
		log.Fatal(err)
	}
	req, _ := http.NewRequest(http.MethodPost, "https://api.anthropic.com/v1/messages",
		strings.NewReader(`{"model":"claude-sonnet-4-5","max_tokens":64}`))
	req.Header.Set("X-Api-Key", "KEY_A")
	resp, err := rt.RoundTrip(req)
	if err != nil {
		log.Fatal(err)
	}
	defer resp.Body.Close()
	answer, _ := io.ReadAll(resp.Body)
	fmt.Println(resp.StatusCode, string(answer))
	// Output:
	// x-api-key "KEY_A", body {"model":"claude-sonnet-4-5","max_tokens":64}
	// attempt 1, route 0: 429 Too Many Requests
	// x-api-key "KEY_B", body {"model":"claude-sonnet-4-5","max_tokens":64}
	// attempt 2, route 1: 200 OK
	// 200 {"model":"claude-sonnet-4-5-20250929","content":[{"type":"text","text":"Hi!"}]}
}

// OpenAI direct, and another deployment of the same API when OpenAI
// cannot answer in time: the primary is down (503). One 503 is a blip,
// retried on the primary after its wait; at the second the call's next
// attempt goes to the fallback at once, and the caller reads the
// fallback's own answer, with its own model name and usage. The record
// says which route each attempt took, and why the call moved.
func ExamplePolicy_fallback() {
	primary := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, `{"error":{"message":"The server is overloaded or not ready yet.","type":"server_error"}}`, http.StatusServiceUnavailable)
	}))
	defer primary.Close()
	fallback := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Printf("the fallback got Authorization %q, Api-Key %q\n", r.Header.Get("Authorization"), r.Header.Get("Api-Key"))
		fmt.Fprint(w, `{"model":"gpt-4o-2024-11-20","choices":[{"message":{"content":"Hello!"}}],"usage":{"total_tokens":28}}`)
	}))
	defer fallback.Close()

	other, err := llmretry.RouteTo(primary.URL+"/v1", fallback.URL+"/openai/v1",
		http.Header{"Api-Key": {"FALLBACK_KEY"}})
	if err != nil {
		log.Fatal(err)
	}
	rt, err := llmretry.New(nil, llmretry.Policy{
		Waits:    []time.Duration{10 * time.Millisecond, 10 * time.Millisecond},
		Fallback: []llmretry.Route{other},
		OnAttempt: func(a llmretry.Attempt) {
			fmt.Printf("attempt %d, route %d, %s: %s", a.N, a.Route, a.Request.URL.Path, a.Response.Status)
			if a.Moved != "" {
				fmt.Printf(", moved: %s", a.Moved)
			}
			fmt.Println()
		},
	})
	if err != nil {
		log.Fatal(err)
	}
	client := &http.Client{Transport: rt}

	req, _ := http.NewRequest(http.MethodPost, primary.URL+"/v1/chat/completions", strings.NewReader(`{"model":"gpt-4o"}`))
	req.Header.Set("Authorization", "Bearer PRIMARY_KEY")
	resp, err := client.Do(req)
	if err != nil {
		log.Fatal(err)
	}
	defer resp.Body.Close()
	answer, _ := io.ReadAll(resp.Body)
	fmt.Println(resp.StatusCode, string(answer))
	// Output:
	// attempt 1, route 0, /v1/chat/completions: 503 Service Unavailable
	// attempt 2, route 0, /v1/chat/completions: 503 Service Unavailable, moved: provider down
	// the fallback got Authorization "", Api-Key "FALLBACK_KEY"
	// attempt 3, route 1, /openai/v1/chat/completions: 200 OK
	// 200 {"model":"gpt-4o-2024-11-20","choices":[{"message":{"content":"Hello!"}}],"usage":{"total_tokens":28}}
}
