package llmretry_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jarcoal/httpmock"

	"github.com/llmretry/llmretry"
	"github.com/llmretry/llmretry/coordination"
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

// post sends a request with an ordinary http.Client over rt, and prints
// the answer.
func post(rt http.RoundTripper, url string) {
	client := &http.Client{Transport: rt}
	resp, err := client.Post(url, "application/json", nil)
	if err != nil {
		log.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	fmt.Println(resp.StatusCode, string(body))
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
	post(rt, srv.URL+"/v1/chat/completions")
	// Output:
	// attempt 1: 503 Service Unavailable, retry in 10ms
	// attempt 2: 503 Service Unavailable, retry in 30ms
	// attempt 3: 200 OK, retry in 0s
	// 200 {"answer":42}
}

// A coordinated Transport holds the calls to a provider that is down and
// sends one of them at a time as the probe, for all of them: the record
// says which attempt waited (Held) and which went as the probe. One call
// here, with the zero Config; in production many calls share the probes,
// at most 5 s apart (package coordination's ExampleHold shows the holds).
func ExampleNewCoordinated() {
	srv := flakyProvider(1)
	defer srv.Close()

	policy := llmretry.Policy{
		OnAttempt: func(a llmretry.Attempt) {
			fmt.Printf("attempt %d: %s probe=%v held=%v\n", a.N, a.Response.Status, a.Probe, a.Held)
		},
	}
	rt, err := llmretry.NewCoordinated(nil, policy, coordination.Config{})
	if err != nil {
		log.Fatal(err)
	}
	post(rt, srv.URL+"/v1/chat/completions")
	// Output:
	// attempt 1: 503 Service Unavailable probe=false held=true
	// attempt 2: 200 OK probe=true held=false
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

// Do retries a tool call that is not an HTTP request under the same policy:
// here a read-only search whose backend times out twice. A failure no
// retry will fix is marked Permanent and ends the call at once.
func ExampleDo() {
	p := llmretry.Policy{
		Waits: []time.Duration{10 * time.Millisecond, 20 * time.Millisecond},
		OnAttempt: func(a llmretry.Attempt) {
			fmt.Printf("call %d: %v, retry in %v\n", a.N, a.Err, a.RetryIn)
		},
	}
	calls := 0
	search := func(ctx context.Context) (string, error) {
		calls++
		if calls < 3 {
			return "", errors.New("search backend timed out")
		}
		return "3 results", nil
	}
	res, err := llmretry.Do(context.Background(), p, search)
	fmt.Println(res, err)

	badQuery := func(ctx context.Context) (string, error) {
		return "", llmretry.Permanent(errors.New("no such table: ordrs"))
	}
	_, err = llmretry.Do(context.Background(), p, badQuery)
	fmt.Println(err)
	// Output:
	// call 1: search backend timed out, retry in 10ms
	// call 2: search backend timed out, retry in 20ms
	// call 3: <nil>, retry in 0s
	// 3 results <nil>
	// call 1: no such table: ordrs, retry in 0s
	// llmretry: not retryable: no such table: ordrs
}

// rateLimited is a search API's refusal that says when to come back. Its
// RetryAfter method is how Do learns the wait.
type rateLimited struct{ wait time.Duration }

func (e *rateLimited) Error() string             { return fmt.Sprintf("search API: 429, retry after %v", e.wait) }
func (e *rateLimited) RetryAfter() time.Duration { return e.wait }

// A tool passes on the wait its provider asked for in its error, wrapped
// or not: Do waits the longer of it and the schedule's wait, and gives up
// at once on a wait above MaxRetryAfter.
func ExampleDo_retryAfter() {
	p := llmretry.Policy{
		Waits:         []time.Duration{10 * time.Millisecond},
		MaxRetryAfter: time.Second,
		OnAttempt: func(a llmretry.Attempt) {
			fmt.Printf("call %d: %v, retry in %v\n", a.N, a.Err, a.RetryIn)
		},
	}
	calls := 0
	search := func(ctx context.Context) (string, error) {
		calls++
		if calls == 1 {
			return "", fmt.Errorf("searching: %w", &rateLimited{wait: 30 * time.Millisecond})
		}
		return "3 results", nil
	}
	res, err := llmretry.Do(context.Background(), p, search)
	fmt.Println(res, err)

	dailyQuota := func(ctx context.Context) (string, error) {
		return "", &rateLimited{wait: 24 * time.Hour}
	}
	_, err = llmretry.Do(context.Background(), p, dailyQuota)
	fmt.Println(errors.Is(err, llmretry.ErrWaitTooLong))
	// Output:
	// call 1: searching: search API: 429, retry after 30ms, retry in 30ms
	// call 2: <nil>, retry in 0s
	// 3 results <nil>
	// call 1: search API: 429, retry after 24h0m0s, retry in 0s
	// true
}

// A Person asks whoever runs the agent whether to keep trying once retries
// run out. Here the host is a goroutine that says yes; the provider answers
// on the attempt after.
func ExamplePerson() {
	srv := flakyProvider(2)
	defer srv.Close()

	person := new(llmretry.Person)
	done := make(chan struct{})
	defer close(done)
	go func() { // the host: a terminal, a chat UI, a web page
		for {
			select {
			case q := <-person.Questions():
				fmt.Printf("asked after %d attempts (last: %s): yes\n", q.Exhausted.Attempts, q.Exhausted.Response.Status)
				q.Answer(true)
			case <-done:
				return
			}
		}
	}()

	rt, err := llmretry.New(nil, llmretry.Policy{
		Waits:       []time.Duration{10 * time.Millisecond},
		OnExhausted: person.Ask,
	})
	if err != nil {
		log.Fatal(err)
	}
	post(rt, srv.URL+"/v1/messages")
	// Output:
	// asked after 2 attempts (last: 503 Service Unavailable): yes
	// 200 {"answer":42}
}

// LogAttempts writes the record to a log/slog logger, one line per
// attempt, without credentials: Gemini's key= in the query and the
// x-goog-api-key header never reach the log.
func ExampleLogAttempts() {
	provider := httpmock.NewMockTransport()
	provider.RegisterNoResponder(httpmock.NewStringResponder(503, "overloaded").
		Then(httpmock.NewStringResponder(200, `{"candidates":[]}`)))

	logger := slog.New(slog.NewTextHandler(os.Stdout, &slog.HandlerOptions{
		ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
			if a.Key == slog.TimeKey || a.Key == "attempt_id" {
				return slog.Attr{} // vary from run to run
			}
			return a
		},
	}))
	rt, err := llmretry.New(provider, llmretry.Policy{
		Waits:     []time.Duration{10 * time.Millisecond},
		OnAttempt: llmretry.LogAttempts(logger),
	})
	if err != nil {
		log.Fatal(err)
	}
	req, _ := http.NewRequest(http.MethodPost,
		"https://generativelanguage.googleapis.com/v1beta/models/gemini-2.5-flash:generateContent?key=MY_API_KEY", nil)
	req.Header.Set("X-Goog-Api-Key", "MY_API_KEY")
	resp, err := rt.RoundTrip(req)
	if err != nil {
		log.Fatal(err)
	}
	resp.Body.Close()
	// Output:
	// level=WARN msg="llmretry attempt" method=POST url=https://generativelanguage.googleapis.com/v1beta/models/gemini-2.5-flash:generateContent?… attempt=1 status=503 retry_in=10ms
	// level=INFO msg="llmretry attempt" method=POST url=https://generativelanguage.googleapis.com/v1beta/models/gemini-2.5-flash:generateContent?… attempt=2 status=200
}

// agentTurn is the README's set-up, line for line: an agent's model calls,
// streams included, under a turn of 8 minutes. It prints what the
// provider's answer says.
func agentTurn(ctx context.Context, req *http.Request) error {
	rt, err := llmretry.New(nil, llmretry.Policy{
		Waits:             []time.Duration{15 * time.Second, 45 * time.Second, 2 * time.Minute, 4 * time.Minute},
		Reserve:           time.Minute,      // keep a minute of the turn for the host
		AttemptTimeout:    90 * time.Second, // a silent provider costs 90 s, not the turn
		RetryStreams:      true,             // retry a stream until a byte of it reaches the caller
		FirstEventTimeout: 30 * time.Second, // a stream that never starts is abandoned and retried
		StreamIdleTimeout: time.Minute,      // a stream that stalls ends with an error, not a short answer
		OnAttempt: func(a llmretry.Attempt) {
			fmt.Printf("attempt %d: %s\n", a.N, a.Response.Status)
		},
	})
	if err != nil {
		return err
	}
	client := &http.Client{Transport: rt}
	ctx, cancel := context.WithTimeout(ctx, 8*time.Minute) // the turn's deadline
	defer cancel()
	resp, err := client.Do(req.WithContext(ctx))
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	fmt.Printf("%s", b)
	return err
}

// The README's set-up, run (agentTurn): a streamed request under the
// agent's policy. Its retries wait 15 s and more; ExamplePolicy_retryStreams
// shows one, with waits of milliseconds.
func Example_agentTurn() {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprint(w, "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"delta\":{\"type\":\"text_delta\",\"text\":\"Hello\"}}\n\n")
		fmt.Fprint(w, "event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\"}}\n\n")
	}))
	defer srv.Close()

	req, _ := http.NewRequest(http.MethodPost, srv.URL+"/v1/messages", strings.NewReader(`{"model":"claude-sonnet-4-5","stream":true}`))
	if err := agentTurn(context.Background(), req); err != nil {
		log.Fatal(err)
	}
	// Output:
	// attempt 1: 200 OK
	// event: content_block_delta
	// data: {"type":"content_block_delta","delta":{"type":"text_delta","text":"Hello"}}
	//
	// event: message_delta
	// data: {"type":"message_delta","delta":{"stop_reason":"end_turn"}}
}

