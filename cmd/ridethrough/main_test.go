package main

import (
	"bytes"
	"net"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// These tests run the real demo over loopback with short flags, one after
// the other (the leak check counts goroutines), in about 2 s of real time.

// runDemo runs the command with args and returns its exit code and output.
func runDemo(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	code := run(args, &stdout, &stderr)
	t.Logf("ridethrough %s → %d\n%s%s", strings.Join(args, " "), code, stdout.String(), stderr.String())
	return code, stdout.String(), stderr.String()
}

func TestBadFlagsExit2WithAClearMessage(t *testing.T) {
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"-waits", "500ms,-1s"}, "wait -1s is negative"},
		{[]string{"-waits", "500ms,soon"}, `"soon" is not a duration`},
		{[]string{"-waits", "1s,,2s"}, "empty wait"},
		{[]string{"-waits", ""}, "empty wait"},
		{[]string{"-deadline", "ten"}, `invalid value "ten" for flag -deadline`},
		{[]string{"-deadline", "-5s"}, "-deadline -5s must be positive"},
		{[]string{"-deadline", "0"}, "-deadline 0s must be positive"},
		{[]string{"-reserve", "-1s"}, "-reserve -1s must be positive"},
		{[]string{"-reserve", "0s"}, "-reserve 0s must be positive"},
		{[]string{"-reserve", "10s", "-deadline", "10s"}, "-reserve 10s must be less than -deadline 10s"},
		{[]string{"-reserve", "20s", "-deadline", "10s"}, "-reserve 20s must be less than -deadline 10s"},
		{[]string{"-down", "-2s"}, "-down -2s is negative"},
		{[]string{"-fault", "503"}, `-fault "503" is not one of 502, refused, 429, mixed`},
		{[]string{"-outage", "4s"}, "flag provided but not defined: -outage"},
		{[]string{"extra"}, `unexpected argument "extra"`},
		{[]string{"-calls", "0"}, "-calls 0 must be between 1 and 1000"},
		{[]string{"-calls", "5000"}, "-calls 5000 must be between 1 and 1000"},
		{[]string{"-calls", "5", "-probe", "0s"}, "-probe 0s must be positive"},
	}
	for _, c := range cases {
		t.Run(strings.Join(c.args, " "), func(t *testing.T) {
			code, stdout, stderr := runDemo(t, c.args...)
			assert.Equal(t, exitUsage, code)
			assert.Empty(t, stdout, "nothing starts on bad flags")
			assert.Contains(t, stderr, c.want)
			assert.Contains(t, stderr, "usage: ridethrough")
		})
	}
}

func TestHelpExits0(t *testing.T) {
	code, _, stderr := runDemo(t, "-h")
	assert.Equal(t, exitOK, code)
	assert.Contains(t, stderr, "usage: ridethrough")
	assert.Contains(t, stderr, "-waits")
}

// recordLine is one line of the record: time since start, then what
// Attempt.String renders (number, ID, method, URL without its query,
// status or error, the wait that follows).
var recordLine = regexp.MustCompile(`^ *\d+\.\d{3}s  attempt (\d+) [0-9a-f]{16} POST http://127\.0\.0\.1:\d+/v1/chat/completions\?…: (.+?)(?: \(retry in (\S+)\))?$`)

// record returns the record's lines: number, result, retry-in.
func record(t *testing.T, stdout string) [][]string {
	t.Helper()
	var out [][]string
	for _, line := range strings.Split(stdout, "\n") {
		if strings.Contains(line, "attempt ") && !strings.HasPrefix(line, "summary:") {
			m := recordLine.FindStringSubmatch(line)
			require.NotNil(t, m, "record line %q", line)
			out = append(out, m[1:])
		}
	}
	return out
}

// noCredentials checks that nothing printed holds the demo's query key or
// header values.
func noCredentials(t *testing.T, outputs ...string) {
	t.Helper()
	for _, s := range outputs {
		assert.NotContains(t, s, demoKey)
		assert.NotContains(t, s, "key=")
		assert.NotContains(t, s, demoBearer)
		assert.NotContains(t, s, "Bearer")
		assert.NotContains(t, s, "application/json")
	}
}

