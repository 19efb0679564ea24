package interop

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/failsafe-go/failsafe-go/failsafehttp"
	"github.com/hashicorp/go-retryablehttp"
	"github.com/llmretry/llmretry"
	"github.com/llmretry/llmretry/internal/testkit"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// outageSamples is how many runs a cell of a jittered client gets.
const outageSamples = 10

// writeTableEnv names the variable that makes TestOutageTable write
// docs/outage-table.md and docs/ride-through.svg: LLMRETRY_WRITE_TABLE=1.
const writeTableEnv = "LLMRETRY_WRITE_TABLE"

// TestOutageTable runs one call per cell — every fault × outage length ×
// client — against an in-memory provider that follows a timeline, inside a
// synctest bubble (minutes of waiting cost nothing), prints the table, and
// asserts what must hold of llmretry. It draws the 502 outage of 3 minutes
// as a picture (ridethrough_svg_test.go). With LLMRETRY_WRITE_TABLE=1 it
// also writes the table to docs/outage-table.md and the picture to
// docs/ride-through.svg:
//
//	cd interop && LLMRETRY_WRITE_TABLE=1 go test -run TestOutageTable -count=1 .
func TestOutageTable(t *testing.T) {
	cells := runOutageTable(t)
	crowds := runCrowds(t)
	table := renderTable(cells, outageSamples) + renderCrowd(crowds)
	t.Log("\n" + table)
	picture, err := ridePictureOf(cells, crowds)
	require.NoError(t, err)
	svg := renderRideThrough(picture)
	if os.Getenv(writeTableEnv) == "1" {
		for _, f := range []struct{ name, text string }{{"outage-table.md", table}, {"ride-through.svg", svg}} {
			path := filepath.Join("..", "docs", f.name)
			require.NoError(t, os.WriteFile(path, []byte(f.text), 0o644))
			t.Logf("wrote %s", path)
		}
	}

	// forEach calls f with every cell of client, with its fault and length.
	forEach := func(client string, f func(c outageCell)) {
		for _, fault := range outageFaults {
			for _, l := range outageLengths {
				f(cells[fault.name][l][client])
			}
		}
	}
	llmretryClients := []string{"llmretry zero Policy", "llmretry host policy"}

	t.Run("host policy rides through every outage its schedule reaches", func(t *testing.T) {
		// Its schedule, computed: with Retry-After 20 and a 6-minute
		// outage the attempts land at 0, 20 s, 65 s and 185 s, and the
		// next 4-minute wait would eat the reserve, so giving up at 185 s
		// is right.
		p := hostPolicy()
		assert.Equal(t, scheduled{at: []time.Duration{0, 20 * time.Second, 65 * time.Second, 185 * time.Second}, elapsed: 185 * time.Second},
			predict(p, 20*time.Second, 6*time.Minute), "the predictor agrees with the worked example")
		forEach("llmretry host policy", func(c outageCell) {
			if c.fault.hopeless {
				return
			}
			want := predict(p, c.fault.retryAfter, c.recovery)
			got := c.runs[0]
			assert.Equal(t, want.ok, got.ok, "%s: ok (%v)", c.name(), got.err)
			assert.Equal(t, want.at, got.at, "%s: attempts", c.name())
			assert.Equal(t, want.elapsed, got.elapsed, "%s: time to the answer or to giving up", c.name())
		})
	})

	t.Run("400 costs llmretry one attempt", func(t *testing.T) {
		for _, client := range llmretryClients {
			forEach(client, func(c outageCell) {
				if c.fault.reply.Status != 400 {
					return
				}
				for _, r := range c.runs {
					assert.Len(t, r.at, 1, c.name())
					assert.Equal(t, c.recovery == 0, r.ok, c.name())
				}
			})
		}
	})

	t.Run("insufficient_quota costs llmretry one attempt", func(t *testing.T) {
		for _, client := range llmretryClients {
			forEach(client, func(c outageCell) {
				if c.fault.name != "429 insufficient_quota (OpenAI)" {
					return
				}
				for _, r := range c.runs {
					assert.Len(t, r.at, 1, "%s: a spent quota is final", c.name())
					assert.Equal(t, c.recovery == 0, r.ok, c.name())
				}
			})
		}
	})

	t.Run("llmretry sends at most 8 attempts and never waits into the reserve", func(t *testing.T) {
		reserves := map[string]time.Duration{
			"llmretry zero Policy": zeroPolicyReserve,
			"llmretry host policy": hostPolicy().Reserve,
		}
		for _, client := range llmretryClients {
			reserve := reserves[client]
			forEach(client, func(c outageCell) {
				for _, r := range c.runs {
					assert.LessOrEqual(t, len(r.at), 8, c.name())
					for _, at := range r.at {
						assert.LessOrEqual(t, at, turnDeadline-reserve, "%s: an attempt after a wait into the reserve", c.name())
					}
					if !r.ok {
						assert.LessOrEqual(t, r.elapsed, turnDeadline-reserve, "%s: gave up after the deadline minus the reserve", c.name())
					}
				}
			})
		}
	})

	t.Run("the oracle and the bare client", func(t *testing.T) {
		forEach("oracle", func(c outageCell) {
			r := c.runs[0]
			fits := c.recovery+genTime <= turnDeadline
			assert.Equal(t, fits, r.ok, c.name())
			if fits {
				assert.Equal(t, c.recovery+genTime, r.elapsed, c.name())
			}
		})
		forEach("bare client", func(c outageCell) {
			assert.Equal(t, c.recovery == 0, c.runs[0].ok, c.name())
			assert.Len(t, c.runs[0].at, 1, c.name())
		})
	})

	t.Run("the picture: the peers give up during the outage, llmretry answers just after it", func(t *testing.T) {
		rideThroughAsserts(t, picture, svg)
	})

	t.Run("no client answers sooner than the oracle", func(t *testing.T) {
		for _, client := range outageClients {
			forEach(client.name, func(c outageCell) {
				for _, r := range c.runs {
					if r.ok {
						assert.GreaterOrEqual(t, r.elapsed, c.recovery+genTime, c.name())
					}
				}
			})
		}
	})
}

