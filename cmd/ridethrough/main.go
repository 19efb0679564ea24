// Command ridethrough shows llmretry riding through a model-provider outage.
//
// It starts a fake provider on loopback (127.0.0.1 only) that is down for a
// while and then recovers, sends one chat request through a plain
// http.Client (which fails at once), then the same request through an
// http.Client on llmretry, printing the record live: one line per attempt,
// then the answer and a summary. It needs no network and no API key.
//
//	go run ./cmd/ridethrough
//	go run ./cmd/ridethrough -fault refused -down 8s
//	go run ./cmd/ridethrough -waits 500ms,1s,2s -reserve 1s -deadline 10s -down 4s
//	go run ./cmd/ridethrough -calls 50 -fault 502
//
// With -calls N (more than one) it sends N calls at once instead, first
// through one llmretry Transport per call, then through one coordinated
// Transport (llmretry.NewCoordinated) that holds the calls while one probe
// at a time checks the provider, and prints what each cost the provider.
//
// The default outage ("mixed") is what a provider outage looks like from the
// client: a 502 with the upstream refused (an Envoy-style body), then the
// connection itself refused (the provider's listener is closed, and opened
// again on the same port when it comes back), then 429 with Retry-After,
// then the answer. It exits 0 when the call came through, 1 when it did
// not, and 2 on bad flags.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/llmretry/llmretry"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// Exit codes.
const (
	exitOK    = 0 // the call came through
	exitFail  = 1 // it did not (or the demo could not start)
	exitUsage = 2 // bad flags
)

// The demo's fake credentials: they travel in the query and a header, so
// the record shows that neither is printed.
const (
	demoKey    = "demo-query-key-7f3a"
	demoBearer = "sk-demo-bearer-9c1e"
)

// genTime is how long the healthy provider takes to generate an answer.
const genTime = 200 * time.Millisecond

// retryAfter is the Retry-After (seconds) of the provider's 429: longer
// than the default schedule's 2 s, so the record shows it honoured.
const retryAfter = "3"

// config is what the flags say.
type config struct {
	waits    []time.Duration
	reserve  time.Duration
	deadline time.Duration
	down     time.Duration
	fault    string
	calls    int           // concurrent calls; 1: the single-call record
	probe    time.Duration // the coordinated Transport's probe interval
}

// The faults -fault accepts.
const (
	fault502     = "502"
	faultRefused = "refused"
	fault429     = "429"
	faultMixed   = "mixed"
)

var faults = []string{fault502, faultRefused, fault429, faultMixed}

// waitsFlag is a comma-separated list of durations.
type waitsFlag []time.Duration

func (w *waitsFlag) String() string {
	if w == nil {
		return ""
	}
	parts := make([]string, len(*w))
	for i, d := range *w {
		parts[i] = d.String()
	}
	return strings.Join(parts, ",")
}

func (w *waitsFlag) Set(s string) error {
	var out []time.Duration
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			return errors.New("empty wait (want e.g. 500ms,1s,2s)")
		}
		d, err := time.ParseDuration(part)
		if err != nil {
			return fmt.Errorf("%q is not a duration (want e.g. 500ms,1s,2s)", part)
		}
		if d < 0 {
			return fmt.Errorf("wait %v is negative", d)
		}
		out = append(out, d)
	}
	*w = out
	return nil
}