// providerAddr returns the address the demo said its provider is on.
func providerAddr(t *testing.T, stdout string) string {
	t.Helper()
	m := regexp.MustCompile(`fake provider on (127\.0\.0\.1:\d+)`).FindStringSubmatch(stdout)
	require.NotNil(t, m, "the demo names its provider's address")
	return m[1]
}

// noLeaks checks that run left nothing behind: its port is closed and no
// goroutine of the demo, its servers or its client connections is alive.
// Connection goroutines end shortly after their sockets close, so it polls.
func noLeaks(t *testing.T, addr string) {
	t.Helper()
	conn, err := net.DialTimeout("tcp", addr, time.Second)
	if err == nil {
		conn.Close()
	}
	assert.Error(t, err, "the provider's port is closed after run")
	var left string
	assert.Eventually(t, func() bool {
		left = demoGoroutines()
		return left == ""
	}, 2*time.Second, 5*time.Millisecond, "goroutines left after run")
	if left != "" {
		t.Log(left)
	}
}

// demoGoroutines returns the stacks of live goroutines that belong to the
// demo or to net/http connections.
func demoGoroutines() string {
	buf := make([]byte, 1<<20)
	buf = buf[:runtime.Stack(buf, true)]
	var left []string
	for _, g := range strings.Split(string(buf), "\n\n") {
		if strings.Contains(g, "main.(*provider)") || strings.Contains(g, "net/http.(*persistConn)") ||
			strings.Contains(g, "net/http.(*conn).serve") || strings.Contains(g, "net/http.(*Server).Serve") {
			left = append(left, g)
		}
	}
	return strings.Join(left, "\n\n")
}

func TestShortMixedOutageComesThrough(t *testing.T) {
	// 502 for 300 ms, refused for 300 ms (the listener closed with its
	// connections, then opened again on the same port), 429 for 300 ms.
	// Attempts at 0 and 150 ms get 502s, the one at 525 ms a refused
	// connection (75 ms of slack for a loaded machine), the one at 900 ms
	// the answer.
	code, stdout, stderr := runDemo(t, "-down", "900ms", "-waits", "150ms,375ms", "-deadline", "10s", "-reserve", "100ms")
	require.Equal(t, exitOK, code)
	assert.Empty(t, stderr)
	noCredentials(t, stdout, stderr)

	assert.Contains(t, stdout, "plain http.Client:")
	assert.Contains(t, stdout, "502 Bad Gateway: upstream connect error or disconnect/reset before headers. reset reason: connection failure: failed at once")

	rec := record(t, stdout)
	require.GreaterOrEqual(t, len(rec), 3)
	for i, r := range rec {
		assert.Equal(t, strconv.Itoa(i+1), r[0], "attempts are numbered in order")
		if i < len(rec)-1 {
			assert.NotEmpty(t, r[2], "a failed attempt says when the next one follows")
		}
	}
	assert.Equal(t, []string{"502 Bad Gateway", "150ms"}, rec[0][1:])
	assert.Equal(t, []string{"200 OK", ""}, rec[len(rec)-1][1:])
	assert.Contains(t, stdout, "connect: connection refused (retry in", "the closed listener shows in the record")

	assert.Contains(t, stdout, "answer: Yes, back now. Your turn went through.\n")
	assert.Regexp(t, `(?m)^summary: `+regexp.QuoteMeta(rec[len(rec)-1][0])+` attempts \(\d+ reached the provider\) in [0-9.]+m?s, came through, [0-9.]+m?s after the provider came back$`, stdout)
	noLeaks(t, providerAddr(t, stdout))
}

func TestRefusedFromTheStart(t *testing.T) {
	// The provider's port is closed from the start and opens after 150 ms.
	code, stdout, stderr := runDemo(t, "-fault", "refused", "-down", "150ms", "-waits", "100ms", "-deadline", "3s", "-reserve", "100ms")
	require.Equal(t, exitOK, code)
	noCredentials(t, stdout, stderr)
	assert.Regexp(t, `(?m)^ *[0-9.]+s  dial tcp 127\.0\.0\.1:\d+: connect: connection refused: failed at once, no retry$`, stdout)
	rec := record(t, stdout)
	require.GreaterOrEqual(t, len(rec), 2)
	assert.Contains(t, rec[0][1], "connect: connection refused")
	assert.Equal(t, "200 OK", rec[len(rec)-1][1])
	noLeaks(t, providerAddr(t, stdout))
}

