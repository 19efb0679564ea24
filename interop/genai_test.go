package interop

import (
	"context"
	"errors"
	"net/http/httptest"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/llmretry/llmretry"
	"github.com/llmretry/llmretry/internal/testkit"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/genai"
)

// genai (Gemini API backend) under llmretry. genai does not retry unless
// HTTPOptions.RetryOptions is set, so there is nothing to turn off: a 502,
// then a 429 asking for 20 s, then the answer. llmretry waits 5 s, then
// 20 s, and the SDK sees only the answer.
func TestGeminiRidesOutOutage(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		prov := testkit.NewProvider(testkit.BadGateway(),
			testkit.GeminiError(429, "RESOURCE_EXHAUSTED", "Resource has been exhausted (e.g. check quota).").With("Retry-After", "20"),
			testkit.GeminiResponse("Hello! How can I help?"))
		var rec recorder
		rt := retrying(t, prov, llmretry.Policy{Waits: []time.Duration{5 * time.Second, 10 * time.Second}, OnAttempt: rec.on})
		client := geminiClient(t, fakeGeminiURL, rt, nil)

		start := time.Now()
		got, err := client.Models.GenerateContent(context.Background(), geminiModel, geminiPrompt(), nil)
		require.NoError(t, err)
		assert.Equal(t, "Hello! How can I help?", got.Text())

		assert.Equal(t, 3, prov.Attempts(), "exactly the policy's attempts")
		assert.Equal(t, []time.Duration{5 * time.Second, 20 * time.Second}, prov.Gaps())
		assert.Equal(t, 25*time.Second, time.Since(start))
		assert.Equal(t, []int{502, 429, 200}, rec.statuses())
		assert.Equal(t, []time.Duration{5 * time.Second, 20 * time.Second, 0}, rec.retryIns())
		calls := prov.Received()
		for _, c := range calls {
			assert.Equal(t, "/v1beta/models/"+geminiModel+":generateContent", c.Path)
			assert.Equal(t, dummyGeminiKey, c.Header.Get("X-Goog-Api-Key"))
			assert.Equal(t, calls[0].Body, c.Body, "every attempt carries the whole body")
		}
	})
}

// Models.GenerateContentStream: genai marks a stream in the URL
// (:streamGenerateContent?alt=sse).
func TestGeminiStream(t *testing.T) {
	parts := []string{"Hel", "lo", "! How", " can I", " help?"}

	collect := func(client *genai.Client) (string, error) {
		var text strings.Builder
		for chunk, err := range client.Models.GenerateContentStream(context.Background(), geminiModel, geminiPrompt(), nil) {
			if err != nil {
				return text.String(), err
			}
			text.WriteString(chunk.Text())
		}
		return text.String(), nil
	}
	unavailable := testkit.GeminiError(503, "UNAVAILABLE", "The model is overloaded. Please try again later.")

	t.Run("succeeds over the wire", func(t *testing.T) {
		prov := testkit.NewProvider(testkit.GeminiStream(parts...))
		srv := httptest.NewServer(prov)
		defer srv.Close()
		rt := retrying(t, srv.Client().Transport, llmretry.Policy{})
		text, err := collect(geminiClient(t, srv.URL+"/", rt, nil))
		require.NoError(t, err)
		assert.Equal(t, "Hello! How can I help?", text, "every chunk arrived")
		require.Equal(t, 1, prov.Attempts())
		c := prov.Received()[0]
		assert.Equal(t, "/v1beta/models/"+geminiModel+":streamGenerateContent", c.Path)
		assert.Equal(t, "alt=sse", c.Query)
	})

	t.Run("503 first is not retried by default", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			prov := testkit.NewProvider(unavailable, testkit.GeminiStream(parts...))
			rt := retrying(t, prov, llmretry.Policy{Waits: []time.Duration{2 * time.Second}})
			_, err := collect(geminiClient(t, fakeGeminiURL, rt, nil))
			var apiErr genai.APIError
			require.ErrorAs(t, err, &apiErr)
			assert.Equal(t, 503, apiErr.Code)
			assert.Equal(t, "UNAVAILABLE", apiErr.Status)
			assert.Equal(t, "The model is overloaded. Please try again later.", apiErr.Message)
			assert.Equal(t, 1, prov.Attempts(), "the SDK got the 503 from the first attempt")
		})
	})

	t.Run("503 first is retried with RetryStreams", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			prov := testkit.NewProvider(unavailable, testkit.GeminiStream(parts...))
			rt := retrying(t, prov, llmretry.Policy{Waits: []time.Duration{2 * time.Second}, RetryStreams: true})
			text, err := collect(geminiClient(t, fakeGeminiURL, rt, nil))
			require.NoError(t, err)
			assert.Equal(t, "Hello! How can I help?", text)
			assert.Equal(t, 2, prov.Attempts())
			assert.Equal(t, []time.Duration{2 * time.Second}, prov.Gaps())
		})
	})
}

// A 400 is final: one attempt, and the caller gets genai.APIError (a value,
// not a pointer) with Gemini's message.
func TestGeminiBadRequest(t *testing.T) {
	prov := testkit.NewProvider(testkit.GeminiError(400, "INVALID_ARGUMENT", "* GenerateContentRequest.contents: contents is not specified\n"))
	srv := httptest.NewServer(prov)
	defer srv.Close()
	rt := retrying(t, srv.Client().Transport, llmretry.Policy{Waits: []time.Duration{time.Second}})
	client := geminiClient(t, srv.URL+"/", rt, nil)

	_, err := client.Models.GenerateContent(context.Background(), geminiModel, geminiPrompt(), nil)
	var apiErr genai.APIError
	require.ErrorAs(t, err, &apiErr)
	assert.Equal(t, 400, apiErr.Code)
	assert.Equal(t, "INVALID_ARGUMENT", apiErr.Status)
	assert.Equal(t, "* GenerateContentRequest.contents: contents is not specified\n", apiErr.Message)
	assert.False(t, errors.As(err, new(*llmretry.Exhausted)))
	assert.Equal(t, 1, prov.Attempts())
}
