package interop

// A crowd under its rate limit (GitHub issue 19): 100 calls on one API key
// against the fake providers of ratelimit_test.go, through one coordinated
// Transport (llmretry.NewCoordinated) and through one llmretry.New
// Transport per call, each call under a 10-minute deadline, all in one
// synctest bubble per run: what a crowd gets, beside ideal pacing (the
// calls admitted in arrival order at the limit's rate), rendered into
// docs/ratelimit.md (TestRateLimitCrowd, LLMRETRY_WRITE_TABLE=1), and
// issue 19's targets asserted (TestRateLimitTargets).

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/llmretry/llmretry"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// rateDeadline is each crowd call's deadline (context.WithTimeout).
const rateDeadline = 10 * time.Minute

// rateSamples is how many runs a jittered client gets per cell: its
// figures are shown as ranges.
const rateSamples = 3

// rateArrival is how the crowd's calls arrive.
type rateArrival struct {
	id      string        // "together", "spread": for logs
	name    string        // for the table
	stagger time.Duration // call i starts at i × stagger
}

// rateArrivals: all 100 calls at once, and over 10 s (one every 100 ms).
var rateArrivals = []rateArrival{
	{id: "together", name: "100 at once"},
	{id: "spread", name: "100 over 10 s", stagger: 100 * time.Millisecond},
}

// arrivals returns when each of n calls arrives, since the start.
func (a rateArrival) arrivals(n int) []time.Duration {
	at := make([]time.Duration, n)
	for i := range at {
		at[i] = time.Duration(i) * a.stagger
	}
	return at
}

// rateRun is what one client got in one run.
type rateRun struct {
	spec    rateSpec
	arrival rateArrival
	client  crowdClient
	start   []time.Duration // per call: when it started, since the provider's start
	errs    []error         // per call: nil for an answer
	done    []time.Duration // per call: when it returned, since the provider's start
	recs    []rateRecord    // what the provider did, in arrival order
}

// runRateCrowd makes crowdCalls calls through client c against a provider
// enforcing spec, call i starting at arrival's i-th instant under its own
// rateDeadline, in one synctest bubble.
func runRateCrowd(t *testing.T, spec rateSpec, arrival rateArrival, c crowdClient) rateRun {
	r := rateRun{spec: spec, arrival: arrival, client: c, start: arrival.arrivals(crowdCalls)}
	synctest.Test(t, func(t *testing.T) {
		prov := newRateLimiter(spec)
		clients := httpClients(t, prov, c.policy(), crowdCalls, c.coordinated)
		send := plainChat
		switch spec.style {
		case styleAnthropic, styleConcurrency:
			send = plainMessage
		case styleOpenAITokens:
			send = tokenChat
		}
		r.errs = make([]error, crowdCalls)
		r.done = make([]time.Duration, crowdCalls)
		var wg sync.WaitGroup
		for i := range crowdCalls {
			wg.Go(func() {
				time.Sleep(r.start[i])
				ctx, cancel := context.WithTimeout(context.WithValue(context.Background(), crowdCallKey{}, i), rateDeadline)
				defer cancel()
				r.errs[i] = send(ctx, clients[i])
				r.done[i] = time.Since(prov.start)
			})
		}
		wg.Wait()
		r.recs = prov.records()
	})
	return r
}

// tokenChat sends one chat completion request asking for at most
// tpmRequestTokens tokens through c and checks the answer: what a token
// limit charges.
func tokenChat(ctx context.Context, c *http.Client) error {
	return sendChat(ctx, c, `{"model":"`+openAIModel+`","max_tokens":`+fmt.Sprint(tpmRequestTokens)+`,"messages":[{"role":"user","content":"Say hello."}]}`)
}

// plainMessage sends one Anthropic Messages request through c and checks
// the answer.
func plainMessage(ctx context.Context, c *http.Client) error {
	h := http.Header{"X-Api-Key": {dummyAnthropicKey}, "Anthropic-Version": {"2023-06-01"}}
	return postAnswer(ctx, c, fakeAnthropicURL+"v1/messages",
		`{"model":"`+anthropicModel+`","max_tokens":1024,"messages":[{"role":"user","content":"Say hello."}]}`, h, "content")
}

// --- A run's figures ---

// times returns each call's time to answer, from its start to its
// answer; unanswered for a call that got none.
func (r rateRun) times() []time.Duration {
	t := make([]time.Duration, len(r.errs))
	for i, err := range r.errs {
		t[i] = unanswered
		if err == nil {
			t[i] = r.done[i] - r.start[i]
		}
	}
	return t
}

// ok returns how many calls got an answer.
func (r rateRun) ok() int { return answered(r.errs) }

// refusals returns how many requests the provider refused (429).
func (r rateRun) refusals() int {
	n := 0
	for _, rec := range r.recs {
		if !rec.admitted {
			n++
		}
	}
	return n
}

// firstRefusalBack returns when the first 429 reached its caller (left
// the provider), and false if none did.
func (r rateRun) firstRefusalBack() (time.Duration, bool) {
	first, found := time.Duration(0), false
	for _, rec := range r.recs {
		if !rec.admitted && !rec.cut && (!found || rec.left < first) {
			first, found = rec.left, true
		}
	}
	return first, found
}