// With RetryStreams, a stream that opens with an error event instead of
// content (here Anthropic's overloaded_error, with a 200) is retried like
// the 529 it stands for, and the caller reads only the good stream. (An
// agent's waits are seconds and minutes, as in Example_agentTurn; here
// they are milliseconds.)
func ExamplePolicy_retryStreams() {
	var calls atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		if calls.Add(1) == 1 {
			fmt.Fprint(w, "event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\",\"message\":\"Overloaded\"}}\n\n")
			return
		}
		fmt.Fprint(w, "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"delta\":{\"type\":\"text_delta\",\"text\":\"Hello\"}}\n\n")
		fmt.Fprint(w, "event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\"}}\n\n")
	}))
	defer srv.Close()

	rt, err := llmretry.New(nil, llmretry.Policy{
		Waits:             []time.Duration{15 * time.Millisecond, 45 * time.Millisecond, 120 * time.Millisecond},
		RetryStreams:      true,             // retry a stream until a byte of it reaches the caller
		FirstEventTimeout: 30 * time.Second, // a stream that never starts is abandoned and retried
		OnAttempt: func(a llmretry.Attempt) {
			fmt.Printf("attempt %d: %s", a.N, a.Response.Status)
			if a.Event != "" {
				fmt.Printf(", the stream opened with %s", a.Event)
			}
			fmt.Println()
		},
	})
	if err != nil {
		log.Fatal(err)
	}
	client := &http.Client{Transport: rt}
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute) // the turn's deadline
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL+"/v1/messages", nil)
	req.Header.Set("Accept", "text/event-stream")
	resp, err := client.Do(req)
	if err != nil {
		log.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	fmt.Printf("%s", b)
	// Output:
	// attempt 1: 200 OK, the stream opened with overloaded_error
	// attempt 2: 200 OK
	// event: content_block_delta
	// data: {"type":"content_block_delta","delta":{"type":"text_delta","text":"Hello"}}
	//
	// event: message_delta
	// data: {"type":"message_delta","delta":{"stop_reason":"end_turn"}}
}

