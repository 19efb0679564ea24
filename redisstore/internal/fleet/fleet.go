package fleet

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/llmretry/llmretry"
	"github.com/llmretry/llmretry/coordination"
	"github.com/llmretry/llmretry/redisstore"
	"github.com/redis/go-redis/v9"
)

// configEnv is the environment variable that carries a process's Config:
// its presence makes a binary that calls IsChild a fleet process.
const configEnv = "LLMRETRY_FLEET_CONFIG"

// procHeader and callHeader name the process and the call that sent a
// request.
const (
	procHeader = "X-Fleet-Proc"
	callHeader = "X-Fleet-Call"
	// sentHeader carries, on each attempt, when it left its process (Unix
	// ns), stamped below the coordination (stampSent): a provider records
	// it, so that an attempt sent after something happened can be told
	// from one sent before that arrived late (a loaded machine delays
	// arrivals by a few hundred ms).
	sentHeader = "X-Fleet-Sent"
)

// stampSent is the processes' base transport: it stamps each attempt
// with the instant it leaves (sentHeader).
type stampSent struct{ base http.RoundTripper }

func (s stampSent) RoundTrip(req *http.Request) (*http.Response, error) {
	r := req.Clone(req.Context())
	r.Header.Set(sentHeader, strconv.FormatInt(time.Now().UnixNano(), 10))
	return s.base.RoundTrip(r)
}

// Secret is the fleet's credential-hash secret (Options.Secret): the same
// in every process.
var Secret = []byte("llmretry-fleet-demo-secret-0123456789")

// Config is what one process of the fleet does.
type Config struct {
	Proc, Procs int
	Calls       int       // this process's calls
	Start       time.Time // the outage's start: the calls' times count from it
	// Call i of process p starts at Start + From + (i×Procs + p) ×
	// Spread / (Calls×Procs): the fleet's calls interleave evenly over
	// Spread. With Lead, process 0's call 0 starts at Start instead.
	From, Spread time.Duration
	Lead         bool
	Provider     string        // the provider's URL
	Redis        string        // Redis's address; empty: each process coordinates alone
	Prefix       string        // Options.Prefix
	Timeout      time.Duration // Options.Timeout (zero: its default)
	Probe        time.Duration
	Release      time.Duration // Coordination.ReleaseSpread
	Deadline     time.Duration // each call's
	// Waits and Reserve, if Waits is not empty, are the calls' Policy's;
	// else 1 s, 2 s, 4 s and 1 s.
	Waits   []time.Duration
	Reserve time.Duration
	// Anthropic makes each call an Anthropic Messages request (x-api-key)
	// instead of an OpenAI chat completion (Authorization).
	Anthropic bool
	// Fallback, if not empty, is the URL of a second provider: the calls'
	// Policy.Fallback routes them there (RouteTo from Provider, with a key
	// of its own).
	Fallback string
	// Trace logs each attempt's result and each hold (records whose
	// message begins with "trace: ", for a test's trace file: see
	// Process.Logs).
	Trace bool
}

// Result is what became of one call.
type Result struct {
	Proc, Call int
	Start, End time.Time
	Status     int
	Err        string
	Attempts   int
	Probes     int
	Route      int // the route of its last attempt: 0 the primary, 1 the fallback
	// Knew is when its process first knew of trouble on the key: a 429
	// came back to one of its calls, or one was held (zero: never).
	Knew time.Time
}

// Process is what one process printed.
type Process struct {
	Results  []Result
	Logs     []string    // the messages it logged (slog records' msg)
	LogTimes []time.Time // when it logged each
	Stderr   string      // everything else on its standard error
}

// IsChild reports whether this binary runs as a fleet process.
func IsChild() bool { return os.Getenv(configEnv) != "" }

// Child runs this process's calls as its Config says, printing a JSON
// Result per call on stdout and the Store's log records as JSON on
// stderr, and returns the exit code.
func Child() int {
	var cfg Config
	if err := json.Unmarshal([]byte(os.Getenv(configEnv)), &cfg); err != nil {
		fmt.Fprintf(os.Stderr, "fleet: bad %s: %v\n", configEnv, err)
		return 2
	}
	if err := Run(cfg, os.Stdout, os.Stderr); err != nil {
		fmt.Fprintf(os.Stderr, "fleet: %v\n", err)
		return 1
	}
	return 0
}