// refusalsAfterFirst returns how many requests that reached the provider
// after the first 429 reached its caller were refused: those that could
// have known better.
func (r rateRun) refusalsAfterFirst() int {
	first, ok := r.firstRefusalBack()
	if !ok {
		return 0
	}
	n := 0
	for _, rec := range r.recs {
		if !rec.admitted && rec.at > first {
			n++
		}
	}
	return n
}

// mostAttempts returns the most requests one call sent.
func (r rateRun) mostAttempts() int {
	per := make([]int, len(r.errs))
	for _, rec := range r.recs {
		if rec.call >= 0 {
			per[rec.call]++
		}
	}
	return slices.Max(per)
}

// firstErr returns the first error a call got, for messages.
func (r rateRun) firstErr() error {
	for _, err := range r.errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// reserveOf returns the reserve policy p leaves before a deadline that is
// left away when the call starts (llmretry's rule for a zero Reserve).
func reserveOf(p llmretry.Policy, left time.Duration) time.Duration {
	if p.Reserve != 0 {
		return p.Reserve
	}
	return min(zeroPolicyReserve, left/5)
}

// TestRateLimitCrowd is issue 19's measurement: every client against every
// limit and arrival. It prints the table and draws the pacing picture;
// with LLMRETRY_WRITE_TABLE=1 it writes docs/ratelimit.md and
// docs/pacing.svg:
//
//	cd interop && LLMRETRY_WRITE_TABLE=1 go test -run TestRateLimitCrowd -count=1 .
func TestRateLimitCrowd(t *testing.T) {
	cells := runRateCells(t)
	t.Log("\n" + renderRateTable(cells) + "\n" + renderRateTargets(cells))
	pic, err := pacingPictureOf(cells)
	require.NoError(t, err)
	svg := renderPacing(pic)
	pacingAsserts(t, pic, svg)
	if os.Getenv(writeTableEnv) == "1" {
		for name, text := range map[string]string{"ratelimit.md": renderRateDoc(cells), "pacing.svg": svg} {
			path := filepath.Join("..", "docs", name)
			require.NoError(t, os.WriteFile(path, []byte(text), 0o644))
			t.Logf("wrote %s", path)
		}
	}

	for _, c := range cells {
		reserve := reserveOf(c.client.policy(), rateDeadline)
		for _, r := range c.runs {
			name := c.spec.id + "/" + c.arrival.id + "/" + c.client.name
			if err := r.firstErr(); err != nil {
				t.Logf("%s: %d calls unanswered, the first with: %v", name, crowdCalls-r.ok(), err)
			}
			for i := range r.errs {
				assert.Less(t, r.done[i]-r.start[i], rateDeadline, "%s: call %d ends before its deadline (%v)", name, i, r.errs[i])
			}
			for _, rec := range r.recs {
				if !assert.GreaterOrEqual(t, rec.call, 0, "%s: a request of no call", name) {
					continue
				}
				assert.LessOrEqual(t, rec.at-r.start[rec.call], rateDeadline-reserve,
					"%s: call %d sent a request after its deadline minus its reserve", name, rec.call)
			}
			if c.arrival.stagger == 0 && r.ok() == crowdCalls {
				ideal := idealTimes(c.spec, r.start)
				assert.GreaterOrEqual(t, percentile(r.times(), 100), percentile(ideal, 100), "%s: the last answer no sooner than the limit allows", name)
			}
		}
	}
}

// TestRateLimitFigures checks a run's figures on a hand-made run.
func TestRateLimitFigures(t *testing.T) {
	s, ms := time.Second, time.Millisecond
	r := rateRun{
		start: []time.Duration{0, 0, 1 * s},
		errs:  []error{nil, errors.New("429 Too Many Requests"), nil},
		done:  []time.Duration{2 * s, 9 * s, 5 * s},
		recs: []rateRecord{
			{call: 0, at: 0, status: 200, admitted: true, left: 2 * s},
			{call: 1, at: 0, status: 429, left: 100 * ms},        // the first 429 back, at 100 ms
			{call: 2, at: 1 * s, status: 429, left: 1100 * ms},   // after it: counted
			{call: 1, at: 100 * ms, status: 429, left: 200 * ms}, // sent as the first came back: not counted
			{call: 2, at: 3 * s, status: 200, admitted: true, left: 5 * s},
			{call: 1, at: 8 * s, status: 429, left: 8 * s, cut: true}, // its caller gave up: counted, never back
		},
	}
	assert.Equal(t, 2, r.ok())
	assert.Equal(t, 4, r.refusals())
	first, ok := r.firstRefusalBack()
	require.True(t, ok)
	assert.Equal(t, 100*ms, first)
	assert.Equal(t, 2, r.refusalsAfterFirst())
	assert.Equal(t, []time.Duration{2 * s, unanswered, 4 * s}, r.times())
	assert.Equal(t, 3, r.mostAttempts())
	assert.EqualError(t, r.firstErr(), "429 Too Many Requests")
	assert.Equal(t, 60*s, reserveOf(hostPolicy(), rateDeadline))
	assert.Equal(t, 60*s, reserveOf(llmretry.Policy{}, rateDeadline), "the lesser of 60 s and a fifth of 10 minutes")
	assert.Equal(t, 6*s, reserveOf(llmretry.Policy{}, 30*s))
}