// runOutageTable runs every cell, each call in its own synctest bubble.
func runOutageTable(t *testing.T) map[string]map[time.Duration]map[string]outageCell {
	cells := map[string]map[time.Duration]map[string]outageCell{}
	for _, f := range outageFaults {
		cells[f.name] = map[time.Duration]map[string]outageCell{}
		for _, l := range outageLengths {
			cells[f.name][l] = map[string]outageCell{}
			for _, c := range outageClients {
				cell := outageCell{client: c.name, fault: f, recovery: l}
				n := 1
				if c.jittered {
					n = outageSamples
				}
				for range n {
					cell.runs = append(cell.runs, runOutage(t, c, f, l))
				}
				cells[f.name][l][c.name] = cell
			}
		}
	}
	return cells
}

// runOutage makes one call of client c under the turn deadline against a
// provider down with fault f for recovery.
func runOutage(t *testing.T, c outageClient, f outageFault, recovery time.Duration) outageRun {
	var r outageRun
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), turnDeadline)
		defer cancel()
		tl := newTimeline(f.reply, recovery)
		err := c.call(ctx, tl)
		r = outageRun{ok: err == nil, err: err, at: tl.attempts(), elapsed: time.Since(tl.start)}
	})
	return r
}

// Helpers of the outage table: a provider that follows a
// timeline, the clients compared, and the table's rendering.

// genTime is how long a healthy provider takes to generate an answer: the
// answer arrives genTime after the request reaches it.
const genTime = 2 * time.Second

