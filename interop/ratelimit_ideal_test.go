package interop

// Ideal pacing: when each call of a crowd is admitted, and answered, if the
// calls are admitted in arrival order as soon as the limit allows; the
// figure every run is measured against (ratelimit_crowd_test.go).

import (
	"math"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

// idealAdmissions returns when each call, arriving at arrivals (in order),
// is admitted when the calls are admitted in arrival order at the limit's
// rate, as early as spec allows: through a bucket full at the start
// (counted in requests: burst of them, one back every every), the call's
// arrival or the instant a request is back, whichever is later; under a
// concurrency limit, its arrival or the answer of the call maxInFlight
// places ahead of it, whichever is later; under an acceleration limit,
// no sooner than the second that may still admit it.
func idealAdmissions(spec rateSpec, arrivals []time.Duration) []time.Duration {
	adm := make([]time.Duration, len(arrivals))
	var full time.Duration // the instant the bucket is full again
	var perSec []int       // acceleration: admissions in each second
	for i, a := range arrivals {
		if spec.style == styleConcurrency {
			adm[i] = a
			if j := i - spec.maxInFlight; j >= 0 {
				adm[i] = max(a, adm[j]+genTime)
			}
			continue
		}
		at := max(a, full-time.Duration(spec.burst()-1)*spec.every())
		if i > 0 {
			at = max(at, adm[i-1]) // in arrival order
		}
		for {
			// The acceleration limit: on to the next second while this
			// one has admitted all it may.
			refused, next := spec.accelerating(perSec, at)
			if !refused {
				break
			}
			at += next
		}
		if spec.accel > 0 {
			sec := int(at / time.Second)
			for len(perSec) <= sec {
				perSec = append(perSec, 0)
			}
			perSec[sec]++
		}
		adm[i] = at
		full = max(full, adm[i]) + spec.every()
	}
	return adm
}

// idealTimes returns each call's time to answer under ideal pacing: from
// its arrival to its answer, genTime after its admission.
func idealTimes(spec rateSpec, arrivals []time.Duration) []time.Duration {
	adm := idealAdmissions(spec, arrivals)
	times := make([]time.Duration, len(adm))
	for i := range adm {
		times[i] = adm[i] + genTime - arrivals[i]
	}
	return times
}

// unanswered stands for a call that got no answer among times to answer:
// longer than any.
const unanswered = time.Duration(math.MaxInt64)

// percentile returns the p-th percentile of times by nearest rank (the
// value at rank ⌈p·n/100⌉ in ascending order); unanswered if it falls on
// a call that got no answer.
func percentile(times []time.Duration, p int) time.Duration {
	s := slices.Sorted(slices.Values(times))
	rank := (p*len(s) + 99) / 100
	return s[max(rank, 1)-1]
}

// quantiles returns the 50th, 95th and 100th percentiles of times: the
// median, the 95th and the last.
func quantiles(times []time.Duration) []time.Duration {
	return []time.Duration{percentile(times, 50), percentile(times, 95), percentile(times, 100)}
}

// TestRateLimitIdeal checks the ideal pacing computation by hand.
func TestRateLimitIdeal(t *testing.T) {
	s := time.Second
	ms := time.Millisecond
	bucket, conc := rateSpecByID("openai"), rateSpecByID("concurrency")
	together, spread := rateArrivals[0].arrivals(crowdCalls), rateArrivals[1].arrivals(crowdCalls)

	// A bucket of 10 refilled 1/s, all at once: 10 at 0, then call k
	// (from 0) at k − 9 s.
	adm := idealAdmissions(bucket, together)
	assert.Equal(t, slices.Repeat([]time.Duration{0}, 10), adm[:10])
	assert.Equal(t, []time.Duration{1 * s, 2 * s}, adm[10:12])
	assert.Equal(t, 90*s, adm[99])
	assert.Equal(t, []time.Duration{42 * s, 87 * s, 92 * s}, quantiles(idealTimes(bucket, together)),
		"issue 19: the 95th call by 87 s, the last by about 92 s")

	// Over 10 s, one every 100 ms: calls 0–10 find a request (the 11th
	// arrives at 1 s, when the bucket, spent by 10 less 1 s of refill,
	// has exactly one); call k ≥ 11 is admitted at k − 9 s and answers
	// 0.9k − 7 s after it arrived.
	adm = idealAdmissions(bucket, spread)
	assert.Equal(t, spread[:11], adm[:11])
	assert.Equal(t, 2*s, adm[11])
	assert.Equal(t, 90*s, adm[99])
	assert.Equal(t, []time.Duration{37100 * ms, 77600 * ms, 82100 * ms}, quantiles(idealTimes(bucket, spread)))

	// 8 in flight, 2 s each, all at once: call i at 2⌊i/8⌋ s.
	assert.Equal(t, []time.Duration{14 * s, 24 * s, 26 * s}, quantiles(idealTimes(conc, together)))
	// Over 10 s: call i at 0.1(i mod 8) + 2⌊i/8⌋ s, answered
	// 1.2⌊i/8⌋ + 2 s after it arrived.
	adm = idealAdmissions(conc, spread)
	assert.Equal(t, []time.Duration{2 * s, 2100 * ms}, adm[8:10])
	assert.Equal(t, []time.Duration{9200 * ms, 15200 * ms, 16400 * ms}, quantiles(idealTimes(conc, spread)))

	// The token limit, 20 requests of 1,000 tokens and one back every
	// 3 s: all at once, call k ≥ 20 (from 0) at 3(k − 19) s.
	tpm := rateSpecByID("tpm")
	adm = idealAdmissions(tpm, together)
	assert.Equal(t, slices.Repeat([]time.Duration{0}, 20), adm[:20])
	assert.Equal(t, []time.Duration{3 * s, 6 * s}, adm[20:22])
	assert.Equal(t, 240*s, adm[99])
	assert.Equal(t, []time.Duration{92 * s, 227 * s, 242 * s}, quantiles(idealTimes(tpm, together)))
	// Over 10 s: calls 0–19 find their tokens (20 × 1,000 in the bucket
	// at the start, the 20th arriving at 1.9 s); call k ≥ 20 is admitted
	// at 3(k − 19) s and answers 2.9k − 55 s after it arrived.
	adm = idealAdmissions(tpm, spread)
	assert.Equal(t, spread[:20], adm[:20])
	assert.Equal(t, 3*s, adm[20])
	assert.Equal(t, 240*s, adm[99])
	assert.Equal(t, []time.Duration{87100 * ms, 217600 * ms, 232100 * ms}, quantiles(idealTimes(tpm, spread)))

	// The acceleration limit, all at once: 5 at 0, 10 at 1 s, 20 at 2 s
	// (each second twice the one before), then the 60-request bucket,
	// which holds 60 − 35 + 3 = 28 at 3 s, 1 at 4 s, and one a second
	// after: call k ≥ 63 at k − 59 s.
	accel := rateSpecByID("acceleration")
	adm = idealAdmissions(accel, together)
	assert.Equal(t, slices.Repeat([]time.Duration{0}, 5), adm[:5])
	assert.Equal(t, []time.Duration{1 * s, 1 * s, 2 * s, 2 * s, 3 * s, 3 * s, 4 * s, 5 * s}, []time.Duration{adm[5], adm[14], adm[15], adm[34], adm[35], adm[62], adm[63], adm[64]})
	assert.Equal(t, 40*s, adm[99])
	assert.Equal(t, []time.Duration{5 * s, 37 * s, 42 * s}, quantiles(idealTimes(accel, together)))

	// Nearest rank, and a call with no answer sorts last.
	assert.Equal(t, 3*s, percentile([]time.Duration{4 * s, 1 * s, 3 * s, 2 * s}, 75))
	assert.Equal(t, 1*s, percentile([]time.Duration{4 * s, 1 * s, 3 * s, 2 * s}, 0))
	assert.Equal(t, unanswered, percentile([]time.Duration{unanswered, 1 * s}, 95))
	assert.Equal(t, "—", fmtTime(unanswered))
}
