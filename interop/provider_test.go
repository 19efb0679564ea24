package interop

// Shared test helpers: SDK clients wired to a RoundTripper, the SDKs'
// request parameters, the SDKs' typed errors and streams read off a call,
// Bedrock's event-stream replies (their binary frames need smithy's
// encoder), and a recorder for llmretry's attempt record.
// The scripted fake provider and the providers' other replies are
// internal/testkit's (testkit.Provider, testkit.Reply): an in-memory
// http.RoundTripper for synctest bubbles, and an http.Handler for
// httptest servers.
//
// Typical use:
//
//	synctest.Test(t, func(t *testing.T) {
//		prov := testkit.NewProvider(testkit.BadGateway(), testkit.OpenAIRateLimited("20"), testkit.OpenAIChatCompletion("Hi"))
//		rt := retrying(t, prov, llmretry.Policy{Waits: []time.Duration{5 * time.Second}})
//		client := openAIClient(fakeOpenAIURL, rt, oaoption.WithMaxRetries(0))
//		...
//		assert.Equal(t, 2, prov.Attempts())
//		assert.Equal(t, []time.Duration{20 * time.Second}, prov.Gaps())
//	})

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2"
	antoption "github.com/anthropics/anthropic-sdk-go/v2/option"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/bedrockruntime"
	brtypes "github.com/aws/aws-sdk-go-v2/service/bedrockruntime/types"
	"github.com/aws/smithy-go/eventstream"
	"github.com/llmretry/llmretry"
	"github.com/llmretry/llmretry/internal/testkit"
	"github.com/openai/openai-go/v3"
	oaoption "github.com/openai/openai-go/v3/option"
	goopenai "github.com/sashabaranov/go-openai"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	lcanthropic "github.com/tmc/langchaingo/llms/anthropic"
	lcopenai "github.com/tmc/langchaingo/llms/openai"
	"google.golang.org/genai"
)

// Base URLs of the in-memory providers. The .test TLD never resolves, so a
// request that escaped the fake base would fail rather than reach a real
// provider.
const (
	fakeOpenAIURL    = "https://api.openai.test/v1/"
	fakeAnthropicURL = "https://api.anthropic.test/"
	fakeGeminiURL    = "https://generativelanguage.googleapis.test/"
	fakeBedrockURL   = "https://bedrock-runtime.us-east-1.amazonaws.test"
)

// What the zero llmretry.Policy does, as its field docs state it: a zero
// Reserve keeps at most a minute; without Waits, 6 retries.
const (
	zeroPolicyReserve    = time.Minute
	zeroPolicyMaxRetries = 6
)

// Obvious dummy credentials: nothing here talks to a real provider.
const (
	dummyOpenAIKey    = "sk-dummy-interop-test"
	dummyAnthropicKey = "sk-ant-dummy-interop-test"
	dummyGeminiKey    = "dummy-gemini-interop-test"
	dummyAWSKeyID     = "AKIDINTEROPDUMMY"
	dummyAWSSecret    = "dummy-aws-secret-interop-test"
)

// Models named in requests and replies.
const (
	openAIModel    = "gpt-4o-mini"
	anthropicModel = "claude-sonnet-4-5"
	geminiModel    = "gemini-2.5-flash"
	bedrockModel   = "anthropic.claude-3-5-haiku-20241022-v1:0"
)

// --- Amazon Bedrock's event stream (binary frames, encoded by smithy) ---

// bedrockEvent encodes one event of an application/vnd.amazon.eventstream
// body: the binary frame with its CRCs, as Bedrock streams it.
func bedrockEvent(eventType, payload string) string {
	var b bytes.Buffer
	err := eventstream.NewEncoder().Encode(&b, eventstream.Message{
		Headers: eventstream.Headers{
			{Name: ":event-type", Value: eventstream.StringValue(eventType)},
			{Name: ":content-type", Value: eventstream.StringValue("application/json")},
			{Name: ":message-type", Value: eventstream.StringValue("event")},
		},
		Payload: []byte(payload),
	})
	if err != nil {
		panic(err)
	}
	return b.String()
}

