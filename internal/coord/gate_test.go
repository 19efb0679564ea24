package coord

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"
	"unsafe"

	"github.com/llmretry/llmretry/store"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The budget and the probes use leases named apart per coordinator and
// attempt, so that a fleet's stores never confuse two holders.
func TestHolderNamesAreUnique(t *testing.T) {
	co1, stop1 := New(testConfig(Config{}))
	defer stop1()
	co2, stop2 := New(testConfig(Config{}))
	defer stop2()
	seen := map[string]bool{}
	for range 1000 {
		for _, co := range []*Coordinator{co1, co2} {
			h := co.holder()
			require.False(t, seen[h], h)
			seen[h] = true
			require.False(t, strings.ContainsAny(h, " \n"), h)
		}
	}
	assert.Len(t, seen, 2000, fmt.Sprint(len(seen)))
}

// BenchmarkFailedProbe is what one failed probe costs the process with
// 10,000 calls held on its key: the prober leaves the gate (the next one is
// chosen among the held), and the failure's facts arrive and wake it.
func BenchmarkFailedProbe(b *testing.B) {
	co, stop := New(testConfig(Config{}))
	defer stop()
	req, err := http.NewRequest(http.MethodPost, "https://api.example.com/v1/chat", nil)
	if err != nil {
		b.Fatal(err)
	}
	k, _ := co.enter(req, 0)
	now := time.Now()
	for i := range 10000 {
		k.register(i%7, now.Add(time.Duration(i)))
	}
	f := store.Facts{DownSince: now, DownUntil: now.Add(time.Hour), Reason: "502 Bad Gateway"}
	b.ReportAllocs()
	for b.Loop() {
		k.mu.Lock()
		prober := k.cand
		k.mu.Unlock()
		k.unregister(prober) // sent as the probe
		f.Version++
		f.NextProbe = f.NextProbe.Add(time.Second)
		co.learnt(k, f, now, fromShared)      // its failure, as the store answers
		k.register(prober.left, prober.since) // held again
		k.mu.Lock()
		select {
		case <-k.cand.wake: // the one woken
		default:
		}
		k.mu.Unlock()
	}
}

// A Call stays in the allocation size class it had before the engine left
// the root package (192 bytes): the coordinated success path allocates it
// once per call.
func TestCallSize(t *testing.T) {
	assert.LessOrEqual(t, unsafe.Sizeof(Call{}), uintptr(192))
}
