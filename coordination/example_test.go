package coordination_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync/atomic"
	"time"

	"github.com/llmretry/llmretry"
	"github.com/llmretry/llmretry/coordination"
)

// overloaded is a provider that answers every request 503, counting them.
func overloaded(requests *atomic.Int32) *httptest.Server {
	return httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		requests.Add(1)
		http.Error(w, `{"error":{"message":"overloaded"}}`, http.StatusServiceUnavailable)
	}))
}

// A coordinated Transport with every field set: probes at most 2 s apart,
// held calls released within 100 ms, half a key's calls in flight may be
// retrying at once, a store shared with the process's other Transports,
// and the holds written to a log. The zero Config works too: the field
// docs say what each zero value means.
func ExampleConfig() {
	shared := coordination.NewMemoryStore()
	rt, err := llmretry.NewCoordinated(nil, llmretry.Policy{}, coordination.Config{
		ProbeInterval: 2 * time.Second,
		ReleaseSpread: 100 * time.Millisecond,
		RetryBudget:   0.5,
		MinRetries:    5,
		Store:         shared,
		OnHold:        coordination.LogHolds(slog.Default()),
	})
	if err != nil {
		log.Fatal(err)
	}
	client := &http.Client{Transport: rt}
	_ = client // make every call to the provider with it
	fmt.Println("coordinated")
	// Output: coordinated
}

// Validate names every field that cannot be used, one line each.
func ExampleConfig_Validate() {
	err := coordination.Config{ProbeInterval: -time.Second, RetryBudget: 2}.Validate()
	fmt.Println(err)
	// Output:
	// llmretry: coordination.Config.ProbeInterval is negative (-1s)
	// llmretry: coordination.Config.RetryBudget is 2, not between 0 and 1
}

// OnHold hears of each hold twice: as it begins and as it ends. Here a
// provider asks for a second's wait (a 429 with Retry-After: 1); the
// call's retry waits for it at the gate, with any other call to the key.
func ExampleHold() {
	var calls atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if calls.Add(1) == 1 {
			w.Header().Set("Retry-After", "1")
			http.Error(w, `{"error":{"message":"slow down"}}`, http.StatusTooManyRequests)
			return
		}
		fmt.Fprint(w, `{"answer":42}`)
	}))
	defer srv.Close()

	rt, err := llmretry.NewCoordinated(nil, llmretry.Policy{}, coordination.Config{
		ReleaseSpread: 10 * time.Millisecond,
		OnHold: func(h coordination.Hold) {
			fmt.Printf("attempt %d held (%v): %v\n", h.N, h.Reason, h.Outcome)
		},
	})
	if err != nil {
		log.Fatal(err)
	}
	resp, err := (&http.Client{Transport: rt}).Post(srv.URL+"/v1/chat/completions", "application/json", nil)
	if err != nil {
		log.Fatal(err)
	}
	resp.Body.Close()
	fmt.Println(resp.Status)
	// Output:
	// attempt 2 held (server wait): waiting
	// attempt 2 held (server wait): released
	// 200 OK
}

// A Hold renders on one line, without the request's query or user
// information.
func ExampleHold_String() {
	req, _ := http.NewRequest(http.MethodPost, "https://generativelanguage.googleapis.com/v1beta/models/m:generateContent?key=AIzaSecret", nil)
	start := time.Date(2026, 12, 1, 7, 0, 0, 0, time.UTC)
	h := coordination.Hold{Request: req, N: 3, Key: "generativelanguage.googleapis.com#1a2b3c4d", Reason: coordination.HoldDown, Start: start,
		End: start.Add(4 * time.Second), Outcome: coordination.HoldProbe}
	fmt.Println(h)
	// Output: hold POST https://generativelanguage.googleapis.com/v1beta/models/m:generateContent?… on generativelanguage.googleapis.com#1a2b3c4d (provider down): sent as the probe after 4s
}

// The reasons a call is held.
func ExampleHoldReason() {
	for _, r := range []coordination.HoldReason{coordination.HoldDown, coordination.HoldServerWait, coordination.HoldBudget, coordination.HoldPaced, coordination.HoldInFlight} {
		fmt.Println(int(r), r)
	}
	// Output:
	// 1 provider down
	// 2 server wait
	// 3 retry budget spent
	// 4 paced under a rate limit
	// 5 at the limit on calls in flight
}

