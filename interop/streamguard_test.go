package interop

import (
	"context"
	"io"
	"net/http/httptest"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2"
	antoption "github.com/anthropics/anthropic-sdk-go/v2/option"
	"github.com/llmretry/llmretry"
	"github.com/llmretry/llmretry/internal/testkit"
	"github.com/openai/openai-go/v3"
	oaoption "github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/packages/ssestream"
	"github.com/openai/openai-go/v3/responses"
	goopenai "github.com/sashabaranov/go-openai"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Streams guarded until committed, through the SDKs that read them. With
// RetryStreams, llmretry reads a 200 text/event-stream ahead to its first
// event that carries content; an error there (Anthropic's "event: error",
// OpenAI's "data: {"error":…}") makes the attempt a failure, retried like
// the status it stands for, and the SDK reads only the good attempt. An
// error after content is the SDK's to report: nothing is resent.

// streamParts is the answer every good stream here carries.
var streamParts = []string{"Hel", "lo", "! How", " can I", " help?"}

const streamText = "Hello! How can I help?"

// anthropicBrokenStream is a 200 stream that sends the first n events of a
// good stream (message_start, content_block_start, ping, then the deltas)
// and then errEvent.
func anthropicBrokenStream(n int, errEvent string) testkit.Reply {
	r := testkit.AnthropicStream(streamParts...)
	r.Events = append(append([]string(nil), r.Events[:n]...), errEvent)
	return r
}

// openAIBrokenStream is a 200 chat stream that sends the first n chunks of
// a good stream (the role chunk, then one chunk per part) and then the
// error chunk and [DONE].
func openAIBrokenStream(n int) testkit.Reply {
	r := testkit.OpenAIChatStream(streamParts...)
	r.Events = append(append([]string(nil), r.Events[:n]...), testkit.OpenAIErrorChunk, "data: [DONE]\n\n")
	return r
}

// anthropicStreamText reads a Messages stream to its end and returns the
// text of its deltas and the stream's error.
func anthropicStreamText(t *testing.T, client anthropic.Client) (string, error) {
	t.Helper()
	stream := client.Messages.NewStreaming(context.Background(), anthropicParams())
	defer stream.Close()
	var text strings.Builder
	var msg anthropic.Message
	for stream.Next() {
		ev := stream.Current()
		require.NoError(t, msg.Accumulate(ev))
		if ev.Type == "content_block_delta" && ev.Delta.Type == "text_delta" {
			text.WriteString(ev.Delta.Text)
		}
	}
	if stream.Err() == nil {
		assert.Equal(t, anthropic.StopReasonEndTurn, msg.StopReason, "the stream ran to message_stop")
	}
	return text.String(), stream.Err()
}

// openAIStreamText reads a chat completion stream to its end and returns
// its text and the stream's error.
func openAIStreamText(client openai.Client) (string, error) {
	stream := client.Chat.Completions.NewStreaming(context.Background(), openAIParams())
	defer stream.Close()
	var text strings.Builder
	for stream.Next() {
		for _, c := range stream.Current().Choices {
			text.WriteString(c.Delta.Content)
		}
	}
	return text.String(), stream.Err()
}

// anthropic-sdk-go's Messages.NewStreaming: a 200 whose first event is an
// error (after none, some or all of the preamble: message_start,
// content_block_start, ping) is retried, and the SDK gets the second
// attempt's whole text and no error, with its own retries off or on.
func TestAnthropicStreamErrorFirstRetried(t *testing.T) {
	for _, tt := range []struct {
		name     string
		preamble int // events of the good stream sent before the error
		event    string
	}{
		{"overloaded_error first", 0, testkit.AnthropicErrorEvent("overloaded_error", "Overloaded")},
		{"message_start then overloaded_error", 1, testkit.AnthropicErrorEvent("overloaded_error", "Overloaded")},
		{"whole preamble and ping then overloaded_error", 3, testkit.AnthropicErrorEvent("overloaded_error", "Overloaded")},
		{"api_error after message_start", 1, testkit.AnthropicErrorEvent("api_error", "Internal server error")},
		{"rate_limit_error after message_start", 1, testkit.AnthropicErrorEvent("rate_limit_error", "Rate limited")},
	} {
		for _, sdkRetries := range []bool{false, true} {
			name := tt.name + "/SDK retries off"
			if sdkRetries {
				name = tt.name + "/SDK retries on"
			}
			t.Run(name, func(t *testing.T) {
				synctest.Test(t, func(t *testing.T) {
					prov := testkit.NewProvider(anthropicBrokenStream(tt.preamble, tt.event), testkit.AnthropicStream(streamParts...))
					var rec recorder
					rt := retrying(t, prov, llmretry.Policy{Waits: []time.Duration{2 * time.Second}, RetryStreams: true, OnAttempt: rec.on})
					var opts []antoption.RequestOption
					if !sdkRetries {
						opts = append(opts, antoption.WithMaxRetries(0))
					}
					text, err := anthropicStreamText(t, anthropicClient(fakeAnthropicURL, rt, opts...))
					require.NoError(t, err, "the SDK never saw the error event")
					assert.Equal(t, streamText, text, "the whole text, once")
					assert.Equal(t, 2, prov.Attempts())
					assert.Equal(t, []time.Duration{2 * time.Second}, prov.Gaps())
					assert.Equal(t, []time.Duration{2 * time.Second, 0}, rec.retryIns())
				})
			})
		}
	}

	// Over a real loopback connection, each event flushed on its own: the
	// SDK reads exactly the good attempt's bytes.
	t.Run("over the wire", func(t *testing.T) {
		prov := testkit.NewProvider(anthropicBrokenStream(1, testkit.AnthropicErrorEvent("overloaded_error", "Overloaded")), testkit.AnthropicStream(streamParts...))
		srv := httptest.NewServer(prov)
		defer srv.Close()
		rt := retrying(t, srv.Client().Transport, llmretry.Policy{Waits: []time.Duration{0}, RetryStreams: true})
		text, err := anthropicStreamText(t, anthropicClient(srv.URL+"/", rt, antoption.WithMaxRetries(0)))
		require.NoError(t, err)
		assert.Equal(t, streamText, text)
		assert.Equal(t, 2, prov.Attempts())
	})

	// Without RetryStreams the stream is handed over as it came: the SDK
	// reports the error event.
	t.Run("without RetryStreams the SDK reports it", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			prov := testkit.NewProvider(anthropicBrokenStream(1, testkit.AnthropicErrorEvent("overloaded_error", "Overloaded")), testkit.AnthropicStream(streamParts...))
			rt := retrying(t, prov, llmretry.Policy{Waits: []time.Duration{2 * time.Second}})
			text, err := anthropicStreamText(t, anthropicClient(fakeAnthropicURL, rt, antoption.WithMaxRetries(0)))
			var apiErr *anthropic.Error
			require.ErrorAs(t, err, &apiErr)
			assert.EqualValues(t, "overloaded_error", apiErr.Type())
			assert.Empty(t, text)
			assert.Equal(t, 1, prov.Attempts())
		})
	})
}