// Run makes the calls of cfg, writing a JSON Result per call to out and
// the Store's log records (JSON) to logs.
func Run(cfg Config, out, logs io.Writer) error {
	base := http.DefaultTransport.(*http.Transport).Clone()
	base.Proxy = nil
	base.MaxIdleConnsPerHost = cfg.Calls
	defer base.CloseIdleConnections()

	coord := coordination.Config{ProbeInterval: cfg.Probe, ReleaseSpread: cfg.Release}
	if cfg.Redis != "" {
		client := redis.NewClient(&redis.Options{Addr: cfg.Redis})
		defer client.Close()
		st, err := redisstore.New(client, redisstore.Options{Prefix: cfg.Prefix, Secret: Secret, Timeout: cfg.Timeout,
			Logger: slog.New(slog.NewJSONHandler(logs, nil))})
		if err != nil {
			return err
		}
		defer st.Close()
		coord.Store = st
	}
	var (
		mu       sync.Mutex
		attempts = map[string]*Result{}
		knew     time.Time
	)
	tracer := slog.New(slog.NewJSONHandler(logs, nil))
	trace := func(format string, args ...any) {
		if cfg.Trace {
			tracer.Info("trace: " + fmt.Sprintf(format, args...))
		}
	}
	learn := func() { // with mu held
		if knew.IsZero() {
			knew = time.Now()
		}
	}
	policy := llmretry.Policy{
		Waits:   []time.Duration{time.Second, 2 * time.Second, 4 * time.Second},
		Reserve: time.Second,
		OnAttempt: func(a llmretry.Attempt) {
			mu.Lock()
			defer mu.Unlock()
			if r := attempts[a.Request.Header.Get(callHeader)]; r != nil {
				r.Attempts++
				r.Route = a.Route
				if a.Probe {
					r.Probes++
				}
			}
			if a.Response != nil && a.Response.StatusCode == http.StatusTooManyRequests {
				learn()
			}
			status := 0
			if a.Response != nil {
				status = a.Response.StatusCode
			}
			trace("call %s attempt %d: %d (retry in %v)", a.Request.Header.Get(callHeader), a.N, status, a.RetryIn)
		},
	}
	coord.OnHold = func(h coordination.Hold) {
		mu.Lock()
		defer mu.Unlock()
		learn()
		if h.End.IsZero() {
			trace("call %s attempt %d held: %s", h.Request.Header.Get(callHeader), h.N, h.Reason)
		} else {
			trace("call %s attempt %d hold ended: %s after %v", h.Request.Header.Get(callHeader), h.N, h.Outcome, h.End.Sub(h.Start).Round(time.Millisecond))
		}
	}
	if len(cfg.Waits) > 0 {
		policy.Waits, policy.Reserve = cfg.Waits, cfg.Reserve
	}
	if cfg.Fallback != "" {
		route, err := llmretry.RouteTo(cfg.Provider, cfg.Fallback, http.Header{"Authorization": {"Bearer sk-fleet-fallback-key"}})
		if err != nil {
			return err
		}
		policy.Fallback = []llmretry.Route{route}
	}
	rt, err := llmretry.NewCoordinated(stampSent{base}, policy, coord)
	if err != nil {
		return err
	}
	client := &http.Client{Transport: rt}
	results := make([]Result, cfg.Calls)
	var wg sync.WaitGroup
	for i := range cfg.Calls {
		r := &results[i]
		*r = Result{Proc: cfg.Proc, Call: i}
		mu.Lock()
		attempts[strconv.Itoa(i)] = r
		mu.Unlock()
		at := cfg.Start.Add(cfg.From + time.Duration(i*cfg.Procs+cfg.Proc)*cfg.Spread/time.Duration(cfg.Calls*cfg.Procs))
		if cfg.Lead && cfg.Proc == 0 && i == 0 {
			at = cfg.Start
		}
		wg.Go(func() {
			time.Sleep(time.Until(at)) // the call's arrival
			status, err := call(client, cfg, i)
			mu.Lock()
			defer mu.Unlock()
			r.Start, r.End, r.Status = at, time.Now(), status
			if err != nil {
				r.Err = err.Error()
			}
		})
	}
	wg.Wait()
	enc := json.NewEncoder(out)
	for _, r := range results {
		r.Knew = knew
		if err := enc.Encode(r); err != nil {
			return err
		}
	}
	return nil
}