func TestOutageOutlastingTheDeadlineExits1(t *testing.T) {
	// Down for a minute, a 600 ms turn with a 200 ms reserve and 100 ms
	// waits: about four attempts, then the next wait would eat into the
	// reserve, so llmretry gives up and returns the last 502.
	code, stdout, stderr := runDemo(t, "-fault", "502", "-down", "1m", "-waits", "100ms", "-deadline", "600ms", "-reserve", "200ms")
	require.Equal(t, exitFail, code)
	noCredentials(t, stdout, stderr)
	rec := record(t, stdout)
	require.NotEmpty(t, rec)
	last := rec[len(rec)-1]
	assert.Equal(t, []string{"502 Bad Gateway (stop: no time left before the deadline less the reserve)", ""}, last[1:], "the last attempt has no retry after it, and says why")
	assert.NotContains(t, stdout, "answer:")
	assert.Regexp(t, `(?m)^summary: \d+ attempts \(\d+ reached the provider\) in [0-9.]+m?s, did not come through \(gave up with \d+ms of the 600ms turn left, reserve 200ms\): 502 Bad Gateway: upstream connect error`, stdout)
	noLeaks(t, providerAddr(t, stdout))
}

func TestNoOutageOneAttempt(t *testing.T) {
	code, stdout, stderr := runDemo(t, "-down", "0")
	require.Equal(t, exitOK, code)
	noCredentials(t, stdout, stderr)
	assert.Regexp(t, `(?m)^ *[0-9.]+s  came through: Yes, back now\.`, stdout, "the plain client came through too")
	rec := record(t, stdout)
	require.Len(t, rec, 1)
	assert.Equal(t, []string{"1", "200 OK", ""}, rec[0])
	assert.Regexp(t, `(?m)^summary: 1 attempt \(1 reached the provider\) in [0-9.]+m?s, came through$`, stdout)
	noLeaks(t, providerAddr(t, stdout))
}

func TestCrowdCoordinatedSendsLess(t *testing.T) {
	// 20 calls through 2 s of 502: one Transport per call sends each
	// call's attempts at 0, 100 ms, 300 ms, 500 ms, … (11 in the outage);
	// the coordinated Transport sends the first attempts of the calls that
	// start before the outage is known (held calls send none), a probe
	// every 200 ms at most, and one attempt per call after the recovery
	// (about 50). The margins hold on a loaded machine: late attempts
	// mean fewer of them for both. What coordination guarantees below is
	// only each call's answer and the failure that found the outage.
	code, stdout, stderr := runDemo(t, "-calls", "20", "-fault", "502", "-down", "2s", "-waits", "100ms,200ms",
		"-deadline", "5s", "-reserve", "100ms", "-probe", "200ms")
	require.Equal(t, exitOK, code)
	assert.Empty(t, stderr)
	noCredentials(t, stdout, stderr)
	line := regexp.MustCompile(`(?m)^(one .+?):\s+(\d+)/20 came through, (\d+) requests reached the provider, answers .+ after it came back$`)
	m := line.FindAllStringSubmatch(stdout, -1)
	require.Len(t, m, 2, "a line per run")
	assert.Equal(t, "one llmretry Transport per call", m[0][1])
	assert.True(t, strings.HasPrefix(m[1][1], "one coordinated Transport"), m[1][1])
	for _, r := range m {
		assert.Equal(t, "20", r[2], "%s: every call came through", r[1])
	}
	independent, _ := strconv.Atoi(m[0][3])
	coordinated, _ := strconv.Atoi(m[1][3])
	// About 11 attempts each during 2 s of 502 on a quiet machine; a loaded
	// one slows every attempt (143 in one run under load).
	assert.GreaterOrEqual(t, independent, 20*5, "one Transport per call: at least 5 attempts each during 2 s of 502")
	assert.Less(t, coordinated, independent/2, "the coordinated Transport sends far less")
	assert.Greater(t, coordinated, 20, "each call's answer, and the failure that found the outage")
	assert.Eventually(t, func() bool { return demoGoroutines() == "" }, 2*time.Second, 5*time.Millisecond, "goroutines left after run")
}