// bedrockConverseStream streams parts as ConverseStream events:
// messageStart, one contentBlockDelta per part, contentBlockStop,
// messageStop and metadata.
func bedrockConverseStream(parts ...string) testkit.Reply {
	events := []string{bedrockEvent("messageStart", `{"p":"abcdefgh","role":"assistant"}`)}
	for _, p := range parts {
		events = append(events, bedrockEvent("contentBlockDelta", `{"contentBlockIndex":0,"delta":{"text":`+testkit.Quote(p)+`},"p":"abcd"}`))
	}
	events = append(events,
		bedrockEvent("contentBlockStop", `{"contentBlockIndex":0,"p":"abcdefghijk"}`),
		bedrockEvent("messageStop", `{"p":"abcdefghij","stopReason":"end_turn"}`),
		bedrockEvent("metadata", `{"metrics":{"latencyMs":412},"p":"abc","usage":{"inputTokens":12,"outputTokens":9,"totalTokens":21}}`))
	return testkit.Reply{Status: http.StatusOK, Header: testkit.BedrockHeaders("application/vnd.amazon.eventstream"), Events: events}
}

// bedrockInvokeStream streams parts as InvokeModelWithResponseStream chunk
// events, each carrying one Anthropic stream event (base64 in "bytes").
func bedrockInvokeStream(parts ...string) testkit.Reply {
	chunk := func(data string) string {
		return bedrockEvent("chunk", `{"bytes":"`+base64.StdEncoding.EncodeToString([]byte(data))+`","p":"abcdef"}`)
	}
	events := []string{
		chunk(`{"type":"message_start","message":{"id":"msg_bdrk_01XFDUDYJgAACzvnptvVoYEL","type":"message","role":"assistant","model":"claude-3-5-haiku-20241022","content":[],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":12,"output_tokens":1}}}`),
		chunk(`{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}`),
	}
	for _, p := range parts {
		events = append(events, chunk(`{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":`+testkit.Quote(p)+`}}`))
	}
	events = append(events,
		chunk(`{"type":"content_block_stop","index":0}`),
		chunk(`{"type":"message_delta","delta":{"stop_reason":"end_turn","stop_sequence":null},"usage":{"output_tokens":9}}`),
		chunk(`{"type":"message_stop","amazon-bedrock-invocationMetrics":{"inputTokenCount":12,"outputTokenCount":9,"invocationLatency":412,"firstByteLatency":198}}`))
	return testkit.Reply{Status: http.StatusOK, Header: testkit.BedrockHeaders("application/vnd.amazon.eventstream"), Events: events}
}

// --- Clients ---

// retrying returns an llmretry Transport over base, or fails the test.
func retrying(t testing.TB, base http.RoundTripper, p llmretry.Policy) *llmretry.Transport {
	t.Helper()
	rt, err := llmretry.New(base, p)
	require.NoError(t, err)
	return rt
}

// openAIClient returns an openai-go client that sends through rt to
// baseURL with a dummy key; opts come last and win.
func openAIClient(baseURL string, rt http.RoundTripper, opts ...oaoption.RequestOption) openai.Client {
	return openai.NewClient(append([]oaoption.RequestOption{
		oaoption.WithBaseURL(baseURL),
		oaoption.WithAPIKey(dummyOpenAIKey),
		oaoption.WithHTTPClient(&http.Client{Transport: rt}),
	}, opts...)...)
}

// anthropicClient returns an anthropic-sdk-go client that sends through rt
// to baseURL with a dummy key, ignoring ANTHROPIC_* variables and profiles;
// opts come last and win.
func anthropicClient(baseURL string, rt http.RoundTripper, opts ...antoption.RequestOption) anthropic.Client {
	return anthropic.NewClient(append([]antoption.RequestOption{
		antoption.WithoutEnvironmentDefaults(),
		antoption.WithBaseURL(baseURL),
		antoption.WithAPIKey(dummyAnthropicKey),
		antoption.WithHTTPClient(&http.Client{Transport: rt}),
	}, opts...)...)
}

// geminiClient returns a genai client for the Gemini API that sends
// through rt to baseURL with a dummy key. retry, if non-nil, turns on the
// SDK's own retry (off by default).
func geminiClient(t testing.TB, baseURL string, rt http.RoundTripper, retry *genai.HTTPRetryOptions) *genai.Client {
	t.Helper()
	c, err := genai.NewClient(context.Background(), &genai.ClientConfig{
		APIKey:      dummyGeminiKey,
		Backend:     genai.BackendGeminiAPI,
		HTTPClient:  &http.Client{Transport: rt},
		HTTPOptions: genai.HTTPOptions{BaseURL: baseURL, RetryOptions: retry},
	})
	require.NoError(t, err)
	return c
}

