package main

import (
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/llmretry/llmretry/redisstore/internal/fleet"
	"github.com/llmretry/llmretry/redisstore/internal/redisserver"
)

func TestMain(m *testing.M) {
	if fleet.IsChild() {
		os.Exit(fleet.Child())
	}
	os.Exit(m.Run())
}

// A short run of the demo: both crowds come through, and sharing Redis
// costs the provider fewer requests.
func TestDemo(t *testing.T) {
	if !redisserver.Installed() {
		if os.Getenv("CI") != "" {
			t.Fatal("redis-server is not installed")
		}
		t.Skip("redis-server is not installed")
	}
	var out, errs strings.Builder
	code := run([]string{"-procs", "3", "-calls", "5", "-down", "2s", "-arrive", "500ms", "-probe", "300ms"}, &out, &errs)
	t.Log("\n" + out.String())
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs.String())
	}
	re := regexp.MustCompile(`(\d+)/15 came through; (\d+) requests`)
	m := re.FindAllStringSubmatch(out.String(), -1)
	if len(m) != 2 || m[0][1] != "15" || m[1][1] != "15" {
		t.Fatalf("unexpected output:\n%s", out.String())
	}
	alone, _ := strconv.Atoi(m[0][2])
	shared, _ := strconv.Atoi(m[1][2])
	if shared >= alone {
		t.Errorf("sharing Redis sent %d requests into the outage, alone %d", shared, alone)
	}
}
