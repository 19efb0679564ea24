package interop

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/failsafe-go/failsafe-go/failsafehttp"
	"github.com/hashicorp/go-retryablehttp"
	"github.com/llmretry/llmretry"
	"github.com/llmretry/llmretry/internal/testkit"
	oaoption "github.com/openai/openai-go/v3/option"
)

// Peers side by side: what each retry layer costs when nothing needs
// retrying, and when a request fails once and then succeeds.
//
// The provider is in memory (benchBase), so the numbers are the layers' own
// overhead, not a network's. Every retry waits zero: llmretry with
// Waits{0}, go-retryablehttp with a Backoff that returns 0, failsafe-go's
// retry policy with no delay, openai-go with WithMaxRetryDelay(1ns) (its
// smallest: the option refuses 0, and 1 ns caps both its backoff and its
// jitter). The layers still arm a timer for that zero wait; that is part of
// their cost and is measured. Nothing sleeps.
//
//	go test -run '^$' -bench Peers -benchmem -count 6 .
//
// The "bare" rows are the floor: the base transport alone (on the
// fails-once path, the two round trips done by hand, draining and closing
// the 502 in between).

// benchBody is a chat request body, as openai-go sends it.
var benchBody = []byte(`{"messages":[{"content":"Say hello.","role":"user"}],"model":"gpt-4o-mini"}`)

// benchOK and benchBad are the provider's answers.
var (
	benchOK  = testkit.OpenAIChatCompletion("Hello! How can I help?")
	benchBad = testkit.BadGateway()
)

// benchBase is an in-memory provider. It reads each request body as a
// server would; with failFirst it answers 502 to every odd request and the
// answer to every even one, so that each call (sequential in a benchmark)
// fails once and then succeeds.
type benchBase struct {
	failFirst bool
	n         int
}

func (b *benchBase) RoundTrip(req *http.Request) (*http.Response, error) {
	discardBody(req)
	rep := benchOK
	if b.failFirst {
		b.n++
		if b.n%2 == 1 {
			rep = benchBad
		}
	}
	return &http.Response{
		StatusCode:    rep.Status,
		Status:        http.StatusText(rep.Status),
		Header:        rep.Header, // shared: nobody writes to it
		Body:          io.NopCloser(strings.NewReader(rep.Body)),
		ContentLength: int64(len(rep.Body)),
		Request:       req,
	}, nil
}

// benchHTTP sends chat requests through rt until the benchmark ends. With
// byHand, a 502 is drained, closed and sent again once: the bare floor.
func benchHTTP(b *testing.B, rt http.RoundTripper, byHand bool) {
	client := &http.Client{Transport: rt}
	send := func() *http.Response {
		req, err := http.NewRequest(http.MethodPost, fakeOpenAIURL+"chat/completions", bytes.NewReader(benchBody))
		if err != nil {
			b.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json")
		resp, err := client.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		return resp
	}
	b.ReportAllocs()
	for b.Loop() {
		resp := send()
		if byHand && resp.StatusCode == http.StatusBadGateway {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			resp = send()
		}
		if resp.StatusCode != http.StatusOK {
			b.Fatalf("status %d", resp.StatusCode)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
}

// benchOpenAI makes chat completions with openai-go through rt.
func benchOpenAI(b *testing.B, rt http.RoundTripper, opts ...oaoption.RequestOption) {
	client := openAIClient(fakeOpenAIURL, rt, opts...)
	params := openAIParams()
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		got, err := client.Chat.Completions.New(ctx, params)
		if err != nil {
			b.Fatal(err)
		}
		if len(got.Choices) != 1 {
			b.Fatal("no choice")
		}
	}
}

// noWait is llmretry's policy in the benchmark: one retry after 0 s.
func noWait(b *testing.B, base http.RoundTripper) http.RoundTripper {
	return retrying(b, base, llmretry.Policy{Waits: []time.Duration{0}})
}

// retryableRT is go-retryablehttp's RoundTripper: one retry, no wait, no
// logger.
func retryableRT(base http.RoundTripper) http.RoundTripper {
	return &retryablehttp.RoundTripper{Client: &retryablehttp.Client{
		HTTPClient:   &http.Client{Transport: base},
		RetryMax:     1,
		CheckRetry:   retryablehttp.DefaultRetryPolicy,
		Backoff:      func(_, _ time.Duration, _ int, _ *http.Response) time.Duration { return 0 },
		RetryWaitMin: 0,
		RetryWaitMax: 0,
	}}
}

// failsafeRT is failsafe-go's RoundTripper with its HTTP retry policy: one
// retry, no delay.
func failsafeRT(base http.RoundTripper) http.RoundTripper {
	return failsafehttp.NewRoundTripper(base, failsafehttp.NewRetryPolicyBuilder().WithMaxRetries(1).Build())
}

func BenchmarkPeers(b *testing.B) {
	for _, path := range []struct {
		name      string
		failFirst bool
	}{{"success", false}, {"fails-once", true}} {
		base := func() *benchBase { return &benchBase{failFirst: path.failFirst} }
		b.Run(path.name+"/http/bare", func(b *testing.B) { benchHTTP(b, base(), true) })
		b.Run(path.name+"/http/llmretry", func(b *testing.B) { benchHTTP(b, noWait(b, base()), false) })
		b.Run(path.name+"/http/retryablehttp", func(b *testing.B) { benchHTTP(b, retryableRT(base()), false) })
		b.Run(path.name+"/http/failsafehttp", func(b *testing.B) { benchHTTP(b, failsafeRT(base()), false) })

		if !path.failFirst {
			// The SDK's floor: no retry at all (it cannot survive the 502).
			b.Run(path.name+"/openai-go/bare", func(b *testing.B) { benchOpenAI(b, base(), oaoption.WithMaxRetries(0)) })
		}
		b.Run(path.name+"/openai-go/own-retry", func(b *testing.B) {
			benchOpenAI(b, base(), oaoption.WithMaxRetryDelay(time.Nanosecond)) // default: 2 retries
		})
		b.Run(path.name+"/openai-go/llmretry", func(b *testing.B) {
			benchOpenAI(b, noWait(b, base()), oaoption.WithMaxRetries(0))
		})
	}
}
