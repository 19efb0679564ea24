package wire

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestBodyReadersAgree checks that json.Unmarshal and the token walk read
// every complete object body here the same way.
func TestBodyReadersAgree(t *testing.T) {
	bodies := map[string][]byte{}
	for _, p := range loadProviderFixtures(t) {
		bodies[p.name] = errorPayload(p.body())
	}
	for _, raw := range []string{
		`{"error":{"code":"insufficient_quota"}}`,
		`{"error":{"details":{"error_code":"enforced_spend_limit_reached"}}}`,
		`{"error":{"details":[{"violations":[{"quotaId":"aPerDayb"}]}]}}`,
		`{"error":{"details":[{"violations":[{"quotaValue":0}]}]}}`,
		`{"error":{"details":[{"violations":[{"quotaValue":"\u0030"}]}]}}`,
		`{"error":{"details":[{"violations":[{"quotaValue":"abc"}]},{"retryDelay":"7s"}]}}`,
		`{"error":{"code":429,"type":{},"details":[1,"x",{"retryDelay":"7s"},{"retryDelay":"9s"}]}}`,
		`{"ERROR":{"DETAILS":[{"RETRYDELAY":"2s"}]}}`,
		`{"error":"insufficient_quota"}`,
		`{"error":{"details":null}}`,
	} {
		bodies[raw] = []byte(raw)
	}
	for name, body := range bodies {
		require.True(t, json.Valid(body), name)
		var fast, walked Signal
		readErrorBody(body, &fast)
		walkErrorBody(body, &walked)
		if walked.Final { // the walk stops at a verdict; a final signal has no wait
			fast, walked = Signal{Final: fast.Final}, Signal{Final: true}
		}
		assert.Equal(t, walked, fast, name)
	}
}

func TestReadSignalNoPanicOnHostileInput(t *testing.T) {
	deep := []byte(strings.Repeat("[", 100000))
	deepObjects := []byte(strings.Repeat(`{"error":`, 20000))
	assert.NotPanics(t, func() {
		assert.Equal(t, Signal{}, ReadSignal(500, nil, deep))
		assert.Equal(t, Signal{}, ReadSignal(500, nil, deepObjects))
		assert.Equal(t, Signal{}, ReadSignal(500, nil, nil))
		assert.Equal(t, Signal{}, ReadSignal(-1, nil, deep))
	})
}

// decoderWalk is the walk as encoding/json's Decoder.Token makes it, the
// way the error-body walk was written before it read the package's own
// lexer: the reference walkErrorBody must agree with (FuzzReadSignal).
func decoderWalk(data []byte, s *Signal) {
	type frame struct {
		object, wantKey bool
		key             string
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var stack []frame
	path := func() field {
		var keys []string
		for _, f := range stack {
			if f.object {
				keys = append(keys, strings.ToLower(f.key))
			}
		}
		switch strings.Join(keys, ".") {
		case "error.code", "error.type":
			return errorCode
		case "error.details.error_code":
			return detailCode
		case "error.details.violations.quotaid":
			return quotaID
		case "error.details.violations.quotavalue":
			return quotaValue
		case "error.details.retrydelay":
			return retryDelay
		case "error.message":
			return errorMessage
		}
		return 0
	}
	for !s.Final {
		tok, err := dec.Token()
		if err != nil {
			return
		}
		switch t := tok.(type) {
		case json.Delim:
			if t == '{' || t == '[' {
				if len(stack) == maxSignalDepth {
					return
				}
				stack = append(stack, frame{object: t == '{', wantKey: t == '{'})
				continue
			}
			stack = stack[:len(stack)-1]
		case string:
			if n := len(stack); n > 0 && stack[n-1].wantKey {
				stack[n-1].key, stack[n-1].wantKey = t, false
				continue
			}
			judge(path(), t, s)
		case json.Number:
			if delimited(data, int(dec.InputOffset())) {
				judge(path(), t.String(), s)
			}
		}
		if len(stack) == 0 {
			return
		}
		if top := &stack[len(stack)-1]; top.object {
			top.wantKey = true
		}
	}
}

// The walk reads what encoding/json's Decoder.Token walk reads, on whole,
// cut and malformed bodies alike.
func TestWalkAgreesWithDecoder(t *testing.T) {
	bodies := []string{
		`{"error":{"code":"insufficient_quota"}}`,
		`[{"error":{"details":[{"violations":[{"quotaValue":0}]}]}}]`,
		`{"error":{"details":[{"violations":[{"quotaValue":0 ,`,
		`{"error":{"details":[{"violations":[{"quotaValue":00}]}]}}`,
		`{"error":{"code" "insufficient_quota"}}`,
		`{"error":{"code":"insufficient_quota",,}}`,
		`{"error":{"code":"insufficient\u005fquota"}}`,
		`{"Error":{"Details":[{"RetryDelay":"2s"}]}}`,
		`{"error":{"message":"Please try again in 1.5s.","details":[{"retryDelay":"1s"}]}}`,
		`{"x":"a` + "\x01" + `b","error":{"code":"insufficient_quota"}}`,
		`{"x":"\q","error":{"code":"insufficient_quota"}}`,
		`{"x":tru,"error":{"code":"insufficient_quota"}}`,
		`{"x":[1,],"error":{"code":"insufficient_quota"}}`,
		`{"x":{}}{"error":{"code":"insufficient_quota"}}`,
		`{"error":{"details":[{"violations":[{"quotaValue":0}}]}]}}`,
		`{"error":{"detail\u017fs":[{"retryDelay":"3s"}]}}`,
		`"insufficient_quota"`,
		strings.Repeat("[", 20) + `{"error":{"code":"insufficient_quota"}}`,
	}
	for _, p := range loadProviderFixtures(t) {
		body := p.body()
		for n := 0; n <= len(body); n++ {
			bodies = append(bodies, string(body[:n]))
		}
	}
	for _, body := range bodies {
		var walked, decoded Signal
		walkErrorBody([]byte(body), &walked)
		decoderWalk([]byte(body), &decoded)
		require.Equal(t, decoded, walked, "%q", body)
	}
}

// The walk allocates only the texts it judges.
func TestWalkAllocations(t *testing.T) {
	body := []byte(`[{"error":{"code":429,"message":"quota","status":"RESOURCE_EXHAUSTED","details":[{"@type":"type.googleapis.com/google.rpc.QuotaFailure","violations":[{"quotaId":"PerMinute","quotaValue":"10"}]}`)
	allocs := testing.AllocsPerRun(100, func() {
		var s Signal
		walkErrorBody(body, &s)
	})
	assert.LessOrEqual(t, allocs, 4.0, "the texts judged: code, message, quotaId and quotaValue")
}