// timeline is an in-memory provider that answers fault to every request
// that reaches it before recovery (measured from start), faultTime after
// it arrives, and from then on the answer after genTime. It starts no
// goroutine and only sleeps on timers, so inside a synctest bubble its
// minutes pass at once.
type timeline struct {
	start     time.Time
	recovery  time.Duration
	fault     testkit.Reply
	faultTime time.Duration // how long the fault takes to come back (0: at once)

	mu       sync.Mutex
	at       []time.Duration // when each attempt reached it, since start
	faultsAt []time.Duration // when each fault left it, since start
}

// newTimeline starts the timeline now.
func newTimeline(fault testkit.Reply, recovery time.Duration) *timeline {
	return &timeline{start: time.Now(), recovery: recovery, fault: fault}
}

// outageAnswer is the provider's answer once it has recovered.
var outageAnswer = testkit.OpenAIChatCompletion("Back again: here is your answer.")

// RoundTrip answers req as the timeline says at the time it arrives. A
// connection error counts as an attempt: the request was sent.
func (tl *timeline) RoundTrip(req *http.Request) (*http.Response, error) {
	discardBody(req)
	now := time.Since(tl.start)
	tl.mu.Lock()
	tl.at = append(tl.at, now)
	tl.mu.Unlock()

	rep, took := tl.fault, tl.faultTime
	if now >= tl.recovery {
		rep, took = outageAnswer, genTime
	}
	if took > 0 {
		t := time.NewTimer(took)
		defer t.Stop()
		select {
		case <-req.Context().Done():
			return nil, req.Context().Err()
		case <-t.C:
		}
	}
	if now < tl.recovery {
		tl.mu.Lock()
		tl.faultsAt = append(tl.faultsAt, time.Since(tl.start))
		tl.mu.Unlock()
	}
	if rep.Err != nil {
		return nil, rep.Err
	}
	return rep.Response(req), nil
}

// attempts returns when each attempt reached the provider, since start.
func (tl *timeline) attempts() []time.Duration {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	return slices.Clone(tl.at)
}

// faults returns when each fault left the provider, since start, in order.
func (tl *timeline) faults() []time.Duration {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	return slices.Clone(tl.faultsAt)
}

// --- The faults ---

// outageFault is one kind of outage: what the provider answers while down.
type outageFault struct {
	name       string
	reply      testkit.Reply
	retryAfter time.Duration // the Retry-After the fault carries (0: none)
	hopeless   bool          // waiting does not help: one attempt is right
}

// outageFaults are the table's rows.
var outageFaults = []outageFault{
	{name: "502 Bad Gateway (edge page, upstream down)", reply: testkit.BadGateway()},
	{name: "connection refused", reply: testkit.Refused()},
	{name: "429 rate limited, Retry-After: 20", reply: testkit.OpenAIRateLimited("20"), retryAfter: 20 * time.Second},
	{name: "529 overloaded (Anthropic)", reply: testkit.AnthropicOverloaded()},
	{name: "429 insufficient_quota (OpenAI)", reply: testkit.OpenAIInsufficientQuota(), hopeless: true},
	{name: "400 invalid request", reply: testkit.OpenAIError(http.StatusBadRequest,
		"Invalid 'messages': empty array. Expected an array with minimum length 1, but got an empty array instead.",
		"invalid_request_error", "messages", "empty_array"), hopeless: true},
}

// outageLengths are the table's columns: how long the provider is down
// from the moment the call starts.
var outageLengths = []time.Duration{0, 2 * time.Second, 30 * time.Second, 3 * time.Minute, 6 * time.Minute, 10 * time.Minute}

// turnDeadline is the agent turn's deadline (context.WithTimeout).
const turnDeadline = 8 * time.Minute

// hostPolicy is seed 000's host policy.
func hostPolicy() llmretry.Policy {
	return llmretry.Policy{
		Waits:   []time.Duration{15 * time.Second, 45 * time.Second, 2 * time.Minute, 4 * time.Minute},
		Reserve: 60 * time.Second,
	}
}

// --- The clients ---