// call sends call i and returns its status.
func call(client *http.Client, cfg Config, i int) (int, error) {
	ctx, cancel := context.WithTimeout(context.Background(), cfg.Deadline)
	defer cancel()
	path, body := "/v1/chat/completions", `{"model":"fleet-1","messages":[{"role":"user","content":"there?"}]}`
	if cfg.Anthropic {
		path, body = "/v1/messages", `{"model":"claude-sonnet-4-5","max_tokens":1024,"messages":[{"role":"user","content":"there?"}]}`
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, cfg.Provider+path, strings.NewReader(body))
	if err != nil {
		return 0, err
	}
	if cfg.Anthropic {
		req.Header.Set("X-Api-Key", "sk-ant-fleet-shared-key")
		req.Header.Set("Anthropic-Version", "2023-06-01")
	} else {
		req.Header.Set("Authorization", "Bearer sk-fleet-shared-key")
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(procHeader, strconv.Itoa(cfg.Proc))
	req.Header.Set(callHeader, strconv.Itoa(i))
	resp, err := client.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode, nil
}

// Spawn runs the processes of cfgs as children of this binary (exe with
// args; the configuration travels in the environment), waits for them,
// and returns what each printed.
func Spawn(exe string, args []string, cfgs []Config) ([]Process, error) {
	return SpawnContext(context.Background(), exe, args, cfgs)
}

// SpawnContext is Spawn, with the processes killed if ctx ends first
// (what they printed is returned, with an error for each).
func SpawnContext(ctx context.Context, exe string, args []string, cfgs []Config) ([]Process, error) {
	type child struct {
		cmd            *exec.Cmd
		stdout, stderr bytes.Buffer
	}
	children := make([]*child, len(cfgs))
	for i, cfg := range cfgs {
		raw, err := json.Marshal(cfg)
		if err != nil {
			return nil, err
		}
		c := &child{cmd: exec.CommandContext(ctx, exe, args...)}
		c.cmd.Env = append(os.Environ(), configEnv+"="+string(raw))
		c.cmd.Stdout, c.cmd.Stderr = &c.stdout, &c.stderr
		if err := c.cmd.Start(); err != nil {
			for _, o := range children[:i] {
				_ = o.cmd.Process.Kill()
				_ = o.cmd.Wait()
			}
			return nil, err
		}
		children[i] = c
	}
	procs := make([]Process, len(cfgs))
	var errs []error
	for i, c := range children {
		if err := c.cmd.Wait(); err != nil {
			errs = append(errs, fmt.Errorf("process %d: %v: %s", i, err, strings.TrimSpace(c.stderr.String())))
		}
		procs[i] = parse(&c.stdout, &c.stderr)
	}
	return procs, errors.Join(errs...)
}

// parse reads a process's Results and log records.
func parse(stdout, stderr io.Reader) Process {
	var p Process
	sc := bufio.NewScanner(stdout)
	for sc.Scan() {
		var r Result
		if json.Unmarshal(sc.Bytes(), &r) == nil {
			p.Results = append(p.Results, r)
		}
	}
	var other strings.Builder
	sc = bufio.NewScanner(stderr)
	for sc.Scan() {
		var rec struct {
			Msg, Error string
			Time       time.Time
		}
		if json.Unmarshal(sc.Bytes(), &rec) == nil && rec.Msg != "" {
			if rec.Error != "" {
				rec.Msg += " (" + rec.Error + ")"
			}
			p.Logs = append(p.Logs, rec.Msg)
			p.LogTimes = append(p.LogTimes, rec.Time)
			continue
		}
		other.WriteString(sc.Text() + "\n")
	}
	p.Stderr = other.String()
	return p
}
