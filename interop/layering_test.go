package interop

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2"
	antoption "github.com/anthropics/anthropic-sdk-go/v2/option"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/service/bedrockruntime"
	"github.com/llmretry/llmretry"
	"github.com/llmretry/llmretry/internal/testkit"
	"github.com/openai/openai-go/v3"
	oaoption "github.com/openai/openai-go/v3/option"
	goopenai "github.com/sashabaranov/go-openai"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/genai"
)

// layerK is the number of retries llmretry is allowed in the layering
// tests: k = 2, so llmretry alone makes k+1 = 3 attempts.
const layerK = 2

// layerPolicy is llmretry's policy in the layering tests: two retries,
// after 2 s and 4 s. MaxRetries pins k even under a deadline (Anthropic's
// per-attempt one), where the last wait of Waits would otherwise repeat.
func layerPolicy() llmretry.Policy {
	return llmretry.Policy{Waits: []time.Duration{2 * time.Second, 4 * time.Second}, MaxRetries: layerK}
}

// The layering trap. The Stainless SDKs (openai-go, anthropic-sdk-go)
// retry twice on their own by default; llmretry under them retries k
// times; an SDK that resent every failure llmretry gave up on would make
// 3(k+1) attempts. It does not for responses, because llmretry marks the
// response it gives up on with X-Should-Retry: false, which both SDKs obey
// (rows "mark stripped" show the 9 attempts the mark prevents), even over
// Anthropic's own x-should-retry: true on a 429, which the mark replaces. It
// does
// for failed connections, where there is no response to mark: only
// option.WithMaxRetries(0) prevents that. genai retries only when
// HTTPOptions.RetryOptions is set, and then ignores X-Should-Retry.
// go-openai and langchaingo have no retries of their own. aws-sdk-go-v2's
// default retryer (3 attempts) ignores X-Should-Retry and resends
// responses and failed connections alike, 3(k+1) attempts, unless it is
// turned off (Retryer: aws.NopRetryer{} or RetryMaxAttempts: 1).
//
// Run with -v to print the measured table.
func TestLayeringTrap(t *testing.T) {
	const (
		stackSDK      = "SDK only"
		stackLLM      = "llmretry k=2"
		stackStripped = "llmretry k=2, mark stripped"
	)
	stacks := map[string]func(t *testing.T, base http.RoundTripper) http.RoundTripper{
		stackSDK: func(_ *testing.T, base http.RoundTripper) http.RoundTripper { return base },
		stackLLM: func(t *testing.T, base http.RoundTripper) http.RoundTripper {
			return retrying(t, base, layerPolicy())
		},
		stackStripped: func(t *testing.T, base http.RoundTripper) http.RoundTripper {
			return stripShouldRetry{retrying(t, base, layerPolicy())}
		},
	}

	openAICall := func(opts ...oaoption.RequestOption) func(*testing.T, http.RoundTripper) error {
		return func(_ *testing.T, rt http.RoundTripper) error {
			client := openAIClient(fakeOpenAIURL, rt, opts...)
			_, err := client.Chat.Completions.New(context.Background(), openAIParams())
			return err
		}
	}
	anthropicCall := func(opts ...antoption.RequestOption) func(*testing.T, http.RoundTripper) error {
		return func(_ *testing.T, rt http.RoundTripper) error {
			client := anthropicClient(fakeAnthropicURL, rt, opts...)
			_, err := client.Messages.New(context.Background(), anthropicParams())
			return err
		}
	}
	geminiCall := func(retry *genai.HTTPRetryOptions) func(*testing.T, http.RoundTripper) error {
		return func(t *testing.T, rt http.RoundTripper) error {
			_, err := geminiClient(t, fakeGeminiURL, rt, retry).Models.GenerateContent(context.Background(), geminiModel, geminiPrompt(), nil)
			return err
		}
	}
	goOpenAICall := func(_ *testing.T, rt http.RoundTripper) error {
		_, err := goOpenAIClient(fakeOpenAIURL, rt).CreateChatCompletion(context.Background(), goOpenAIChat())
		return err
	}
	lcCall := func(llm func(*testing.T, http.RoundTripper) lcGenerate) func(*testing.T, http.RoundTripper) error {
		return func(t *testing.T, rt http.RoundTripper) error {
			_, _, err := lcAsk(llm(t, rt), "Say hello.", false)
			return err
		}
	}
	bedrockCall := func(opts ...func(*bedrockruntime.Options)) func(*testing.T, http.RoundTripper) error {
		return func(_ *testing.T, rt http.RoundTripper) error {
			_, err := bedrockClient(rt, opts...).Converse(context.Background(), bedrockConverseInput())
			return err
		}
	}
	three := int32(3)

	type sdkSetup struct {
		name string
		call func(*testing.T, http.RoundTripper) error
		// lostCause: the client replaces a failed connection's error
		// with its own string, so neither the cause nor
		// *llmretry.Exhausted can be reached.
		lostCause bool
	}
	var (
		oaDefault  = sdkSetup{"openai-go, default (2 retries)", openAICall(), false}
		oaOff      = sdkSetup{"openai-go, WithMaxRetries(0)", openAICall(oaoption.WithMaxRetries(0)), false}
		antDefault = sdkSetup{"anthropic-sdk-go, default (2 retries)", anthropicCall(), false}
		antOff     = sdkSetup{"anthropic-sdk-go, WithMaxRetries(0)", anthropicCall(antoption.WithMaxRetries(0)), false}
		gDefault   = sdkSetup{"genai, default (no retry)", geminiCall(nil), false}
		gOn        = sdkSetup{"genai, RetryOptions{Attempts: 3}", geminiCall(&genai.HTTPRetryOptions{Attempts: &three}), false}
		goOA       = sdkSetup{"go-openai (no retries)", goOpenAICall, false}
		lcOA       = sdkSetup{"langchaingo openai (no retries)", lcCall(func(t *testing.T, rt http.RoundTripper) lcGenerate { return langchainOpenAI(t, fakeOpenAIURL, rt) }), true}
		lcAnt      = sdkSetup{"langchaingo anthropic (no retries)", lcCall(func(t *testing.T, rt http.RoundTripper) lcGenerate { return langchainAnthropic(t, fakeAnthropicV1, rt) }), false}
		awsDefault = sdkSetup{"bedrockruntime, default retryer (3 attempts)", bedrockCall(), false}
		awsNop     = sdkSetup{"bedrockruntime, Retryer: aws.NopRetryer{}", bedrockCall(noAWSRetries), false}
		awsOne     = sdkSetup{"bedrockruntime, RetryMaxAttempts: 1", bedrockCall(func(o *bedrockruntime.Options) { o.RetryMaxAttempts = 1 }), false}
	)
	type row struct {
		sdk     sdkSetup
		stack   string
		failure string
		want    int
	}
	rows := []row{
		{oaDefault, stackSDK, "502", 3},
		{oaDefault, stackLLM, "502", layerK + 1},
		{oaDefault, stackStripped, "502", 3 * (layerK + 1)},
		{oaOff, stackLLM, "502", layerK + 1},
		{oaDefault, stackSDK, "conn refused", 3},
		{oaDefault, stackLLM, "conn refused", 3 * (layerK + 1)},
		{oaOff, stackLLM, "conn refused", layerK + 1},

		{antDefault, stackSDK, "502", 3},
		{antDefault, stackLLM, "502", layerK + 1},
		{antDefault, stackStripped, "502", 3 * (layerK + 1)},
		{antOff, stackLLM, "502", layerK + 1},
		{antDefault, stackSDK, "429 x-should-retry: true", 3},
		{antDefault, stackLLM, "429 x-should-retry: true", layerK + 1},
		{antDefault, stackSDK, "conn refused", 3},
		{antDefault, stackLLM, "conn refused", 3 * (layerK + 1)},
		{antOff, stackLLM, "conn refused", layerK + 1},

		{gDefault, stackSDK, "502", 1},
		{gDefault, stackLLM, "502", layerK + 1},
		{gOn, stackLLM, "502", 3 * (layerK + 1)},
		{gDefault, stackLLM, "conn refused", layerK + 1},
		{gOn, stackLLM, "conn refused", 3 * (layerK + 1)},

		{goOA, stackSDK, "502", 1},
		{goOA, stackLLM, "502", layerK + 1},
		{goOA, stackLLM, "conn refused", layerK + 1},
		{lcOA, stackLLM, "502", layerK + 1},
		{lcOA, stackLLM, "conn refused", layerK + 1},
		{lcAnt, stackLLM, "502", layerK + 1},
		{lcAnt, stackLLM, "conn refused", layerK + 1},

		{awsDefault, stackSDK, "503 ServiceUnavailableException", 3},
		{awsDefault, stackLLM, "503 ServiceUnavailableException", 3 * (layerK + 1)},
		{awsDefault, stackLLM, "429 ThrottlingException", 3 * (layerK + 1)},
		{awsDefault, stackLLM, "502", 3 * (layerK + 1)},
		{awsDefault, stackLLM, "conn refused", 3 * (layerK + 1)},
		{awsNop, stackLLM, "503 ServiceUnavailableException", layerK + 1},
		{awsNop, stackLLM, "conn refused", layerK + 1},
		{awsOne, stackLLM, "503 ServiceUnavailableException", layerK + 1},
		{awsOne, stackLLM, "conn refused", layerK + 1},
	}

	var table []string
	for _, r := range rows {
		name := fmt.Sprintf("%s/%s/%s", r.sdk.name, r.stack, r.failure)
		t.Run(name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				failure := map[string]testkit.Reply{
					"502":                             testkit.BadGateway(),
					"conn refused":                    testkit.Refused(),
					"429 x-should-retry: true":        testkit.AnthropicRateLimited("20"),
					"503 ServiceUnavailableException": testkit.BedrockUnavailable(),
					"429 ThrottlingException":         testkit.BedrockThrottled(),
				}[r.failure]
				prov := testkit.NewProvider(failure)
				start := time.Now()
				err := r.sdk.call(t, stacks[r.stack](t, prov))
				elapsed := time.Since(start)

				require.Error(t, err)
				assert.Equal(t, r.want, prov.Attempts(), "provider attempts")
				table = append(table, fmt.Sprintf("| %s | %s | %s | %d | %v |", r.sdk.name, r.stack, r.failure, prov.Attempts(), elapsed.Round(10*time.Millisecond)))

				// What the caller sees.
				if r.failure == "conn refused" {
					var ex *llmretry.Exhausted
					if r.sdk.lostCause {
						assert.False(t, errors.Is(err, syscall.ECONNREFUSED), "the client dropped the cause")
						assert.False(t, errors.As(err, &ex))
						return
					}
					assert.ErrorIs(t, err, syscall.ECONNREFUSED)
					if r.stack == stackLLM {
						require.ErrorAs(t, err, &ex, "llmretry's error reaches the caller through the SDK")
						assert.Equal(t, layerK+1, ex.Attempts, "the last llmretry call's own attempts")
					} else {
						assert.False(t, errors.As(err, &ex))
					}
					return
				}
				status, header := sdkErrorResponse(t, err)
				assert.Equal(t, failure.Status, status, "the provider's last response, as the SDK's typed error")
				if r.stack == stackLLM && header != nil {
					assert.Equal(t, "false", header.Get("X-Should-Retry"), "llmretry marked the response it gave up on")
				}
				if resp := sdkHTTPResponse(err); resp != nil {
					gave := llmretry.GaveUp(resp)
					if r.stack == stackSDK {
						assert.Nil(t, gave, "no llmretry, no record")
					} else if assert.NotNil(t, gave, "GaveUp reads the record off the response the SDK kept") {
						assert.Equal(t, llmretry.ErrRetriesSpent, gave.Reason)
						assert.Equal(t, layerK+1, gave.Attempts, "the last llmretry call's own attempts")
					}
				}
			})
		})
	}
	t.Log("measured provider attempts (always-failing provider; synctest clock):\n" +
		"| SDK | stack | failure | attempts | time |\n|---|---|---|---:|---:|\n" + joinLines(table))
}