// outageClient makes one chat call to a timeline and reports whether an
// answer came back.
type outageClient struct {
	name     string
	about    string // how it is set up, for the table's notes
	jittered bool   // its waits are random: the table samples it
	call     func(ctx context.Context, tl *timeline) error
}

// plainChat sends one chat completion request through c and checks the
// answer.
func plainChat(ctx context.Context, c *http.Client) error {
	return sendChat(ctx, c, `{"model":"`+openAIModel+`","messages":[{"role":"user","content":"Say hello."}]}`)
}

// sendChat sends a chat completion request with reqBody through c and
// checks the answer.
func sendChat(ctx context.Context, c *http.Client, reqBody string) error {
	h := http.Header{"Authorization": {"Bearer " + dummyOpenAIKey}}
	return postAnswer(ctx, c, fakeOpenAIURL+"chat/completions", reqBody, h, "choices")
}

// postAnswer POSTs the JSON body to url through c with header, and checks
// that the answer is a 200 whose JSON has a non-empty array named list
// (Chat Completions' "choices", Messages' "content").
func postAnswer(ctx context.Context, c *http.Client, url, body string, header http.Header, list string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		return err
	}
	req.Header = header.Clone()
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	answer, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return errors.New(resp.Status)
	}
	var fields map[string]json.RawMessage
	var items []json.RawMessage
	if json.Unmarshal(answer, &fields) != nil || json.Unmarshal(fields[list], &items) != nil || len(items) == 0 {
		return fmt.Errorf("unreadable answer: %q", answer)
	}
	return nil
}

// outageClients are the table's columns within a fault, in order.
var outageClients = []outageClient{
	{
		name:  "oracle",
		about: "knows when the provider recovers: one attempt, then (if the answer fits in the turn) one at the recovery — the lower bound",
		call: func(ctx context.Context, tl *timeline) error {
			c := &http.Client{Transport: tl}
			err := plainChat(ctx, c)
			if err == nil || tl.recovery+genTime > turnDeadline {
				return err
			}
			time.Sleep(time.Until(tl.start.Add(tl.recovery)))
			return plainChat(ctx, c)
		},
	},
	{
		name:  "bare client",
		about: "`http.Client` straight on the provider: no retry",
		call: func(ctx context.Context, tl *timeline) error {
			return plainChat(ctx, &http.Client{Transport: tl})
		},
	},
	{
		name:     "openai-go defaults",
		about:    "openai-go v3 `Chat.Completions.New` with its own retry as shipped (2 retries, 0.5 s·2ⁿ minus up to 25 % jitter, Retry-After up to 2 min), over the bare provider",
		jittered: true,
		call: func(ctx context.Context, tl *timeline) error {
			client := openAIClient(fakeOpenAIURL, tl)
			_, err := client.Chat.Completions.New(ctx, openAIParams())
			return err
		},
	},
	{
		name:  "retryablehttp default",
		about: "`retryablehttp.NewClient()` (4 retries, 1 s·2ⁿ up to 30 s, Retry-After on 429/503), Logger nil, `StandardClient()`",
		call: func(ctx context.Context, tl *timeline) error {
			rc := retryablehttp.NewClient()
			rc.HTTPClient.Transport = tl
			rc.Logger = nil
			return plainChat(ctx, rc.StandardClient())
		},
	},
	{
		name:  "failsafehttp 1–30 s",
		about: "failsafe-go `failsafehttp.NewRetryPolicyBuilder().WithBackoff(1s, 30s).ReturnLastFailure()` (2 retries, Retry-After on 429/503) in `failsafehttp.NewRoundTripper`",
		call: func(ctx context.Context, tl *timeline) error {
			rp := failsafehttp.NewRetryPolicyBuilder().WithBackoff(time.Second, 30*time.Second).ReturnLastFailure().Build()
			return plainChat(ctx, &http.Client{Transport: failsafehttp.NewRoundTripper(tl, rp)})
		},
	},
	{
		name:     "llmretry zero Policy",
		about:    "`llmretry.New(provider, llmretry.Policy{})`: 6 retries, full jitter up to 1 s·2ⁿ⁻¹ capped at 60 s, reserve 60 s",
		jittered: true,
		call: func(ctx context.Context, tl *timeline) error {
			rt, err := llmretry.New(tl, llmretry.Policy{})
			if err != nil {
				return err
			}
			return plainChat(ctx, &http.Client{Transport: rt})
		},
	},
	{
		name:  "llmretry host policy",
		about: "seed 000's host policy: `Waits` 15 s, 45 s, 2 min, 4 min (the last repeats), `Reserve` 60 s",
		call: func(ctx context.Context, tl *timeline) error {
			rt, err := llmretry.New(tl, hostPolicy())
			if err != nil {
				return err
			}
			return plainChat(ctx, &http.Client{Transport: rt})
		},
	},
}