// parseFlags reads args. Errors have been printed to stderr with the usage
// when err is not nil (flag.ErrHelp for -h).
func parseFlags(args []string, stderr io.Writer) (config, error) {
	cfg := config{waits: []time.Duration{500 * time.Millisecond, time.Second, 2 * time.Second}}
	fs := flag.NewFlagSet("ridethrough", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Var((*waitsFlag)(&cfg.waits), "waits", "the retry `schedule`, comma-separated; under the deadline the last wait repeats, unless it is zero")
	fs.DurationVar(&cfg.reserve, "reserve", time.Second, "time that must remain before the deadline after a wait (> 0)")
	fs.DurationVar(&cfg.deadline, "deadline", 10*time.Second, "the turn's deadline, counted from the start of the call (> 0)")
	fs.DurationVar(&cfg.down, "down", 4*time.Second, "how long the provider is down, from the start (>= 0)")
	fs.IntVar(&cfg.calls, "calls", 1, "how many calls at once; above 1, compare one Transport per call with one coordinated Transport")
	fs.DurationVar(&cfg.probe, "probe", time.Second, "with -calls: the coordinated Transport's probe interval (> 0)")
	fs.StringVar(&cfg.fault, "fault", faultMixed, "what the outage looks like: "+strings.Join(faults, ", ")+
		" (mixed: 502, then refused, then 429, a third of -down each)")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: ridethrough [-waits 500ms,1s,2s] [-reserve 1s] [-deadline 10s] [-down 4s] [-fault %s] [-calls 1] [-probe 1s]\n\n",
			strings.Join(faults, "|"))
		fmt.Fprintf(fs.Output(), "Starts a fake model provider on 127.0.0.1 that is down for -down, then calls it\n"+
			"through a plain http.Client and through llmretry. Exit 0: the call came through;\n"+
			"1: it did not; 2: bad flags.\n\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return cfg, err
	}
	bad := func(format string, a ...any) (config, error) {
		err := fmt.Errorf(format, a...)
		fmt.Fprintf(stderr, "ridethrough: %v\n", err)
		fs.Usage()
		return cfg, err
	}
	switch {
	case fs.NArg() > 0:
		return bad("unexpected argument %q (all settings are flags)", fs.Arg(0))
	case len(cfg.waits) == 0:
		return bad("-waits: give at least one wait")
	case cfg.deadline <= 0:
		return bad("-deadline %v must be positive", cfg.deadline)
	case cfg.reserve <= 0:
		return bad("-reserve %v must be positive (llmretry reads 0 as its 60 s default)", cfg.reserve)
	case cfg.reserve >= cfg.deadline:
		return bad("-reserve %v must be less than -deadline %v, or no wait ever fits", cfg.reserve, cfg.deadline)
	case cfg.down < 0:
		return bad("-down %v is negative", cfg.down)
	case cfg.calls < 1 || cfg.calls > maxCalls:
		return bad("-calls %d must be between 1 and %d", cfg.calls, maxCalls)
	case cfg.probe <= 0:
		return bad("-probe %v must be positive", cfg.probe)
	}
	known := false
	for _, f := range faults {
		known = known || cfg.fault == f
	}
	if !known {
		return bad("-fault %q is not one of %s", cfg.fault, strings.Join(faults, ", "))
	}
	return cfg, nil
}

// run is the whole command: it returns the exit code.
func run(args []string, stdout, stderr io.Writer) int {
	cfg, err := parseFlags(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return exitOK
	}
	if err != nil {
		return exitUsage
	}

	if cfg.calls > 1 {
		return runCrowd(cfg, stdout, stderr)
	}
	start := time.Now()
	since := func() string { return fmt.Sprintf("%7.3fs", time.Since(start).Seconds()) }

	prov, err := startProvider(start, outage(cfg.fault, cfg.down))
	if err != nil {
		fmt.Fprintf(stderr, "ridethrough: starting the fake provider: %v\n", err)
		return exitFail
	}
	defer prov.close()

	// One base transport for both clients, closed at the end so that no
	// connection outlives run.
	base := http.DefaultTransport.(*http.Transport).Clone()
	base.Proxy = nil // loopback only, whatever the environment says
	defer base.CloseIdleConnections()

	fmt.Fprintf(stdout, "fake provider on %s: %s; answers %v after a request once up\n", prov.addr, prov.describe(), genTime)
	fmt.Fprintf(stdout, "turn deadline %v, reserve %v, waits %v (the last repeats)\n\n", cfg.deadline, cfg.reserve, (*waitsFlag)(&cfg.waits))

	// The contrast: a plain client gives up on the first failure.
	fmt.Fprintln(stdout, "plain http.Client:")
	plain := &http.Client{Transport: base}
	if ok, what := call(plain, prov.addr, cfg.deadline); ok {
		fmt.Fprintf(stdout, "%s  came through: %s\n\n", since(), what)
	} else {
		fmt.Fprintf(stdout, "%s  %s: failed at once, no retry\n\n", since(), what)
	}

	// The same call through llmretry, with the record printed live.
	fmt.Fprintln(stdout, "through llmretry:")
	var attempts atomic.Int32
	rt, err := llmretry.New(base, llmretry.Policy{
		Waits:   cfg.waits,
		Reserve: cfg.reserve,
		OnAttempt: func(a llmretry.Attempt) {
			attempts.Add(1)
			// Attempt.String leaves out the query and every header.
			fmt.Fprintf(stdout, "%s  %s\n", since(), a)
		},
	})
	if err != nil {
		fmt.Fprintf(stderr, "ridethrough: %v\n", err)
		return exitUsage
	}
	hitsBefore := prov.hits.Load()
	callStart := time.Now()
	ok, what := call(&http.Client{Transport: rt}, prov.addr, cfg.deadline)
	elapsed := time.Since(callStart).Round(time.Millisecond)
	reached := prov.hits.Load() - hitsBefore
	n := attempts.Load()

	var outcome string
	if ok {
		fmt.Fprintf(stdout, "answer: %s\n", what)
		outcome = "came through"
		if back := prov.recovery(); back > 0 {
			outcome += fmt.Sprintf(", %v after the provider came back", time.Since(start.Add(back)).Round(time.Millisecond))
		}
	} else {
		outcome = fmt.Sprintf("did not come through (gave up with %v of the %v turn left, reserve %v): %s",
			max(cfg.deadline-elapsed, 0).Round(time.Millisecond), cfg.deadline, cfg.reserve, what)
	}
	fmt.Fprintf(stdout, "summary: %d %s (%d reached the provider) in %v, %s\n", n, plural(int(n), "attempt"), reached, elapsed, outcome)
	if msg := prov.problem(); msg != "" {
		fmt.Fprintf(stderr, "ridethrough: fake provider: %s\n", msg)
	}
	if !ok {
		return exitFail
	}
	return exitOK
}