// GaveUp reads the record off a failure response the Transport returned,
// here a 429 whose Retry-After is longer than the policy honours; through
// an SDK, pass it the *http.Response in the SDK's error.
func ExampleGaveUp() {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Retry-After", "86400")
		http.Error(w, `{"error":{"message":"daily quota"}}`, http.StatusTooManyRequests)
	}))
	defer srv.Close()

	rt, err := llmretry.New(nil, llmretry.Policy{})
	if err != nil {
		log.Fatal(err)
	}
	resp, err := (&http.Client{Transport: rt}).Post(srv.URL, "application/json", nil)
	if err != nil {
		log.Fatal(err)
	}
	defer resp.Body.Close()
	if ex := llmretry.GaveUp(resp); ex != nil {
		fmt.Println(ex.Attempts, errors.Is(ex.Reason, llmretry.ErrWaitTooLong))
		fmt.Println(ex)
	}
	// Output:
	// 1 true
	// llmretry: gave up after 1 attempt, the server asked to wait longer than MaxRetryAfter: 429 Too Many Requests
}

// errors.Is tells why a call stopped, through net/http's *url.Error.
func ExampleErrNoTimeLeft() {
	srv := flakyProvider(100) // down for longer than the turn
	defer srv.Close()
	srv.Listener.Close() // and refusing connections

	rt, err := llmretry.New(nil, llmretry.Policy{Waits: []time.Duration{100 * time.Millisecond}, Reserve: 5 * time.Second})
	if err != nil {
		log.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5300*time.Millisecond) // 300 ms to retry in
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL, nil)
	_, err = (&http.Client{Transport: rt}).Do(req)
	fmt.Println(errors.Is(err, llmretry.ErrNoTimeLeft))
	// Output:
	// true
}