// --- Results ---

// outageRun is the result of one call.
type outageRun struct {
	ok      bool
	err     error
	at      []time.Duration // when each attempt reached the provider
	elapsed time.Duration   // when the call returned (the answer, or giving up)
}

// lag is the time from the provider's recovery to the answer.
func (r outageRun) lag(recovery time.Duration) time.Duration { return r.elapsed - recovery }

// outageCell is every run of one client against one fault and length.
type outageCell struct {
	client   string
	fault    outageFault
	recovery time.Duration
	runs     []outageRun
}

// name identifies the cell in assertion messages.
func (c outageCell) name() string {
	return fmt.Sprintf("%s / %s / down %s", c.client, c.fault.name, fmtDur(c.recovery))
}

// fmtDur renders d for the table: tenths under 10 s, whole seconds under a
// minute, then 3m05s.
func fmtDur(d time.Duration) string {
	switch {
	case d < 10*time.Second:
		return d.Round(100 * time.Millisecond).String()
	case d < time.Minute:
		return d.Round(time.Second).String()
	}
	d = d.Round(time.Second)
	return fmt.Sprintf("%dm%02ds", d/time.Minute, (d%time.Minute)/time.Second)
}

// span renders the range of vs ("3" or "3–5") with f.
func span[T int | time.Duration](vs []T, f func(T) string) string {
	lo, hi := slices.Min(vs), slices.Max(vs)
	if f(lo) == f(hi) {
		return f(lo)
	}
	return f(lo) + "–" + f(hi)
}

// render writes the cell: ok/fail, attempts, time to the answer (or to
// giving up) and, when ok, the recovery lag. Sampled cells show ranges and,
// when runs disagree, how many came through.
func (c outageCell) render() string {
	var ok, failed []outageRun
	for _, r := range c.runs {
		if r.ok {
			ok = append(ok, r)
		} else {
			failed = append(failed, r)
		}
	}
	count := func(rs []outageRun) string {
		n := make([]int, len(rs))
		for i, r := range rs {
			n[i] = len(r.at)
		}
		return span(n, func(v int) string { return fmt.Sprint(v) })
	}
	times := func(rs []outageRun, f func(outageRun) time.Duration) string {
		d := make([]time.Duration, len(rs))
		for i, r := range rs {
			d[i] = f(r)
		}
		return span(d, fmtDur)
	}
	elapsed := func(r outageRun) time.Duration { return r.elapsed }
	if len(ok) == 0 {
		return fmt.Sprintf("fail · %s · %s", count(failed), times(failed, elapsed))
	}
	head := "**ok**"
	if len(failed) > 0 {
		head = fmt.Sprintf("**ok %d/%d**", len(ok), len(c.runs))
	}
	lag := times(ok, func(r outageRun) time.Duration { return r.lag(c.recovery) })
	return fmt.Sprintf("%s · %s · %s · +%s", head, count(ok), times(ok, elapsed), lag)
}