// A stream that has carried content is committed: an overloaded_error
// after the first delta reaches the SDK (stream.Err()), with the text that
// came before it, and is never resent (TestAnthropicStream has the same
// with the SDK's retries on).
func TestAnthropicStreamErrorAfterContentNotRetried(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		prov := testkit.NewProvider(anthropicBrokenStream(4, testkit.AnthropicErrorEvent("overloaded_error", "Overloaded")), testkit.AnthropicStream(streamParts...))
		rt := retrying(t, prov, llmretry.Policy{Waits: []time.Duration{2 * time.Second}, RetryStreams: true})
		text, err := anthropicStreamText(t, anthropicClient(fakeAnthropicURL, rt, antoption.WithMaxRetries(0)))
		var apiErr *anthropic.Error
		require.ErrorAs(t, err, &apiErr)
		assert.EqualValues(t, "overloaded_error", apiErr.Type())
		assert.Equal(t, "Hel", text)
		assert.Equal(t, 1, prov.Attempts())
	})
}

// openai-go's Chat.Completions.NewStreaming: a 200 whose first chunk is
// {"error":…} (server_error) is retried, and the SDK gets the second
// attempt's whole text; an error chunk after a content chunk reaches
// stream.Err() as openai-go's *ssestream.StreamError, 1 attempt.
func TestOpenAIStreamErrorFirst(t *testing.T) {
	t.Run("error first is retried", func(t *testing.T) {
		for _, sdkRetries := range []bool{false, true} {
			synctest.Test(t, func(t *testing.T) {
				prov := testkit.NewProvider(openAIBrokenStream(0), testkit.OpenAIChatStream(streamParts...))
				rt := retrying(t, prov, llmretry.Policy{Waits: []time.Duration{2 * time.Second}, RetryStreams: true})
				var opts []oaoption.RequestOption
				if !sdkRetries {
					opts = append(opts, oaoption.WithMaxRetries(0))
				}
				text, err := openAIStreamText(openAIClient(fakeOpenAIURL, rt, opts...))
				require.NoError(t, err, "SDK retries %v", sdkRetries)
				assert.Equal(t, streamText, text)
				assert.Equal(t, 2, prov.Attempts())
				assert.Equal(t, []time.Duration{2 * time.Second}, prov.Gaps())
			})
		}
	})

	t.Run("error first over the wire", func(t *testing.T) {
		prov := testkit.NewProvider(openAIBrokenStream(0), testkit.OpenAIChatStream(streamParts...))
		srv := httptest.NewServer(prov)
		defer srv.Close()
		rt := retrying(t, srv.Client().Transport, llmretry.Policy{Waits: []time.Duration{0}, RetryStreams: true})
		text, err := openAIStreamText(openAIClient(srv.URL+"/v1/", rt, oaoption.WithMaxRetries(0)))
		require.NoError(t, err)
		assert.Equal(t, streamText, text)
		assert.Equal(t, 2, prov.Attempts())
	})

	t.Run("error after content is not retried", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			// The role chunk, "Hel", then the error.
			prov := testkit.NewProvider(openAIBrokenStream(2), testkit.OpenAIChatStream(streamParts...))
			rt := retrying(t, prov, llmretry.Policy{Waits: []time.Duration{2 * time.Second}, RetryStreams: true})
			text, err := openAIStreamText(openAIClient(fakeOpenAIURL, rt, oaoption.WithMaxRetries(0)))
			var streamErr *ssestream.StreamError
			require.ErrorAs(t, err, &streamErr)
			assert.Contains(t, streamErr.Message, "server_error")
			assert.Equal(t, "Hel", text, "what came before the error stays delivered")
			assert.Equal(t, 1, prov.Attempts())
		})
	})

	// Every chat stream opens with a chunk that carries only the role
	// ({"delta":{"role":"assistant","content":"","refusal":null}}). No
	// content has come: llmretry reads past it, and an error chunk right
	// after it is retried like one that comes first.
	t.Run("error after the role chunk is retried", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			prov := testkit.NewProvider(openAIBrokenStream(1), testkit.OpenAIChatStream(streamParts...))
			rt := retrying(t, prov, llmretry.Policy{Waits: []time.Duration{2 * time.Second}, RetryStreams: true})
			text, err := openAIStreamText(openAIClient(fakeOpenAIURL, rt, oaoption.WithMaxRetries(0)))
			require.NoError(t, err)
			assert.Equal(t, streamText, text)
			assert.Equal(t, 2, prov.Attempts())
		})
	})

	t.Run("without RetryStreams the SDK reports it", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			prov := testkit.NewProvider(openAIBrokenStream(0), testkit.OpenAIChatStream(streamParts...))
			rt := retrying(t, prov, llmretry.Policy{Waits: []time.Duration{2 * time.Second}})
			_, err := openAIStreamText(openAIClient(fakeOpenAIURL, rt, oaoption.WithMaxRetries(0)))
			var streamErr *ssestream.StreamError
			require.ErrorAs(t, err, &streamErr)
			assert.Equal(t, 1, prov.Attempts())
		})
	})
}

