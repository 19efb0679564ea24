// Command ridethrough runs a crowd of calls as several processes through
// one provider outage, first with each process coordinating alone, then
// with all of them sharing a Redis, and prints what each cost the
// provider: watch one probe at a time serve the whole fleet.
//
//	go run ./cmd/ridethrough                       # starts its own redis-server
//	go run ./cmd/ridethrough -redis 127.0.0.1:6379 # or uses yours
//	go run ./cmd/ridethrough -procs 5 -calls 50 -down 20s
//
// The fake provider (on 127.0.0.1) answers 502 for -down, then 200. Each
// process is this program started again, with its own coordinated
// Transport (and its own Store); their calls arrive evenly over -arrive
// from the outage's start. It needs no network and no API key. Exit 0:
// every call came through in the Redis run; 1: not; 2: bad flags.
package main

import (
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/llmretry/llmretry/redisstore/internal/fleet"
	"github.com/llmretry/llmretry/redisstore/internal/redisserver"
)

func main() {
	if fleet.IsChild() {
		os.Exit(fleet.Child())
	}
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// config is what the flags say.
type config struct {
	procs, calls int
	down, arrive time.Duration
	probe        time.Duration
	redis        string
}

func run(args []string, stdout, stderr io.Writer) int {
	var cfg config
	fs := flag.NewFlagSet("ridethrough", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.IntVar(&cfg.procs, "procs", 3, "how many processes (1 to 20)")
	fs.IntVar(&cfg.calls, "calls", 20, "calls per process (1 to 500)")
	fs.DurationVar(&cfg.down, "down", 12*time.Second, "how long the provider answers 502 (> 0)")
	fs.DurationVar(&cfg.arrive, "arrive", 6*time.Second, "the calls arrive evenly over this, from the outage's start (>= 0)")
	fs.DurationVar(&cfg.probe, "probe", time.Second, "Coordination.ProbeInterval (> 0)")
	fs.StringVar(&cfg.redis, "redis", "", "a Redis `address` to share (default: start a redis-server on a free loopback port)")
	if err := fs.Parse(args); err != nil {
		if err == flag.ErrHelp {
			return 0
		}
		return 2
	}
	if fs.NArg() > 0 || cfg.procs < 1 || cfg.procs > 20 || cfg.calls < 1 || cfg.calls > 500 || cfg.down <= 0 || cfg.arrive < 0 || cfg.probe <= 0 {
		fmt.Fprintln(stderr, "ridethrough: bad flags (see -h)")
		return 2
	}
	ok, err := ride(cfg, stdout)
	if err != nil {
		fmt.Fprintf(stderr, "ridethrough: %v\n", err)
	}
	if !ok {
		return 1
	}
	return 0
}

// ride runs the fleet twice, each process coordinating alone and then all
// of them sharing a Redis, printing the figures to stdout, and reports
// whether every call came through in the Redis run.
func ride(cfg config, stdout io.Writer) (bool, error) {
	exe, err := os.Executable()
	if err != nil {
		return false, err
	}
	fmt.Fprintf(stdout, "a fake provider on 127.0.0.1 answers 502 for %v, then 200; %d processes × %d calls arrive over the first %v;\n"+
		"each process has its own coordinated Transport (probe every %v at most)\n\n", cfg.down, cfg.procs, cfg.calls, cfg.arrive, cfg.probe)

	if _, err := crowd(exe, cfg, "", "each process coordinating alone", stdout); err != nil {
		return false, err
	}
	addr := cfg.redis
	if addr == "" {
		if !redisserver.Installed() {
			fmt.Fprintln(stdout, "\n(redis-server is not installed: give -redis ADDR, or apt-get install redis-server)")
			return false, nil
		}
		srv, err := redisserver.Start()
		if err != nil {
			return false, err
		}
		defer srv.Close()
		addr = srv.Addr
	}
	return crowd(exe, cfg, addr, "sharing Redis "+addr, stdout)
}

// crowd runs the fleet once against a fresh provider, sharing redis if
// not empty, prints a line of figures, and reports whether every call came
// through.
func crowd(exe string, cfg config, redis, name string, stdout io.Writer) (bool, error) {
	start := time.Now().Add(1500 * time.Millisecond) // the processes start meanwhile
	prov := fleet.NewProvider(fleet.Outage(start, cfg.down, http.StatusBadGateway))
	defer prov.Close()
	cfgs := make([]fleet.Config, cfg.procs)
	for p := range cfgs {
		cfgs[p] = fleet.Config{Proc: p, Procs: cfg.procs, Calls: cfg.calls, Start: start, Spread: cfg.arrive,
			Provider: prov.URL, Redis: redis, Prefix: fmt.Sprintf("llmretry-demo:%d:%d:", os.Getpid(), start.UnixNano()),
			Probe: cfg.probe, Release: max(cfg.probe/5, time.Millisecond), Deadline: cfg.down + time.Minute}
	}
	procs, err := fleet.Spawn(exe, nil, cfgs)
	if err != nil {
		return false, err
	}
	recovery := start.Add(cfg.down)
	per := make([]int, cfg.procs)
	during := 0
	for _, r := range prov.Requests() {
		if r.At.Before(recovery) && r.Proc >= 0 && r.Proc < cfg.procs {
			per[r.Proc]++
			during++
		}
	}
	ok, slowest := 0, time.Duration(0)
	for _, p := range procs {
		for _, r := range p.Results {
			if r.Status == http.StatusOK && r.Err == "" {
				ok++
				slowest = max(slowest, r.End.Sub(recovery))
			}
		}
	}
	parts := make([]string, len(per))
	for i, n := range per {
		parts[i] = fmt.Sprintf("p%d %d", i, n)
	}
	fmt.Fprintf(stdout, "%-34s %d/%d came through; %d requests reached the provider during the outage (%s); slowest answer %v after it came back\n",
		name+":", ok, cfg.procs*cfg.calls, during, strings.Join(parts, " · "), slowest.Round(10*time.Millisecond))
	return ok == cfg.procs*cfg.calls, nil
}