// goOpenAIClient returns a sashabaranov/go-openai client that sends
// through rt to baseURL with a dummy key. go-openai has no retries of its
// own: there is nothing to turn off.
func goOpenAIClient(baseURL string, rt http.RoundTripper) *goopenai.Client {
	cfg := goopenai.DefaultConfig(dummyOpenAIKey)
	cfg.BaseURL = strings.TrimSuffix(baseURL, "/")
	cfg.HTTPClient = &http.Client{Transport: rt}
	return goopenai.NewClientWithConfig(cfg)
}

// langchainOpenAI returns langchaingo's OpenAI LLM sending through rt to
// baseURL with a dummy key (the options win over OPENAI_* variables).
func langchainOpenAI(t testing.TB, baseURL string, rt http.RoundTripper) *lcopenai.LLM {
	t.Helper()
	llm, err := lcopenai.New(
		lcopenai.WithToken(dummyOpenAIKey),
		lcopenai.WithBaseURL(strings.TrimSuffix(baseURL, "/")),
		lcopenai.WithModel(openAIModel),
		lcopenai.WithHTTPClient(&http.Client{Transport: rt}),
	)
	require.NoError(t, err)
	return llm
}

// langchainAnthropic returns langchaingo's Anthropic LLM sending through
// rt to baseURL (which ends in /v1) with a dummy key.
func langchainAnthropic(t testing.TB, baseURL string, rt http.RoundTripper) *lcanthropic.LLM {
	t.Helper()
	llm, err := lcanthropic.New(
		lcanthropic.WithToken(dummyAnthropicKey),
		lcanthropic.WithBaseURL(strings.TrimSuffix(baseURL, "/")),
		lcanthropic.WithModel(anthropicModel),
		lcanthropic.WithHTTPClient(&http.Client{Transport: rt}),
	)
	require.NoError(t, err)
	return llm
}

// bedrockClient returns an aws-sdk-go-v2 bedrockruntime client that sends
// through rt to fakeBedrockURL, signing with SigV4 and dummy static
// credentials. It keeps the SDK's default retryer; opts come last and win
// (Retryer: aws.NopRetryer{} is the recommended set-up under llmretry).
func bedrockClient(rt http.RoundTripper, opts ...func(*bedrockruntime.Options)) *bedrockruntime.Client {
	return bedrockruntime.New(bedrockruntime.Options{
		Region:       "us-east-1",
		BaseEndpoint: aws.String(fakeBedrockURL),
		Credentials: aws.CredentialsProviderFunc(func(context.Context) (aws.Credentials, error) {
			return aws.Credentials{AccessKeyID: dummyAWSKeyID, SecretAccessKey: dummyAWSSecret, Source: "interop"}, nil
		}),
		HTTPClient: &http.Client{Transport: rt},
	}, append([]func(*bedrockruntime.Options){func(o *bedrockruntime.Options) {
		// SigV4 even where AWS_BEARER_TOKEN_BEDROCK is set.
		o.AuthSchemePreference = nil
		o.BearerAuthTokenProvider = nil
	}}, opts...)...)
}

// noAWSRetries is the recommended set-up of a bedrockruntime client under
// llmretry: the SDK's own retryer off.
func noAWSRetries(o *bedrockruntime.Options) { o.Retryer = aws.NopRetryer{} }

// bedrockConverseInput is a small Converse request.
func bedrockConverseInput() *bedrockruntime.ConverseInput {
	return &bedrockruntime.ConverseInput{
		ModelId: aws.String(bedrockModel),
		Messages: []brtypes.Message{{
			Role:    brtypes.ConversationRoleUser,
			Content: []brtypes.ContentBlock{&brtypes.ContentBlockMemberText{Value: "Say hello."}},
		}},
		InferenceConfig: &brtypes.InferenceConfiguration{MaxTokens: aws.Int32(256)},
	}
}

// bedrockConverseStreamInput is bedrockConverseInput for ConverseStream.
func bedrockConverseStreamInput() *bedrockruntime.ConverseStreamInput {
	in := bedrockConverseInput()
	return &bedrockruntime.ConverseStreamInput{ModelId: in.ModelId, Messages: in.Messages, InferenceConfig: in.InferenceConfig}
}