// sashabaranov/go-openai's CreateChatCompletionStream: the same error chunk
// first is retried with RetryStreams (the caller reads the whole text);
// without it go-openai's Recv returns the error as *openai.APIError.
func TestGoOpenAIStreamErrorFirst(t *testing.T) {
	for _, retry := range []bool{true, false} {
		synctest.Test(t, func(t *testing.T) {
			prov := testkit.NewProvider(openAIBrokenStream(0), testkit.OpenAIChatStream(streamParts...))
			rt := retrying(t, prov, llmretry.Policy{Waits: []time.Duration{2 * time.Second}, RetryStreams: retry})
			stream, err := goOpenAIClient(fakeOpenAIURL, rt).CreateChatCompletionStream(context.Background(), goOpenAIChat())
			require.NoError(t, err, "a 200")
			text, err := goOpenAIStreamText(stream)
			if retry {
				require.NoError(t, err)
				assert.Equal(t, streamText, text)
				assert.Equal(t, 2, prov.Attempts())
				return
			}
			var apiErr *goopenai.APIError
			require.ErrorAs(t, err, &apiErr)
			assert.Equal(t, "server_error", apiErr.Type)
			assert.Equal(t, 1, prov.Attempts())
		})
	}
}

// The three timeouts through the SDKs that read streams.
func TestStreamTimeoutsThroughSDKs(t *testing.T) {
	// AttemptTimeout: a provider that takes the connection and sends no
	// headers for 10 minutes is abandoned after 30 s and the call retried.
	t.Run("AttemptTimeout: a silent provider is abandoned and retried", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			prov := testkit.NewProvider(testkit.AnthropicStream(streamParts...).After(10*time.Minute), testkit.AnthropicStream(streamParts...))
			var rec recorder
			rt := retrying(t, prov, llmretry.Policy{Waits: []time.Duration{time.Second}, RetryStreams: true, AttemptTimeout: 30 * time.Second, OnAttempt: rec.on})
			start := time.Now()
			text, err := anthropicStreamText(t, anthropicClient(fakeAnthropicURL, rt, antoption.WithMaxRetries(0)))
			require.NoError(t, err)
			assert.Equal(t, streamText, text)
			assert.Equal(t, 2, prov.Attempts())
			assert.Equal(t, []time.Duration{31 * time.Second}, prov.Gaps(), "30 s bound, then the 1-s wait")
			assert.Equal(t, 31*time.Second, time.Since(start))
			require.Len(t, rec.attempts, 2)
			require.Error(t, rec.attempts[0].Err)
			assert.Contains(t, rec.attempts[0].Err.Error(), "AttemptTimeout")
		})
	})

	t.Run("AttemptTimeout: openai-go without a stream", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			prov := testkit.NewProvider(testkit.OpenAIChatCompletion("late").After(10*time.Minute), testkit.OpenAIChatCompletion(streamText))
			rt := retrying(t, prov, llmretry.Policy{Waits: []time.Duration{time.Second}, AttemptTimeout: 2 * time.Minute})
			client := openAIClient(fakeOpenAIURL, rt, oaoption.WithMaxRetries(0))
			got, err := client.Chat.Completions.New(context.Background(), openAIParams())
			require.NoError(t, err)
			assert.Equal(t, streamText, got.Choices[0].Message.Content)
			assert.Equal(t, []time.Duration{2*time.Minute + time.Second}, prov.Gaps())
		})
	})

	// FirstEventTimeout: a 200 whose stream sends message_start and then
	// nothing is abandoned 10 s after its headers and retried.
	t.Run("FirstEventTimeout: a stream that never starts is retried", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			silent := testkit.AnthropicStream(streamParts...)
			silent.Events = silent.Events[:1]
			prov := testkit.NewProvider(silent.Stalled(), testkit.AnthropicStream(streamParts...))
			rt := retrying(t, prov, llmretry.Policy{Waits: []time.Duration{time.Second}, RetryStreams: true, FirstEventTimeout: 10 * time.Second})
			text, err := anthropicStreamText(t, anthropicClient(fakeAnthropicURL, rt, antoption.WithMaxRetries(0)))
			require.NoError(t, err)
			assert.Equal(t, streamText, text, "the SDK read only the good attempt")
			assert.Equal(t, []time.Duration{11 * time.Second}, prov.Gaps())
		})
	})

	t.Run("FirstEventTimeout: openai-go", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			silent := testkit.OpenAIChatStream(streamParts...)
			silent.Events = nil
			prov := testkit.NewProvider(silent.Stalled(), testkit.OpenAIChatStream(streamParts...))
			rt := retrying(t, prov, llmretry.Policy{Waits: []time.Duration{time.Second}, RetryStreams: true, FirstEventTimeout: 10 * time.Second})
			text, err := openAIStreamText(openAIClient(fakeOpenAIURL, rt, oaoption.WithMaxRetries(0)))
			require.NoError(t, err)
			assert.Equal(t, streamText, text)
			assert.Equal(t, []time.Duration{11 * time.Second}, prov.Gaps())
		})
	})

	// StreamIdleTimeout: a committed stream that goes silent after "Hel"
	// ends with an error from the SDK (not a clean, truncated end) once
	// 30 s pass without a byte; it is not resent.
	t.Run("StreamIdleTimeout: a stall after commit fails the SDK's read", func(t *testing.T) {
		type result struct {
			text string
			err  error
		}
		sdks := []struct {
			name  string
			stall testkit.Reply
			read  func(t *testing.T, rt *llmretry.Transport) result
		}{
			{"anthropic-sdk-go", func() testkit.Reply {
				r := testkit.AnthropicStream(streamParts...)
				r.Events = r.Events[:4]
				return r.Stalled()
			}(), func(t *testing.T, rt *llmretry.Transport) result {
				text, err := anthropicStreamText(t, anthropicClient(fakeAnthropicURL, rt, antoption.WithMaxRetries(0)))
				return result{text, err}
			}},
			{"openai-go", func() testkit.Reply {
				r := testkit.OpenAIChatStream(streamParts...)
				r.Events = r.Events[:2]
				return r.Stalled()
			}(), func(t *testing.T, rt *llmretry.Transport) result {
				text, err := openAIStreamText(openAIClient(fakeOpenAIURL, rt, oaoption.WithMaxRetries(0)))
				return result{text, err}
			}},
			{"go-openai", func() testkit.Reply {
				r := testkit.OpenAIChatStream(streamParts...)
				r.Events = r.Events[:2]
				return r.Stalled()
			}(), func(t *testing.T, rt *llmretry.Transport) result {
				stream, err := goOpenAIClient(fakeOpenAIURL, rt).CreateChatCompletionStream(context.Background(), goOpenAIChat())
				require.NoError(t, err)
				text, err := goOpenAIStreamText(stream)
				return result{text, err}
			}},
		}
		for _, sdk := range sdks {
			t.Run(sdk.name, func(t *testing.T) {
				synctest.Test(t, func(t *testing.T) {
					prov := testkit.NewProvider(sdk.stall, testkit.AnthropicStream(streamParts...))
					rt := retrying(t, prov, llmretry.Policy{Waits: []time.Duration{time.Second}, RetryStreams: true, StreamIdleTimeout: 30 * time.Second})
					start := time.Now()
					got := sdk.read(t, rt)
					require.Error(t, got.err, "a stall is never a clean end")
					assert.NotErrorIs(t, got.err, io.EOF)
					assert.Contains(t, got.err.Error(), "StreamIdleTimeout")
					assert.Equal(t, "Hel", got.text, "what came before the stall")
					assert.Equal(t, 30*time.Second, time.Since(start), "within the idle bound")
					assert.Equal(t, 1, prov.Attempts(), "committed: not resent")
				})
			})
		}
	})
}