// call sends the demo's chat request through client under a turn deadline.
// It reports whether an answer came back, and the answer or what went
// wrong, without the URL's query or any header.
func call(client *http.Client, addr string, deadline time.Duration) (bool, string) {
	ctx, cancel := context.WithTimeout(context.Background(), deadline)
	defer cancel()
	body := `{"model":"demo-1","messages":[{"role":"user","content":"Are you there?"}]}`
	req, err := http.NewRequestWithContext(ctx, http.MethodPost,
		"http://"+addr+"/v1/chat/completions?key="+demoKey, strings.NewReader(body))
	if err != nil {
		return false, err.Error()
	}
	req.Header.Set("Authorization", "Bearer "+demoBearer)
	req.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		// *url.Error prints the full URL, query included: keep its cause.
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return false, err.Error()
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if err != nil {
		return false, resp.Status + ", then reading the body: " + err.Error()
	}
	if resp.StatusCode != http.StatusOK {
		return false, resp.Status + ": " + firstLine(raw)
	}
	var answer struct {
		Choices []struct {
			Message struct {
				Content string `json:"content"`
			} `json:"message"`
		} `json:"choices"`
	}
	if err := json.Unmarshal(raw, &answer); err != nil || len(answer.Choices) == 0 {
		return false, resp.Status + " with an unreadable answer: " + firstLine(raw)
	}
	return true, answer.Choices[0].Message.Content
}

// firstLine returns the first line of b, trimmed and cut at 160 bytes.
func firstLine(b []byte) string {
	b = bytes.TrimSpace(b)
	if i := bytes.IndexByte(b, '\n'); i >= 0 {
		b = b[:i]
	}
	if len(b) > 160 {
		return string(b[:160]) + "…"
	}
	return string(b)
}

func plural(n int, word string) string {
	if n == 1 {
		return word
	}
	return word + "s"
}

// phase is a stretch of the provider's timeline: fault until the given
// time after start ("" means healthy).
type phase struct {
	until time.Duration
	fault string
}

// outage returns the provider's timeline for a fault lasting down. The
// last phase, healthy, lasts forever.
func outage(fault string, down time.Duration) []phase {
	var ps []phase
	if down > 0 {
		if fault == faultMixed {
			ps = []phase{{down / 3, fault502}, {2 * down / 3, faultRefused}, {down, fault429}}
		} else {
			ps = []phase{{down, fault}}
		}
	}
	return append(ps, phase{until: 1<<63 - 1})
}

// provider is the fake model provider: an HTTP server on 127.0.0.1 that
// follows a timeline. While its fault is "refused" nothing listens on its
// port; when it comes back it listens on the same port again.
type provider struct {
	addr   string
	start  time.Time
	phases []phase
	hits   atomic.Int32 // requests that reached the handler

	mu      sync.Mutex
	srv     *http.Server // nil while refusing
	serving sync.WaitGroup
	trouble string // the last thing that went wrong, for the user

	stop chan struct{}
	done chan struct{} // closed when the timeline goroutine has ended
}

// startProvider listens on a free loopback port and starts following the
// timeline from start.
func startProvider(start time.Time, phases []phase) (*provider, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &provider{
		addr:   ln.Addr().String(),
		start:  start,
		phases: phases,
		stop:   make(chan struct{}),
		done:   make(chan struct{}),
	}
	if p.faultAt(0) == faultRefused {
		ln.Close()
	} else {
		p.serve(ln)
	}
	go p.follow()
	return p, nil
}

// describe says what the timeline holds, in words.
func (p *provider) describe() string {
	var parts []string
	var from time.Duration
	for _, ph := range p.phases[:len(p.phases)-1] {
		var what string
		switch ph.fault {
		case fault502:
			what = "502 (upstream refused)"
		case faultRefused:
			what = "connection refused"
		case fault429:
			what = "429 (Retry-After: " + retryAfter + ")"
		}
		parts = append(parts, fmt.Sprintf("%s for %v", what, (ph.until-from).Round(time.Millisecond)))
		from = ph.until
	}
	if len(parts) == 0 {
		return "up from the start"
	}
	return "down: " + strings.Join(parts, ", then ") + ", then up"
}