// How a hold ends.
func ExampleHoldOutcome() {
	for _, o := range []coordination.HoldOutcome{coordination.HoldWaiting, coordination.HoldProbe, coordination.HoldReleased, coordination.HoldGaveUp, coordination.HoldCanceled} {
		fmt.Println(int(o), o)
	}
	// Output:
	// 0 waiting
	// 1 sent as the probe
	// 2 released
	// 3 gave up
	// 4 canceled
}

// A call that cannot wait for its key to come back ends without sending,
// with a *HeldError that says why: here the first call's 503 put the key
// down, and the second has no more time left than its reserve.
func ExampleHeldError() {
	var requests atomic.Int32
	srv := overloaded(&requests)
	defer srv.Close()
	rt, err := llmretry.NewCoordinated(nil, llmretry.Policy{Reserve: time.Minute}, coordination.Config{})
	if err != nil {
		log.Fatal(err)
	}
	call := func() (*http.Response, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second) // less than the reserve: no retry
		defer cancel()
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL+"/v1/chat/completions", strings.NewReader(`{}`))
		return rt.RoundTrip(req)
	}
	resp, _ := call()
	resp.Body.Close()
	fmt.Println("first call:", resp.Status)

	_, err = call()
	var held *coordination.HeldError
	if errors.As(err, &held) {
		fmt.Printf("second call: %v, last failure %v, waited %v\n", held.Reason, held.Last, held.Waited)
	}
	fmt.Println("requests:", requests.Load())
	// Output:
	// first call: 503 Service Unavailable
	// second call: provider down, last failure 503 Service Unavailable, waited 0s
	// requests: 1
}

// LogHolds writes each record as a log line (here without the time, so
// that the output is the same on every run).
func ExampleLogHolds() {
	logger := slog.New(slog.NewTextHandler(os.Stdout, &slog.HandlerOptions{ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
		if a.Key == slog.TimeKey {
			return slog.Attr{}
		}
		return a
	}}))
	onHold := coordination.LogHolds(logger)
	req, _ := http.NewRequest(http.MethodPost, "https://api.openai.com/v1/chat/completions", nil)
	start := time.Date(2026, 12, 1, 7, 0, 0, 0, time.UTC)
	h := coordination.Hold{Request: req, N: 1, Key: "api.openai.com#1a2b3c4d", Reason: coordination.HoldPaced, Start: start}
	onHold(h)
	h.End, h.Outcome = start.Add(1200*time.Millisecond), coordination.HoldReleased
	onHold(h)
	// Output:
	// level=INFO msg="llmretry hold" method=POST url=https://api.openai.com/v1/chat/completions key=api.openai.com#1a2b3c4d reason="paced under a rate limit" outcome=waiting
	// level=INFO msg="llmretry hold" method=POST url=https://api.openai.com/v1/chat/completions key=api.openai.com#1a2b3c4d reason="paced under a rate limit" outcome=released held=1.2s
}

// Two Transports of a process that share a store coordinate as one: the
// 503 one of them met holds the other's call, which sends nothing.
func ExampleNewMemoryStore() {
	var requests atomic.Int32
	srv := overloaded(&requests)
	defer srv.Close()
	shared := coordination.NewMemoryStore()
	policy := llmretry.Policy{Reserve: time.Minute}
	agents, err := llmretry.NewCoordinated(nil, policy, coordination.Config{Store: shared})
	if err != nil {
		log.Fatal(err)
	}
	batch, err := llmretry.NewCoordinated(nil, policy, coordination.Config{Store: shared})
	if err != nil {
		log.Fatal(err)
	}
	call := func(rt http.RoundTripper) error {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL+"/v1/chat/completions", strings.NewReader(`{}`))
		resp, err := rt.RoundTrip(req)
		if err == nil {
			resp.Body.Close()
		}
		return err
	}
	fmt.Println("agents' call:", call(agents))
	var held *coordination.HeldError
	fmt.Println("batch's call held:", errors.As(call(batch), &held))
	fmt.Println("requests:", requests.Load())
	// Output:
	// agents' call: <nil>
	// batch's call held: true
	// requests: 1
}
