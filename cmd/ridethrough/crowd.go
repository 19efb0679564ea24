package main

import (
	"fmt"
	"io"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/llmretry/llmretry"
	"github.com/llmretry/llmretry/coordination"
)

// maxCalls bounds -calls: each call is a goroutine and a connection.
const maxCalls = 1000

// crowdResult is what one way of sending the crowd's calls cost.
type crowdResult struct {
	ok      int
	reached int32           // requests that reached the provider
	lags    []time.Duration // per answered call: from recovery to answer
	problem string          // the fake provider's own trouble, if any
}

// runCrowd sends cfg.calls calls at once through an outage twice — one
// llmretry Transport per call, then one coordinated Transport for all —
// and prints what each cost. It exits 0 when every coordinated call came
// through.
func runCrowd(cfg config, stdout, stderr io.Writer) int {
	policy := llmretry.Policy{Waits: cfg.waits, Reserve: cfg.reserve}
	coordinated := coordination.Config{ProbeInterval: cfg.probe, ReleaseSpread: max(cfg.probe/5, time.Millisecond)}
	if _, err := llmretry.NewCoordinated(nil, policy, coordinated); err != nil {
		fmt.Fprintf(stderr, "ridethrough: %v\n", err)
		return exitUsage
	}
	fmt.Fprintf(stdout, "%d calls at once, each under a %v deadline (reserve %v, waits %v);\n", cfg.calls, cfg.deadline, cfg.reserve, (*waitsFlag)(&cfg.waits))
	fmt.Fprintf(stdout, "a fresh fake provider for each run: %s; answers %v after a request once up\n\n", describeOutage(cfg), genTime)

	runs := []struct {
		name string
		rt   func(base http.RoundTripper) (func() http.RoundTripper, error)
	}{
		{"one llmretry Transport per call", func(base http.RoundTripper) (func() http.RoundTripper, error) {
			return func() http.RoundTripper {
				rt, _ := llmretry.New(base, policy) // policy validated above
				return rt
			}, nil
		}},
		{fmt.Sprintf("one coordinated Transport (probe every %v at most)", cfg.probe), func(base http.RoundTripper) (func() http.RoundTripper, error) {
			rt, err := llmretry.NewCoordinated(base, policy, coordinated)
			return func() http.RoundTripper { return rt }, err
		}},
	}
	code := exitOK
	for i, r := range runs {
		res, err := crowd(cfg, r.rt)
		if err != nil {
			fmt.Fprintf(stderr, "ridethrough: %v\n", err)
			return exitFail
		}
		line := fmt.Sprintf("%-50s %d/%d came through, %d requests reached the provider", r.name+":", res.ok, cfg.calls, res.reached)
		if len(res.lags) > 0 {
			line += fmt.Sprintf(", answers %v to %v after it came back",
				res.lags[0].Round(time.Millisecond), res.lags[len(res.lags)-1].Round(time.Millisecond))
		}
		fmt.Fprintln(stdout, line)
		if res.problem != "" {
			fmt.Fprintf(stderr, "ridethrough: fake provider: %s\n", res.problem)
		}
		if i == len(runs)-1 && res.ok < cfg.calls {
			code = exitFail
		}
	}
	if cfg.fault == faultRefused || cfg.fault == faultMixed {
		fmt.Fprintln(stdout, "\n(refused connections never reach the provider, so they are not counted)")
	}
	return code
}

// describeOutage names the outage without starting a provider.
func describeOutage(cfg config) string {
	if cfg.down == 0 {
		return "no outage"
	}
	return fmt.Sprintf("down %v (%s)", cfg.down, cfg.fault)
}

// crowd runs the calls through the Transports that transports returns
// (called once per call) against a fresh provider.
func crowd(cfg config, transports func(http.RoundTripper) (func() http.RoundTripper, error)) (crowdResult, error) {
	start := time.Now()
	prov, err := startProvider(start, outage(cfg.fault, cfg.down))
	if err != nil {
		return crowdResult{}, fmt.Errorf("starting the fake provider: %w", err)
	}
	defer prov.close()
	base := http.DefaultTransport.(*http.Transport).Clone()
	base.Proxy = nil
	base.MaxIdleConnsPerHost = cfg.calls
	defer base.CloseIdleConnections()
	next, err := transports(base)
	if err != nil {
		return crowdResult{}, err
	}

	var (
		mu  sync.Mutex
		res crowdResult
		wg  sync.WaitGroup
	)
	for range cfg.calls {
		wg.Go(func() {
			ok, _ := call(&http.Client{Transport: next()}, prov.addr, cfg.deadline)
			if !ok {
				return
			}
			lag := time.Since(start.Add(prov.recovery()))
			mu.Lock()
			res.ok++
			res.lags = append(res.lags, lag)
			mu.Unlock()
		})
	}
	wg.Wait()
	slices.Sort(res.lags)
	res.reached = prov.hits.Load()
	res.problem = prov.problem()
	return res, nil
}