// openai-go's Responses.NewStreaming: a 200 whose first event after the
// preamble (response.created, response.in_progress) is "event: error"
// with server_is_overloaded. openai-go hands that event to the caller as
// an ordinary event of type "error", not as stream.Err(); with
// RetryStreams the attempt is retried and the caller reads the second
// attempt's whole text.
func TestOpenAIResponsesStreamErrorFirst(t *testing.T) {
	broken := testkit.OpenAIResponsesStream(streamParts...)
	broken.Events = append(broken.Events[:2:2],
		"event: error\ndata: {\"type\":\"error\",\"code\":\"server_is_overloaded\",\"message\":\"The server is overloaded. Please try again later.\",\"param\":null,\"sequence_number\":2}\n\n")
	read := func(client openai.Client) (text string, errorEvents int, err error) {
		stream := client.Responses.NewStreaming(context.Background(), responses.ResponseNewParams{
			Model: openAIModel,
			Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("Say hello.")},
		})
		defer stream.Close()
		var b strings.Builder
		for stream.Next() {
			switch ev := stream.Current(); ev.Type {
			case "response.output_text.delta":
				b.WriteString(ev.Delta)
			case "error":
				errorEvents++
			}
		}
		return b.String(), errorEvents, stream.Err()
	}
	for _, retry := range []bool{true, false} {
		synctest.Test(t, func(t *testing.T) {
			prov := testkit.NewProvider(broken, testkit.OpenAIResponsesStream(streamParts...))
			rt := retrying(t, prov, llmretry.Policy{Waits: []time.Duration{2 * time.Second}, RetryStreams: retry})
			text, errorEvents, err := read(openAIClient(fakeOpenAIURL, rt, oaoption.WithMaxRetries(0)))
			require.NoError(t, err)
			if retry {
				assert.Equal(t, streamText, text)
				assert.Zero(t, errorEvents)
				assert.Equal(t, 2, prov.Attempts())
				assert.True(t, llmretry.IsStream(prov.Received()[0].Request(t)))
				return
			}
			assert.Empty(t, text)
			assert.Equal(t, 1, errorEvents, "the caller must spot the error event itself")
			assert.Equal(t, 1, prov.Attempts())
		})
	}
}

