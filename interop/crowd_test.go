package interop

// Many calls at once (GitHub issue 7): 100 chat calls to one provider key,
// all through one coordinated Transport (llmretry.NewCoordinated) or each
// through its own Transport (llmretry.New, what the host had before),
// while the provider is down. The section "Many calls at once" of
// docs/outage-table.md is rendered from these runs (TestOutageTable).
// Last, a crowd of 20 under openai-go and anthropic-sdk-go with the SDKs'
// own retries on (TestCoordinatedUnderSDKs).

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/llmretry/llmretry"
	"github.com/llmretry/llmretry/coordination"
	"github.com/llmretry/llmretry/internal/testkit"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// crowdCalls is how many calls run at once in the scenarios.
const crowdCalls = 100

// The defaults a zero coordination.Config stands for, as its field docs
// state them.
const (
	defaultProbeInterval = 5 * time.Second
	defaultReleaseSpread = time.Second
)

// crowdScenario is one outage the crowd goes through.
type crowdScenario struct {
	id         string // "a", "b": for logs
	name       string // for the table
	calls      int    // how many calls run at once
	fault      testkit.Reply
	faultTime  time.Duration // how long the fault takes to come back
	recovery   time.Duration // the provider is down from 0 until then
	stagger    time.Duration // call i starts at i × stagger
	serverWait time.Duration // the wait the fault asks for (0: none)
}

// crowdScenarios: (a) an edge proxy answers 502 after timing out on its
// upstream for 200 ms, for 3 minutes; (b) the provider's rate limiter
// answers 429 with Retry-After: 30 at once (100 ms), for 30 s, while new
// calls keep arriving.
//
// (c) and (d) are (a) with 10 calls and with one: the probes' cost is per
// provider key, not per call, so with few calls coordination sends more
// than the calls' own schedules would. (e) is (a) 30 s longer: the host
// policy's own schedule no longer lands an attempt just after recovery.
var crowdScenarios = []crowdScenario{
	{id: "a", name: "502 Bad Gateway for 3m00s, 100 calls, all start at 0", calls: crowdCalls, fault: testkit.BadGateway(), faultTime: 200 * time.Millisecond, recovery: 3 * time.Minute},
	{id: "b", name: "429 Retry-After: 30 for 30s, 100 calls, call i starts at i × 200ms", calls: crowdCalls, fault: testkit.OpenAIRateLimited("30"),
		faultTime: 100 * time.Millisecond, recovery: 30 * time.Second, stagger: 200 * time.Millisecond, serverWait: 30 * time.Second},
	{id: "c", name: "502 Bad Gateway for 3m00s, 10 calls", calls: 10, fault: testkit.BadGateway(), faultTime: 200 * time.Millisecond, recovery: 3 * time.Minute},
	{id: "d", name: "502 Bad Gateway for 3m00s, 1 call", calls: 1, fault: testkit.BadGateway(), faultTime: 200 * time.Millisecond, recovery: 3 * time.Minute},
	{id: "e", name: "502 Bad Gateway for 3m30s, 100 calls, all start at 0", calls: crowdCalls, fault: testkit.BadGateway(), faultTime: 200 * time.Millisecond, recovery: 3*time.Minute + 30*time.Second},
}

// crowdClient is one way of sending the crowd's calls.
type crowdClient struct {
	name        string
	about       string
	jittered    bool // its waits are random: figures vary between runs
	coordinated bool // one NewCoordinated Transport for all calls; else New per call
	policy      func() llmretry.Policy
}