// renderTable renders the whole document.
func renderTable(cells map[string]map[time.Duration]map[string]outageCell, samples int) string {
	var b strings.Builder
	b.WriteString(`# Outage table

<!-- Generated by interop/outage_test.go (TestOutageTable); do not edit. -->

What one agent call gets from each client when the model provider is down
for a while and then recovers. Every run is one chat-completion call under
a turn deadline of ` + fmtDur(turnDeadline) + ` (` + "`context.WithTimeout`" + `), run against an
in-memory provider in a ` + "`testing/synctest`" + ` bubble, so the minutes are
simulated exactly. The provider answers the fault to every request that
reaches it during the outage (counted from the start of the call), and
from then on the answer, ` + fmtDur(genTime) + ` after the request reaches it. For
the last two faults (a spent quota, a bad request) "recovery" means someone
fixed the account or the request: no client can know when, and one attempt
is the right cost.

Regenerate (from the repository root):

    cd interop && LLMRETRY_WRITE_TABLE=1 go test -run TestOutageTable -count=1 .

**Cell**: ok or fail · attempts sent (a refused connection counts) · time
from the start of the call to the answer (for a fail: to giving up) ·
recovery lag, from the provider's recovery to the answer (the generation
time, ` + fmtDur(genTime) + `, is the least it can be). Clients marked † wait random
times: their cells are ` + fmt.Sprint(samples) + ` runs, with ranges, and "ok k/n" when only k of n
came through; they vary from one regeneration to the next.

TestOutageTable asserts, on every run: llmretry with the host policy comes
through in every cell its own schedule reaches before the deadline minus
the reserve, with exactly the attempts and times that schedule predicts
(and gives up where it does not: with Retry-After 20 and a 6-minute outage
its attempts land at 0, 20 s, 65 s and 185 s, and the next 4-minute wait
would eat the reserve); the hopeless faults cost llmretry one attempt; no
llmretry run sends more than 8 attempts or starts one after the deadline
minus the reserve; no client answers sooner than the oracle.

**Clients**

`)
	for _, c := range outageClients {
		mark := ""
		if c.jittered {
			mark = " †"
		}
		fmt.Fprintf(&b, "- **%s**%s: %s.\n", c.name, mark, c.about)
	}
	for _, f := range outageFaults {
		fmt.Fprintf(&b, "\n## %s\n\n| client |", f.name)
		for _, l := range outageLengths {
			fmt.Fprintf(&b, " down %s |", fmtDur(l))
		}
		b.WriteString("\n|---|")
		for range outageLengths {
			b.WriteString("---|")
		}
		b.WriteString("\n")
		for _, c := range outageClients {
			mark := ""
			if c.jittered {
				mark = " †"
			}
			fmt.Fprintf(&b, "| %s%s |", c.name, mark)
			for _, l := range outageLengths {
				fmt.Fprintf(&b, " %s |", cells[f.name][l][c.name].render())
			}
			b.WriteString("\n")
		}
	}
	return b.String()
}

// --- The host policy's own schedule, computed ---

// scheduled is what a policy's schedule predicts for one fault and outage:
// when each attempt starts, and whether the last one lands after recovery.
type scheduled struct {
	at      []time.Duration
	ok      bool
	elapsed time.Duration // the answer (ok) or giving up
}

// predict walks policy p's Waits from an attempt at 0, each fault answered
// at once: the wait before retry k is max(Waits[k-1] (the last repeating),
// retryAfter), taken only if it ends at least p.Reserve before the turn's
// deadline. The first attempt at or after recovery gets the answer
// genTime later.
func predict(p llmretry.Policy, retryAfter, recovery time.Duration) scheduled {
	var s scheduled
	now := time.Duration(0)
	for k := 1; ; k++ {
		s.at = append(s.at, now)
		if now >= recovery {
			s.ok, s.elapsed = true, now+genTime
			return s
		}
		wait := p.Waits[min(k, len(p.Waits))-1]
		wait = max(wait, retryAfter)
		if now+wait+p.Reserve > turnDeadline {
			s.elapsed = now
			return s
		}
		now += wait
	}
}
