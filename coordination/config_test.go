package coordination_test

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/llmretry/llmretry/coordination"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Validate names each field that cannot be used, and every one of them at
// once, on a line of its own prefixed "llmretry: "; the zero Config, a
// budget of 1 (off) and any positive setting are valid.
func TestConfigValidate(t *testing.T) {
	for _, tc := range []struct {
		name string
		c    coordination.Config
		want string
	}{
		{"negative probe interval", coordination.Config{ProbeInterval: -time.Second}, "llmretry: coordination.Config.ProbeInterval is negative (-1s)"},
		{"negative spread", coordination.Config{ReleaseSpread: -1}, "llmretry: coordination.Config.ReleaseSpread is negative (-1ns)"},
		{"budget above 1", coordination.Config{RetryBudget: 1.5}, "llmretry: coordination.Config.RetryBudget is 1.5, not between 0 and 1"},
		{"negative budget", coordination.Config{RetryBudget: -0.1}, "llmretry: coordination.Config.RetryBudget is -0.1, not between 0 and 1"},
		{"NaN budget", coordination.Config{RetryBudget: math.NaN()}, "llmretry: coordination.Config.RetryBudget is NaN, not between 0 and 1"},
		{"negative min retries", coordination.Config{MinRetries: -2}, "llmretry: coordination.Config.MinRetries is negative (-2)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.EqualError(t, tc.c.Validate(), tc.want)
		})
	}

	err := coordination.Config{ProbeInterval: -1, ReleaseSpread: -1, RetryBudget: 2, MinRetries: -1}.Validate()
	require.Error(t, err)
	lines := strings.Split(err.Error(), "\n")
	assert.Len(t, lines, 4, "every field that cannot, not the first alone")
	for _, l := range lines {
		assert.True(t, strings.HasPrefix(l, "llmretry: coordination.Config."), l)
	}

	for _, ok := range []coordination.Config{{}, {RetryBudget: 1}, {ProbeInterval: time.Second, ReleaseSpread: time.Millisecond, RetryBudget: 0.5, MinRetries: 10}} {
		assert.NoError(t, ok.Validate())
	}
}