// crowdClients are the section's rows within a scenario, in order.
var crowdClients = []crowdClient{
	{
		name:        "llmretry host policy, coordinated",
		about:       "one `llmretry.NewCoordinated(provider, hostPolicy, coordination.Config{})` for all the calls: probes at most 5 s apart (0–20 % sooner), release spread 1 s",
		jittered:    true,
		coordinated: true,
		policy:      hostPolicy,
	},
	{
		name:        "llmretry zero Policy, coordinated",
		about:       "one `llmretry.NewCoordinated(provider, llmretry.Policy{}, coordination.Config{})` for all the calls",
		jittered:    true,
		coordinated: true,
		policy:      func() llmretry.Policy { return llmretry.Policy{} },
	},
	{
		name:   "llmretry host policy, independent",
		about:  "`llmretry.New(provider, hostPolicy)` once per call, a Transport each: what the host had before",
		policy: hostPolicy,
	},
	{
		name:     "llmretry zero Policy, independent",
		about:    "`llmretry.New(provider, llmretry.Policy{})` once per call, a Transport each",
		jittered: true,
		policy:   func() llmretry.Policy { return llmretry.Policy{} },
	},
}

// crowdRun is what one client got in one scenario.
type crowdRun struct {
	scenario crowdScenario
	client   crowdClient
	errs     []error         // per call: nil for an answer
	done     []time.Duration // per call: when it returned, since the provider's start
	at       []time.Duration // when each attempt reached the provider
	faultsAt []time.Duration // when each fault left the provider
	probes   int             // attempts llmretry marked Attempt.Probe
	probesBy []int           // per call: its attempts marked Attempt.Probe
	probesAt []time.Duration // when each probe reached the provider, in order
}

// crowdCallKey is the context key under which a crowd call carries its
// index, so that the attempt record can tell the calls apart.
type crowdCallKey struct{}

// runCrowd makes s.calls chat calls through client c, call i starting
// at i × s.stagger under its own turn deadline, against a provider down
// with s.fault until s.recovery, all in one synctest bubble.
func runCrowd(t *testing.T, c crowdClient, s crowdScenario) crowdRun {
	r := crowdRun{scenario: s, client: c}
	synctest.Test(t, func(t *testing.T) {
		tl := newTimeline(s.fault, s.recovery)
		tl.faultTime = s.faultTime
		base := &sendLog{tl: tl, at: map[*http.Request]time.Duration{}}
		var mu sync.Mutex
		r.probesBy = make([]int, s.calls)
		p := c.policy()
		p.OnAttempt = func(a llmretry.Attempt) { // an observer: the policy is unchanged
			if a.Probe {
				mu.Lock()
				r.probes++
				r.probesBy[a.Request.Context().Value(crowdCallKey{}).(int)]++
				at, ok := base.sentAt(a.Request)
				if !ok {
					t.Errorf("(%s) %s: probe %s names a request the provider never got", s.id, c.name, a)
				}
				r.probesAt = append(r.probesAt, at)
				mu.Unlock()
			}
		}
		clients := httpClients(t, base, p, s.calls, c.coordinated)
		r.errs = make([]error, s.calls)
		r.done = make([]time.Duration, s.calls)
		var wg sync.WaitGroup
		for i := range s.calls {
			wg.Go(func() {
				time.Sleep(time.Duration(i) * s.stagger)
				ctx, cancel := context.WithTimeout(context.WithValue(context.Background(), crowdCallKey{}, i), turnDeadline)
				defer cancel()
				r.errs[i] = plainChat(ctx, clients[i])
				r.done[i] = time.Since(tl.start)
			})
		}
		wg.Wait()
		r.at, r.faultsAt = tl.attempts(), tl.faults()
		slices.Sort(r.probesAt)
	})
	return r
}

// sendLog is a crowd's base transport: it notes when each request reaches
// the timeline, so that OnAttempt, which runs when the attempt has ended,
// can tell when a probe was sent.
type sendLog struct {
	tl *timeline
	mu sync.Mutex
	at map[*http.Request]time.Duration
}

// RoundTrip notes when req arrived and passes it to the timeline.
func (s *sendLog) RoundTrip(req *http.Request) (*http.Response, error) {
	s.mu.Lock()
	s.at[req] = time.Since(s.tl.start)
	s.mu.Unlock()
	return s.tl.RoundTrip(req)
}

// sentAt returns when req reached the timeline, and false if it never
// did.
func (s *sendLog) sentAt(req *http.Request) (time.Duration, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	at, ok := s.at[req]
	return at, ok
}