// bedrockInvokeBody is an InvokeModel body in Anthropic's format on Bedrock.
const bedrockInvokeBody = `{"anthropic_version":"bedrock-2023-05-31","max_tokens":256,"messages":[{"role":"user","content":[{"type":"text","text":"Say hello."}]}]}`

// openAIParams is a small chat request.
func openAIParams() openai.ChatCompletionNewParams {
	return openai.ChatCompletionNewParams{
		Model:    openAIModel,
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Say hello.")},
	}
}

// anthropicParams is a small Messages request.
func anthropicParams() anthropic.MessageNewParams {
	return anthropic.MessageNewParams{
		Model:     anthropicModel,
		MaxTokens: 1024,
		Messages:  []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("Say hello."))},
	}
}

// geminiPrompt is a small generateContent prompt.
func geminiPrompt() []*genai.Content { return genai.Text("Say hello.") }

// openAIError sends openAIParams through client and returns the
// *openai.Error the call fails with, or fails the test.
func openAIError(t *testing.T, client openai.Client) *openai.Error {
	t.Helper()
	_, err := client.Chat.Completions.New(context.Background(), openAIParams())
	var apiErr *openai.Error
	require.ErrorAs(t, err, &apiErr)
	return apiErr
}

// anthropicError sends anthropicParams through client and returns the
// *anthropic.Error the call fails with, or fails the test.
func anthropicError(t *testing.T, client anthropic.Client) *anthropic.Error {
	t.Helper()
	_, err := client.Messages.New(context.Background(), anthropicParams())
	var apiErr *anthropic.Error
	require.ErrorAs(t, err, &apiErr)
	return apiErr
}

// --- Streams ---

// streamParts is the answer every good stream here carries.
var streamParts = []string{"Hel", "lo", "! How", " can I", " help?"}

const streamText = "Hello! How can I help?"

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

// goOpenAIStreamText reads a go-openai stream to its end and returns the
// text of its deltas and the first error other than io.EOF.
func goOpenAIStreamText(stream *goopenai.ChatCompletionStream) (string, error) {
	defer stream.Close()
	var text strings.Builder
	for {
		chunk, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return text.String(), nil
		}
		if err != nil {
			return text.String(), err
		}
		for _, c := range chunk.Choices {
			text.WriteString(c.Delta.Content)
		}
	}
}

// geminiStreamText reads a GenerateContentStream to its end and returns
// its text and the first error.
func geminiStreamText(client *genai.Client) (string, error) {
	var text strings.Builder
	for chunk, err := range client.Models.GenerateContentStream(context.Background(), geminiModel, geminiPrompt(), nil) {
		if err != nil {
			return text.String(), err
		}
		text.WriteString(chunk.Text())
	}
	return text.String(), nil
}

// --- The record ---

// recorder collects llmretry's attempt record: its on is a
// Policy.OnAttempt, its All the attempts so far.
type recorder struct{ testkit.Log[llmretry.Attempt] }

// on is a Policy.OnAttempt.
func (r *recorder) on(a llmretry.Attempt) { r.Add(a) }

// retryIns returns each recorded attempt's RetryIn.
func (r *recorder) retryIns() []time.Duration {
	var d []time.Duration
	for _, a := range r.All() {
		d = append(d, a.RetryIn)
	}
	return d
}

// statuses returns each recorded attempt's status code (0 for an error).
func (r *recorder) statuses() []int {
	var s []int
	for _, a := range r.All() {
		if a.Response != nil {
			s = append(s, a.Response.StatusCode)
		} else {
			s = append(s, 0)
		}
	}
	return s
}

// routes returns the route each recorded attempt took.
func (r *recorder) routes() []int {
	var rs []int
	for _, a := range r.All() {
		rs = append(rs, a.Route)
	}
	return rs
}

// discardBody reads req's body to the end and closes it, as a server
// would: for an in-memory provider that answers without looking at it.
func discardBody(req *http.Request) {
	if req.Body != nil {
		_, _ = io.Copy(io.Discard, req.Body)
		req.Body.Close()
	}
}

// stripShouldRetry is a RoundTripper that removes X-Should-Retry from every
// response of next: it stands for an llmretry that did not mark the
// responses it gave up on, to show what the mark prevents.
type stripShouldRetry struct{ next http.RoundTripper }

func (s stripShouldRetry) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := s.next.RoundTrip(req)
	if resp != nil {
		resp.Header = resp.Header.Clone()
		resp.Header.Del("X-Should-Retry")
	}
	return resp, err
}
