package llmretry_test

import (
	"context"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"time"

	"github.com/llmretry/llmretry"
)

// flakyProvider answers 503 to its first n requests, then 200.
func flakyProvider(n int32) *httptest.Server {
	var calls atomic.Int32
	return httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if calls.Add(1) <= n {
			http.Error(w, `{"error":{"message":"upstream connect error"}}`, http.StatusServiceUnavailable)
			return
		}
		fmt.Fprint(w, `{"answer":42}`)
	}))
}

// A Transport under an ordinary http.Client rides through a provider that
// fails twice: the caller sees only the answer, the record every attempt.
func ExampleNew() {
	srv := flakyProvider(2)
	defer srv.Close()

	rt, err := llmretry.New(nil, llmretry.Policy{
		Waits: []time.Duration{10 * time.Millisecond, 30 * time.Millisecond},
		OnAttempt: func(a llmretry.Attempt) {
			status := "error"
			if a.Response != nil {
				status = a.Response.Status
			}
			fmt.Printf("attempt %d: %s, retry in %v\n", a.N, status, a.RetryIn)
		},
	})
	if err != nil {
		log.Fatal(err)
	}
	client := &http.Client{Transport: rt}

	resp, err := client.Post(srv.URL+"/v1/chat/completions", "application/json", nil)
	if err != nil {
		log.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	fmt.Println(resp.StatusCode, string(body))
	// Output:
	// attempt 1: 503 Service Unavailable, retry in 10ms
	// attempt 2: 503 Service Unavailable, retry in 30ms
	// attempt 3: 200 OK, retry in 0s
	// 200 {"answer":42}
}

// One shared client serves agents with different policies: WithPolicy puts
// an agent's policy on the context of its requests.
func ExampleWithPolicy() {
	srv := flakyProvider(1)
	defer srv.Close()

	// The shared client's own policy: one retry after a minute.
	rt, err := llmretry.New(nil, llmretry.Policy{Waits: []time.Duration{time.Minute}})
	if err != nil {
		log.Fatal(err)
	}
	client := &http.Client{Transport: rt}

	// This agent's turns are short: it retries after 20 ms instead.
	patient := llmretry.WithPolicy(context.Background(), llmretry.Policy{Waits: []time.Duration{20 * time.Millisecond}})
	req, _ := http.NewRequestWithContext(patient, http.MethodPost, srv.URL, nil)
	resp, err := client.Do(req)
	if err != nil {
		log.Fatal(err)
	}
	resp.Body.Close()
	fmt.Println("quick agent:", resp.StatusCode)
	// Output:
	// quick agent: 200
}

// An invalid policy is refused with an error that names the field.
func ExamplePolicy_Validate() {
	err := llmretry.Policy{Waits: []time.Duration{time.Second, -time.Second}}.Validate()
	fmt.Println(err)
	// Output:
	// llmretry: Policy.Waits[1] is negative (-1s)
}

// RetryAfter reads the wait a provider asked for.
func ExampleRetryAfter() {
	h := http.Header{}
	h.Set("Retry-After", "20")
	h.Set("Retry-After-Ms", "1500")
	wait, ok := llmretry.RetryAfter(h, time.Now())
	fmt.Println(wait, ok)
	// Output:
	// 1.5s true
}