// runCrowds runs every client through every scenario, in order.
func runCrowds(t *testing.T) []crowdRun {
	var runs []crowdRun
	for _, s := range crowdScenarios {
		for _, c := range crowdClients {
			runs = append(runs, runCrowd(t, c, s))
		}
	}
	return runs
}

// ok returns how many calls got an answer.
func (r crowdRun) ok() int { return answered(r.errs) }

// answered counts the calls whose error is nil: those that got an answer.
func answered(errs []error) int {
	n := 0
	for _, err := range errs {
		if err == nil {
			n++
		}
	}
	return n
}

// lags returns, sorted, the recovery lag of every call that got an
// answer: from the provider's recovery to the answer.
func (r crowdRun) lags() []time.Duration {
	var l []time.Duration
	for i, err := range r.errs {
		if err == nil {
			l = append(l, r.done[i]-r.scenario.recovery)
		}
	}
	slices.Sort(l)
	return l
}

// median returns the median of sorted l (0 for none).
func median(l []time.Duration) time.Duration {
	switch n := len(l); {
	case n == 0:
		return 0
	case n%2 == 1:
		return l[n/2]
	default:
		return (l[n/2-1] + l[n/2]) / 2
	}
}

// firstFault returns when the first fault left the provider.
func (r crowdRun) firstFault() (time.Duration, bool) {
	if len(r.faultsAt) == 0 {
		return 0, false
	}
	return slices.Min(r.faultsAt), true
}

// afterFirstFault returns how long after the first fault left the
// provider the next request reached it.
func (r crowdRun) afterFirstFault() (time.Duration, bool) {
	first, ok := r.firstFault()
	if !ok {
		return 0, false
	}
	next, found := time.Duration(0), false
	for _, a := range r.at {
		if a > first && (!found || a < next) {
			next, found = a, true
		}
	}
	return next - first, found
}