// recovery returns when, after start, the provider comes back (0 if it is
// never down).
func (p *provider) recovery() time.Duration {
	if len(p.phases) < 2 {
		return 0
	}
	return p.phases[len(p.phases)-2].until
}

// faultAt returns the fault at time d after start ("" when healthy).
func (p *provider) faultAt(d time.Duration) string {
	for _, ph := range p.phases {
		if d < ph.until {
			return ph.fault
		}
	}
	return ""
}

// follow closes and reopens the listener as the timeline says, until close.
func (p *provider) follow() {
	defer close(p.done)
	refusing := p.faultAt(0) == faultRefused
	for _, ph := range p.phases[:len(p.phases)-1] {
		t := time.NewTimer(time.Until(p.start.Add(ph.until)))
		select {
		case <-p.stop:
			t.Stop()
			return
		case <-t.C:
		}
		next := p.faultAt(ph.until) == faultRefused
		switch {
		case next && !refusing:
			p.mu.Lock()
			srv := p.srv
			p.srv = nil
			p.mu.Unlock()
			if srv != nil {
				srv.Close() // the listener and every connection
			}
		case !next && refusing:
			if !p.relisten() {
				return
			}
		}
		refusing = next
	}
}

// relisten listens on the provider's port again, trying every 50 ms while
// something else holds it. It reports false if close came first.
func (p *provider) relisten() bool {
	for {
		ln, err := net.Listen("tcp", p.addr)
		if err == nil {
			p.serve(ln)
			return true
		}
		p.setTrouble(fmt.Sprintf("listening on %s again: %v", p.addr, err))
		t := time.NewTimer(50 * time.Millisecond)
		select {
		case <-p.stop:
			t.Stop()
			return false
		case <-t.C:
		}
	}
}

// serve starts an HTTP server on ln.
func (p *provider) serve(ln net.Listener) {
	srv := &http.Server{
		Handler:           http.HandlerFunc(p.handle),
		ReadHeaderTimeout: 5 * time.Second,
		ErrorLog:          log.New(io.Discard, "", 0),
	}
	p.mu.Lock()
	p.srv = srv
	p.mu.Unlock()
	p.serving.Add(1)
	go func() {
		defer p.serving.Done()
		_ = srv.Serve(ln) // ends with http.ErrServerClosed
	}()
}

// close stops the timeline and the server, and waits for both.
func (p *provider) close() {
	close(p.stop)
	<-p.done
	p.mu.Lock()
	srv := p.srv
	p.srv = nil
	p.mu.Unlock()
	if srv != nil {
		srv.Close()
	}
	p.serving.Wait()
}

func (p *provider) setTrouble(s string) {
	p.mu.Lock()
	p.trouble = s
	p.mu.Unlock()
}

// problem returns what went wrong inside the provider, if anything.
func (p *provider) problem() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.trouble
}

// handle answers a request as the timeline says at the time it arrives.
func (p *provider) handle(w http.ResponseWriter, r *http.Request) {
	p.hits.Add(1)
	_, _ = io.Copy(io.Discard, r.Body)
	switch p.faultAt(time.Since(p.start)) {
	case fault502:
		// What Envoy in front of a provider says when the provider behind
		// it refuses the connection.
		w.Header().Set("Content-Type", "text/plain")
		w.Header().Set("Server", "envoy")
		w.WriteHeader(http.StatusBadGateway)
		io.WriteString(w, "upstream connect error or disconnect/reset before headers. reset reason: connection failure")
	case faultRefused:
		// A request that slipped in as the listener closed: drop the
		// connection without an answer, as a dying provider does.
		panic(http.ErrAbortHandler)
	case fault429:
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Retry-After", retryAfter)
		w.WriteHeader(http.StatusTooManyRequests)
		io.WriteString(w, `{"error":{"message":"Rate limit reached for demo-1 on requests per min. Please try again in 3s.","type":"requests","param":null,"code":"rate_limit_exceeded"}}`)
	default:
		t := time.NewTimer(genTime)
		defer t.Stop()
		select {
		case <-r.Context().Done():
			return
		case <-t.C:
		}
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"id":"chatcmpl-demo","object":"chat.completion","model":"demo-1","choices":[{"index":0,"message":{"role":"assistant","content":"Yes, back now. Your turn went through."},"finish_reason":"stop"}]}`)
	}
}