// genai's GenerateContentStream: a 200 whose first event is Gemini's
// {"error":{"code":503,…,"status":"UNAVAILABLE"}} reaches the caller as an
// error after 1 attempt; with RetryStreams it is retried and the caller
// reads the second attempt's text.
func TestGeminiStreamErrorFirst(t *testing.T) {
	unavailable := testkit.GeminiStream("unused")
	unavailable.Events = []string{`data: {"error":{"code":503,"message":"The model is overloaded. Please try again later.","status":"UNAVAILABLE"}}` + "\r\n\r\n"}
	for _, retry := range []bool{true, false} {
		synctest.Test(t, func(t *testing.T) {
			prov := testkit.NewProvider(unavailable, testkit.GeminiStream("Hel", "lo!"))
			rt := retrying(t, prov, llmretry.Policy{Waits: []time.Duration{2 * time.Second}, RetryStreams: retry})
			client := geminiClient(t, fakeGeminiURL, rt, nil)
			var text strings.Builder
			var err error
			for chunk, cerr := range client.Models.GenerateContentStream(context.Background(), geminiModel, geminiPrompt(), nil) {
				if cerr != nil {
					err = cerr
					break
				}
				text.WriteString(chunk.Text())
			}
			if retry {
				require.NoError(t, err)
				assert.Equal(t, "Hello!", text.String())
				assert.Equal(t, 2, prov.Attempts())
				return
			}
			require.Error(t, err)
			assert.Contains(t, err.Error(), "UNAVAILABLE")
			assert.Equal(t, 1, prov.Attempts())
		})
	}
}