// firstErr returns the first call's error, for messages.
func (r crowdRun) firstErr() error {
	for _, err := range r.errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// fmtFine renders d to the tenth of a second under a minute (fmtDur
// rounds from 10 s to whole seconds, which would hide 10.2 s against a
// 10 s bound), and as fmtDur above.
func fmtFine(d time.Duration) string {
	if d < time.Minute {
		return fmt.Sprintf("%.1fs", d.Seconds())
	}
	return fmtDur(d)
}

// fmtMilli renders d in seconds to the millisecond.
func fmtMilli(d time.Duration) string { return fmt.Sprintf("%.3fs", d.Seconds()) }

// figures renders r on one line for the log.
func (r crowdRun) figures() string {
	l := r.lags()
	s := fmt.Sprintf("%-36s ok %3d/%d  attempts %4d (probes %2d, at most %d by one call)", r.client.name, r.ok(), r.scenario.calls, len(r.at), r.probes, slices.Max(r.probesBy))
	if len(l) > 0 {
		s += fmt.Sprintf("  lag max %6s median %6s", fmtFine(l[len(l)-1]), fmtFine(median(l)))
	}
	if r.scenario.serverWait > 0 {
		if d, ok := r.afterFirstFault(); ok {
			s += fmt.Sprintf("  first attempt %s after the first 429", fmtMilli(d))
		}
	}
	if err := r.firstErr(); err != nil {
		s += fmt.Sprintf("  (first error: %v)", err)
	}
	return s
}

// TestCrowdRideThrough is GitHub issue 7: 100 concurrent calls on one API
// key, deadline 8 min, through (a) a 3-minute 502 outage and (b) 30 s of
// 429 with Retry-After: 30, with one coordinated Transport and with one
// Transport per call. Run with -v for the comparison.
func TestCrowdRideThrough(t *testing.T) {
	runs := map[string]map[string]crowdRun{}
	for _, r := range runCrowds(t) {
		if runs[r.scenario.id] == nil {
			runs[r.scenario.id] = map[string]crowdRun{}
		}
		runs[r.scenario.id][r.client.name] = r
	}
	for _, s := range crowdScenarios {
		t.Logf("(%s) %s:", s.id, s.name)
		for _, c := range crowdClients {
			t.Logf("    %s", runs[s.id][c.name].figures())
		}
	}
	coordinated := []string{"llmretry host policy, coordinated", "llmretry zero Policy, coordinated"}

	t.Run("502 for 3 min and 3.5 min: every call answers soon after recovery, at bounded cost", func(t *testing.T) {
		for _, s := range []crowdScenario{crowdScenarios[0], crowdScenarios[4]} {
			crowd502(t, runs[s.id], s, coordinated)
		}
	})

	t.Run("502 for 3 min, few calls: the probes cost per key, not per call", func(t *testing.T) {
		for _, s := range crowdScenarios[2:4] {
			for _, name := range coordinated {
				r := runs[s.id][name]
				// Probes go at least 4 s apart (ProbeInterval less 20 %):
				// each call's first attempt, the probes, and each call's
				// attempt after the recovery.
				bound := 2*s.calls + int(s.recovery/(defaultProbeInterval*4/5)) + 1
				assert.LessOrEqual(t, len(r.at), bound, "(%s) %s: provider attempts", s.id, name)
				// A call may run out of retries only if the probes
				// outnumber what all calls' retry counts allow.
				if name == "llmretry host policy, coordinated" || s.calls*zeroPolicyMaxRetries > bound {
					assert.Equal(t, s.calls, r.ok(), "(%s) %s: calls answered (first error: %v)", s.id, name, r.firstErr())
				}
				if l := r.lags(); len(l) > 0 {
					assert.LessOrEqual(t, l[len(l)-1], 10*time.Second, "(%s) %s: the slowest call's recovery lag", s.id, name)
				}
			}
		}
	})

	t.Run("429 Retry-After 30: nothing is sent for the key before the 30 s are over", func(t *testing.T) {
		s := crowdScenarios[1]
		for _, name := range coordinated {
			r := runs[s.id][name]
			assert.Equal(t, crowdCalls, r.ok(), "%s: calls answered (first error: %v)", name, r.firstErr())
			first, ok := r.firstFault()
			require.True(t, ok, "%s: the provider sent a 429", name)
			for _, a := range r.at {
				if a > first {
					assert.GreaterOrEqual(t, a-first, s.serverWait, "%s: an attempt %v after the first 429 (at %v)", name, a-first, first)
				}
			}
			// Every call started before the wait was over, so every one
			// was held and goes once: the first call's 429, then one
			// attempt each.
			assert.Equal(t, crowdCalls+1, len(r.at), "%s: provider attempts", name)
		}
		// The scenario is one in which new calls arrive during the wait:
		// one Transport per call sends them.
		indep := runs[s.id]["llmretry host policy, independent"]
		d, ok := indep.afterFirstFault()
		require.True(t, ok)
		assert.Less(t, d, s.serverWait, "independent Transports send during the wait")
	})
}

// crowd502 asserts what issue 7 asks of 100 calls through a 502 outage:
// runs are scenario s's, by client name.
func crowd502(t *testing.T, runs map[string]crowdRun, s crowdScenario, coordinated []string) {
	t.Helper()
	probeInterval := defaultProbeInterval // coordination.Config{} uses the defaults
	for _, c := range crowdClients {
		r := runs[c.name]
		atStart := 0
		for _, a := range r.at {
			if a == 0 {
				atStart++
			}
		}
		assert.Equal(t, s.calls, atStart, "(%s) %s: the first attempts are in flight together before the first 502 comes back", s.id, c.name)
	}
	for _, name := range coordinated {
		r := runs[name]
		// The zero Policy allows 6 retries, and a probe is a retry of
		// the call that sends it: the probes go in turns (most attempts
		// left first), so ~40 probes among 100 calls cost no call more
		// than one.
		assert.Equal(t, s.calls, r.ok(), "(%s) %s: calls answered (first error: %v)", s.id, name, r.firstErr())
		assert.LessOrEqual(t, slices.Max(r.probesBy), 1, "(%s) %s: probes taken in turns", s.id, name)
		if l := r.lags(); len(l) > 0 {
			// Issue 7 asks for 10 s: at worst the last failed probe was
			// sent just before the recovery, and the next one goes at
			// most a probe interval after it was sent (however long
			// its 502 took), then the probe's generation, the release
			// spread and the released call's generation: 5 + 2 + 1 + 2 s.
			worst := probeInterval + genTime + defaultReleaseSpread + genTime
			assert.LessOrEqual(t, worst, 10*time.Second)
			assert.LessOrEqual(t, l[len(l)-1], worst, "(%s) %s: the slowest call's recovery lag", s.id, name)
			assert.GreaterOrEqual(t, l[0], genTime, "(%s) %s: no answer before the provider could give one", s.id, name)
		}
		// Everyone's first attempt, one probe per interval during the
		// outage, everyone's attempt after recovery.
		bound := 2*s.calls + int(s.recovery/probeInterval) + 10
		assert.LessOrEqual(t, len(r.at), bound, "(%s) %s: provider attempts", s.id, name)
		assert.Positive(t, r.probes, "(%s) %s: probes were marked", s.id, name)
	}
	coord, indep := runs["llmretry host policy, coordinated"], runs["llmretry host policy, independent"]
	assert.Greater(t, len(indep.at), len(coord.at), "(%s) 100 independent Transports send more than one coordinated one", s.id)
}

// A coordinated Transport under openai-go and anthropic-sdk-go with the
// SDKs' own retries left on (as shipped): 20 calls each through a 2-minute
// outage (502 for OpenAI, 529 for Anthropic) all come through within
// seconds of the recovery, at one probe per interval; and when the outage
// outlasts the turn, the calls give up without sending, and the SDKs' own
// retries of the HeldError send no more than the key's probes.
func TestCoordinatedUnderSDKs(t *testing.T) {
	const calls = 20
	sdks := []struct {
		name string
		down testkit.Reply
		call func(ctx context.Context, rt *llmretry.Transport) error
	}{
		{"openai-go", testkit.BadGateway(), func(ctx context.Context, rt *llmretry.Transport) error {
			c := openAIClient(fakeOpenAIURL, rt)
			_, err := c.Chat.Completions.New(ctx, openAIParams())
			return err
		}},
		{"anthropic-sdk-go", testkit.AnthropicOverloaded(), func(ctx context.Context, rt *llmretry.Transport) error {
			c := anthropicClient(fakeAnthropicURL, rt)
			_, err := c.Messages.New(ctx, anthropicParams())
			return err
		}},
	}
	for _, sdk := range sdks {
		for _, tc := range []struct {
			name     string
			outage   time.Duration
			deadline time.Duration
		}{
			{"rides through", 2 * time.Minute, turnDeadline},
			{"gives up without sending", time.Hour, 3 * time.Minute},
		} {
			t.Run(sdk.name+"/"+tc.name, func(t *testing.T) {
				synctest.Test(t, func(t *testing.T) {
					tl := newTimeline(sdk.down, tc.outage)
					tl.faultTime = 100 * time.Millisecond
					rt, err := llmretry.NewCoordinated(tl, hostPolicy(), coordination.Config{})
					require.NoError(t, err)
					errs := make([]error, calls)
					done := make([]time.Duration, calls)
					var wg sync.WaitGroup
					for i := range calls {
						wg.Go(func() {
							ctx, cancel := context.WithTimeout(context.Background(), tc.deadline)
							defer cancel()
							errs[i] = sdk.call(ctx, rt)
							done[i] = time.Since(tl.start)
						})
					}
					wg.Wait()
					at := tl.attempts()
					// Each call's first attempt (and the SDK's own retries
					// of the first 5xx, while the key was not yet known to
					// be down), one probe per 4 s at most, and each call's
					// attempt after the recovery.
					probes := int(min(tc.outage, tc.deadline)/(defaultProbeInterval*4/5)) + 1
					if tc.outage < tc.deadline {
						for i, err := range errs {
							require.NoError(t, err, "call %d", i)
							assert.LessOrEqual(t, done[i]-tc.outage, 10*time.Second, "call %d: recovery lag", i)
						}
						assert.LessOrEqual(t, len(at), 3*calls+probes, "attempts: %v", at)
						return
					}
					// A call that can wait no longer ends with a HeldError
					// without sending. The SDK retries that error as a
					// new call, and a new call is sent only as the key's
					// probe, when one is due: so after the calls' deadline
					// minus reserve, at most one attempt per probe interval
					// reaches the provider, and an SDK error is either the
					// HeldError or that probe's own 5xx.
					for i, err := range errs {
						require.Error(t, err, "call %d", i)
						var held *coordination.HeldError
						if errors.As(err, &held) {
							assert.ErrorIs(t, err, llmretry.ErrNoTimeLeft, "call %d: the give-up says why through the SDK", i)
							continue
						}
						assert.Regexp(t, `5\d\d`, err.Error(), "call %d: neither a HeldError nor the probe's answer", i)
						if gave := llmretry.GaveUp(sdkHTTPResponse(err)); assert.NotNil(t, gave, "call %d: the probe's answer carries its record", i) {
							assert.Error(t, gave.Reason)
						}
					}
					giveUp := tc.deadline - hostPolicy().Reserve
					var late []time.Duration
					for _, a := range at {
						if a >= giveUp {
							late = append(late, a)
						}
					}
					for j := 1; j < len(late); j++ {
						assert.GreaterOrEqual(t, late[j]-late[j-1], defaultProbeInterval*4/5, "after the give-up only probes: %v", late)
					}
					assert.LessOrEqual(t, len(at), 3*calls+probes, "attempts: %v", at)
					t.Logf("%d calls, %d attempts, all gave up by %v", calls, len(at), slices.Max(done))
				})
			})
		}
	}
}

// renderCrowd renders the section of docs/outage-table.md on many calls
// at once.
func renderCrowd(runs []crowdRun) string {
	var b strings.Builder
	a, w, e := crowdScenarios[0], crowdScenarios[1], crowdScenarios[4]
	worst := defaultProbeInterval + 2*genTime + defaultReleaseSpread
	bound := func(s crowdScenario) string {
		return fmt.Sprintf("2 × %d + %s / %s + 10 = %d", s.calls, fmtDur(s.recovery), fmtDur(defaultProbeInterval),
			2*s.calls+int(s.recovery/defaultProbeInterval)+10)
	}
	lone := "more attempts"
	for _, r := range runs {
		if r.scenario.id == "d" && r.client.name == "llmretry host policy, coordinated" {
			lone = fmt.Sprint(len(r.at), " attempts coordinated")
		}
	}
	for _, r := range runs {
		if r.scenario.id == "d" && r.client.name == "llmretry host policy, independent" {
			lone += fmt.Sprint(" against ", len(r.at), " alone")
		}
	}
	// The host policy's fourth attempt, alone: its first three waits and
	// three faults' time.
	fourth := 3 * a.faultTime
	for _, w := range hostPolicy().Waits[:3] {
		fourth += w
	}
	b.WriteString(`
## Many calls at once: coordinated ride-through

What concurrent agent calls on one API key get when they share one
coordinated Transport (` + "`llmretry.NewCoordinated`" + `), against one Transport per
call (` + "`llmretry.New`" + `). Each row is one run of chat-completion calls in one
` + "`testing/synctest`" + ` bubble, each call under its own turn deadline of ` + fmtDur(turnDeadline) + `,
against the same kind of in-memory provider as above, except that a fault
takes a little time to come back, so that the first attempts really are in
flight together. (a) ` + fmt.Sprint(a.calls) + ` calls start at once; for ` + fmtDur(a.recovery) + ` the provider's
edge answers 502, ` + fmtDur(a.faultTime) + ` after each request (it times out on its upstream).
(b) ` + fmt.Sprint(w.calls) + ` calls, call i starting at i × ` + fmtDur(w.stagger) + `, so that new calls keep arriving
during the wait; for the first ` + fmtDur(w.recovery) + ` the provider's rate limiter answers 429
with ` + "`Retry-After: 30`" + `, ` + fmtDur(w.faultTime) + ` after each request. (c) and (d) are (a) with 10
calls and with one. (e) is (a) ` + fmtDur(e.recovery-a.recovery) + ` longer. After recovery the answer takes
` + fmtDur(genTime) + `.

Regenerated with the table above (TestOutageTable); ` + "`go test -v -run TestCrowd`" + `
prints the same figures.

**Columns**: calls that got an answer · attempts that reached the provider,
all calls together (the independent clients' count is what separate
Transports send) · recovery lag, from the provider's recovery to each
call's answer, the slowest and the median of the calls that got one · for
(b), how long after the first 429 left the provider the next request
reached it. Clients marked † wait random times (probe intervals, release
spread, jitter): their figures vary from one regeneration to the next.

**Reading it.** With many calls, coordination sends far fewer requests
into the outage and answers every call within seconds of recovery. The
host policy's own schedule happens to land its fourth attempt
` + fmtDur(fourth-a.recovery) + ` after outage (a) ends, hence its short lag there; ` + fmtDur(e.recovery-a.recovery) + ` later, in (e),
its next wait (4 minutes) no longer fits before the deadline minus the
reserve, and every independent call fails while every coordinated one
comes through. The probes cost per provider key, not per call: at most one
every ` + fmtDur(defaultProbeInterval) + `. With few calls that is more than their own schedules send (d:
one call with the host policy sends ` + lone + `), in exchange for a lag of
seconds instead of minutes; probes go in turns, so they spend no call's
retries faster than the others'.

TestCrowdRideThrough asserts, on every run: in (a) and (e) all first
attempts reach the provider before the first 502 comes back; both
coordinated clients answer every call, no call sends more than one probe,
every answer comes within ` + fmtFine(worst) + ` of recovery (a probe interval after the
last failed probe was sent, the probe's generation, the release spread and
the call's own generation), each coordinated client sends at most
` + bound(a) + ` attempts in (a) and ` + bound(e) + ` in (e), and
independent Transports with the host policy send more. In (c) and (d) the
coordinated clients send at most each call's first attempt, one probe per
4 s and each call's attempt after recovery, and every call that the
probes could not have run out of retries answers within 10 s of recovery.
In (b) both coordinated clients answer all 100 calls, and nothing reaches
the provider until 30 s after the first 429.

**Clients**

`)
	for _, c := range crowdClients {
		mark := ""
		if c.jittered {
			mark = " †"
		}
		fmt.Fprintf(&b, "- **%s**%s: %s.\n", c.name, mark, c.about)
	}
	b.WriteString("\n| outage | client | calls ok | provider attempts | recovery lag max / median | first attempt after the 429 |\n|---|---|---|---|---|---|\n")
	for _, r := range runs {
		mark := ""
		if r.client.jittered {
			mark = " †"
		}
		lag := "—"
		if l := r.lags(); len(l) > 0 {
			lag = "+" + fmtFine(l[len(l)-1]) + " / +" + fmtFine(median(l))
		}
		after := "—"
		if r.scenario.serverWait > 0 {
			if d, ok := r.afterFirstFault(); ok {
				after = "+" + fmtMilli(d)
			}
		}
		fmt.Fprintf(&b, "| (%s) %s | %s%s | %d/%d | %d | %s | %s |\n", r.scenario.id, r.scenario.name, r.client.name, mark, r.ok(), r.scenario.calls, len(r.at), lag, after)
	}
	return b.String()
}

// httpClients returns n clients over base with policy p: one shared
// client over a coordinated Transport, or each its own Transport (a
// process of its own, as far as retries go).
func httpClients(t *testing.T, base http.RoundTripper, p llmretry.Policy, n int, coordinated bool) []*http.Client {
	t.Helper()
	clients := make([]*http.Client, n)
	if coordinated {
		rt, err := llmretry.NewCoordinated(base, p, coordination.Config{})
		require.NoError(t, err)
		shared := &http.Client{Transport: rt}
		for i := range clients {
			clients[i] = shared
		}
		return clients
	}
	for i := range clients {
		clients[i] = &http.Client{Transport: retrying(t, base, p)}
	}
	return clients
}