// sdkHTTPResponse returns the *http.Response an SDK's typed error keeps
// (openai-go's and anthropic-sdk-go's *Error, aws-sdk-go-v2's
// *awshttp.ResponseError), or nil: what llmretry.GaveUp reads.
func sdkHTTPResponse(err error) *http.Response {
	var (
		oaErr  *openai.Error
		antErr *anthropic.Error
		awsErr *awshttp.ResponseError
	)
	switch {
	case errors.As(err, &oaErr):
		return oaErr.Response
	case errors.As(err, &antErr):
		return antErr.Response
	case errors.As(err, &awsErr) && awsErr.Response != nil:
		return awsErr.Response.Response
	}
	return nil
}

// sdkErrorResponse returns the status of the SDK's typed error for a
// failed response, and the response headers when the SDK keeps them.
func sdkErrorResponse(t *testing.T, err error) (int, http.Header) {
	t.Helper()
	var (
		oaErr    *openai.Error
		antErr   *anthropic.Error
		gErr     genai.APIError
		goAPIErr *goopenai.APIError
		goReqErr *goopenai.RequestError
		awsErr   *awshttp.ResponseError
	)
	switch {
	case errors.As(err, &oaErr):
		return oaErr.StatusCode, oaErr.Response.Header
	case errors.As(err, &antErr):
		return antErr.StatusCode, antErr.Response.Header
	case errors.As(err, &gErr):
		return gErr.Code, nil
	case errors.As(err, &goAPIErr):
		return goAPIErr.HTTPStatusCode, nil
	case errors.As(err, &goReqErr):
		return goReqErr.HTTPStatusCode, nil
	case errors.As(err, &awsErr):
		return awsErr.HTTPStatusCode(), awsErr.Response.Header
	}
	// langchaingo: only a string.
	const lcStatus = "API returned unexpected status code: "
	if i := strings.Index(err.Error(), lcStatus); i >= 0 {
		var status int
		if _, scanErr := fmt.Sscanf(err.Error()[i+len(lcStatus):], "%d", &status); scanErr == nil {
			return status, nil
		}
	}
	t.Fatalf("not an SDK error: %T %v", err, err)
	return 0, nil
}

// joinLines joins lines with newlines.
func joinLines(lines []string) string {
	s := ""
	for _, l := range lines {
		s += l + "\n"
	}
	return s
}
