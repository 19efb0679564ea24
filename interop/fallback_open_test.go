package interop

// What issue 30 asks and the root package does not do yet, as tests that
// fail until it does (for the lead: see the report of the routes30
// branch). Each names the behaviour it wants.

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"github.com/llmretry/llmretry"
	"github.com/llmretry/llmretry/internal/testkit"
	"github.com/openai/openai-go/v3"
	oaoption "github.com/openai/openai-go/v3/option"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A policy with LongContext and no Fallback: the call moves to the
// long-context route, which refuses too (its content filter, a 400 that
// never moves). The record of the call that gave up names both routes,
// as it does for a Fallback route.
func TestLongContextOnlyRecord(t *testing.T) {
	prov := testkit.NewProviderFunc(func(c testkit.Call, _ int) testkit.Reply {
		if strings.Contains(c.Body, `"model":"`+openAILongModel+`"`) {
			return azureContentFilter()
		}
		return openAIContextTooLong()
	})
	base := serve(t, prov) + "/v1"
	rt := retrying(t, http.DefaultTransport, llmretry.Policy{
		LongContext: []llmretry.Route{withModel(route(t, base, base, http.Header{"Authorization": {"Bearer " + dummyOpenAIKey}}), openAILongModel)},
	})
	client := openAIClient(base+"/", rt, oaoption.WithMaxRetries(0))
	_, err := client.Chat.Completions.New(context.Background(), openAIParams())
	var apiErr *openai.Error
	require.ErrorAs(t, err, &apiErr)
	assert.Equal(t, "content_filter", apiErr.Code, "the long-context route's answer")
	assert.Equal(t, 2, prov.Attempts())
	ex := llmretry.GaveUp(apiErr.Response)
	require.NotNil(t, ex)
	assert.Equal(t, []int{0, 1}, ex.Routes, "Exhausted.Routes names the long-context route")
	assert.Contains(t, ex.Error(), "on routes 0 (primary), 1")
}

// Issue 30's Done-when: openai-go through llmretry with the README's
// fallback set-up plus a long-context route "passes S03 and S12, fails
// nothing". S02 (a 429 without Retry-After, persistent) fails in about
// half the calls: a 429 is no blip and says nothing of waiting being
// hopeless, so the zero policy waits it out on the primary with its
// jittered schedule, and a seventh primary attempt (when the six drawn
// waits end before the deadline less its reserve) or five in the first
// 3 s fail the catalogue's required checks. fbJitterRuns calls: all should
// pass.
func TestFailoverBenchReadmeFailsNothing(t *testing.T) {
	row := fbRows[2]
	require.Equal(t, "llmretry, README set-up + long context", row.name)
	sc := fbCatalogue[1]
	require.Equal(t, "S02", sc.id)
	var failed []string
	for range fbJitterRuns {
		if c := runFBCell(t, row, sc); c.verdict == fbFail {
			failed = append(failed, c.reason+" ("+c.detail+")")
		}
	}
	assert.Empty(t, failed, "S02 under the README's set-up: %d of %d calls fail", len(failed), fbJitterRuns)
}
