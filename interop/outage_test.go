package interop

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"testing/synctest"
	"time"

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
