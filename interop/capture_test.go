package interop

// Captures of the requests the clients really send, kept in
// ../testdata/clients/ for the root package's stream-detection tests.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/bedrockruntime"
	"github.com/llmretry/llmretry/internal/testkit"
	goopenai "github.com/sashabaranov/go-openai"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/tmc/langchaingo/llms"
)

// writeClientsEnv, set to 1, makes TestClientRequestCaptures rewrite the
// captures instead of comparing with them.
const writeClientsEnv = "LLMRETRY_WRITE_CLIENTS"

// capturesDir holds the captures, in the root module's testdata.
const capturesDir = "../testdata/clients"

// regenerate is the hint a stale capture fails with.
const regenerate = "if the client changed on purpose, regenerate: cd interop && " + writeClientsEnv + "=1 go test -run TestClientRequestCaptures -count=1 ."

// credentialHeaders are removed from every capture.
var credentialHeaders = []string{"Authorization", "X-Api-Key", "Api-Key", "X-Goog-Api-Key", "Cookie", "X-Amz-Security-Token"}

// volatileHeaders change from run to run or machine to machine; a capture
// keeps them with these fixed values.
var volatileHeaders = map[string]string{
	"User-Agent":              "llmretry-capture",
	"X-Amz-User-Agent":        "llmretry-capture",
	"X-Amz-Date":              "20250101T000000Z",
	"Amz-Sdk-Invocation-Id":   "00000000-0000-4000-8000-000000000000",
	"X-Stainless-Os":          "Linux",
	"X-Stainless-Arch":        "x64",
	"X-Stainless-Runtime":     "go",
	"X-Stainless-Retry-Count": "0",
}

// longPrompt is a user prompt of more than 8 KiB: an incident log to
// summarise. It pushes whatever a client writes after the messages past
// the first 4 KiB of the body.
func longPrompt() string {
	var b strings.Builder
	b.WriteString("Summarise this gateway log in two sentences.\n")
	for i := 0; b.Len() <= 9<<10; i++ {
		fmt.Fprintf(&b, "2025-03-10T09:%02d:%02dZ gateway: upstream returned 502 Bad Gateway for POST /v1/chat/completions (attempt %d)\n", i/60, i%60, i%4+1)
	}
	return b.String()
}

// capture is one client operation whose request is kept.
type capture struct {
	name string // file name without .http; ends in _stream or _nostream
	host string // the fixed dummy Host of the capture
	// answer is what the in-memory provider replies, so that the client
	// completes its operation as in real use.
	answer testkit.Reply
	// run drives the client through rt.
	run func(t *testing.T, rt http.RoundTripper) error

	// How the client builds the request.
	getBody  bool
	bodyType string
	accept   string // the Accept header ("" for none)
	stream   string // the body's top-level "stream" member ("" for none)
	// midBody: "stream" lies more than 8 KiB into the body and other
	// members follow it, so it is in neither the first nor the last 4 KiB
	// as the last member.
	midBody bool
}

// captures lists every client operation kept in testdata/clients.
func captures() []capture {
	chat := goopenai.ChatCompletionRequest{
		Model:    openAIModel,
		Messages: []goopenai.ChatCompletionMessage{{Role: goopenai.ChatMessageRoleUser, Content: "Say hello."}},
	}
	long := []llms.MessageContent{llms.TextParts(llms.ChatMessageTypeHuman, longPrompt())}
	ignore := func(context.Context, []byte) error { return nil }
	return []capture{
		{
			name: "goopenai_chat_nostream", host: "api.openai.test", answer: testkit.OpenAIChatCompletion("Hello!"),
			run: func(_ *testing.T, rt http.RoundTripper) error {
				_, err := goOpenAIClient(fakeOpenAIURL, rt).CreateChatCompletion(context.Background(), chat)
				return err
			},
			getBody: true, bodyType: "io.nopCloserWriterTo wrapping *bytes.Buffer", accept: "application/json", stream: "false",
		},
		{
			name: "goopenai_chat_stream", host: "api.openai.test", answer: testkit.OpenAIChatStream("Hel", "lo!"),
			run: func(_ *testing.T, rt http.RoundTripper) error {
				stream, err := goOpenAIClient(fakeOpenAIURL, rt).CreateChatCompletionStream(context.Background(), chat)
				if err != nil {
					return err
				}
				defer stream.Close()
				for {
					if _, err := stream.Recv(); err != nil {
						if err == io.EOF {
							return nil
						}
						return err
					}
				}
			},
			getBody: true, bodyType: "io.nopCloserWriterTo wrapping *bytes.Buffer", accept: "text/event-stream", stream: "true",
		},
		{
			name: "langchaingo_openai_nostream", host: "api.openai.test", answer: testkit.OpenAIChatCompletion("Hello!"),
			run: func(t *testing.T, rt http.RoundTripper) error {
				_, err := langchainOpenAI(t, fakeOpenAIURL, rt).GenerateContent(context.Background(), long)
				return err
			},
			getBody: true, bodyType: "io.nopCloserWriterTo wrapping *bytes.Reader",
		},
		{
			name: "langchaingo_openai_stream", host: "api.openai.test", answer: testkit.OpenAIChatStream("Hel", "lo!"),
			run: func(t *testing.T, rt http.RoundTripper) error {
				_, err := langchainOpenAI(t, fakeOpenAIURL, rt).GenerateContent(context.Background(), long, llms.WithStreamingFunc(ignore))
				return err
			},
			getBody: true, bodyType: "io.nopCloserWriterTo wrapping *bytes.Reader",
			stream: "true", midBody: true,
		},
		{
			name: "langchaingo_anthropic_nostream", host: "api.anthropic.test", answer: testkit.AnthropicMessage("Hello!"),
			run: func(t *testing.T, rt http.RoundTripper) error {
				_, err := langchainAnthropic(t, fakeAnthropicURL+"v1", rt).GenerateContent(context.Background(), long, llms.WithMaxTokens(256))
				return err
			},
			getBody: true, bodyType: "io.nopCloserWriterTo wrapping *bytes.Reader",
		},
		{
			name: "langchaingo_anthropic_stream", host: "api.anthropic.test", answer: testkit.AnthropicStream("Hel", "lo!"),
			run: func(t *testing.T, rt http.RoundTripper) error {
				_, err := langchainAnthropic(t, fakeAnthropicURL+"v1", rt).GenerateContent(context.Background(), long, llms.WithMaxTokens(256), llms.WithStreamingFunc(ignore))
				return err
			},
			getBody: true, bodyType: "io.nopCloserWriterTo wrapping *bytes.Reader",
			stream: "true", midBody: true,
		},
		{
			name: "bedrock_converse_nostream", host: "bedrock-runtime.us-east-1.amazonaws.test", answer: testkit.BedrockConverse("Hello!"),
			run: func(_ *testing.T, rt http.RoundTripper) error {
				_, err := bedrockClient(rt, noAWSRetries).Converse(context.Background(), bedrockConverseInput())
				return err
			},
			bodyType: "*io.safeWriteToReadCloser wrapping *io.safeReadCloser",
		},
		{
			name: "bedrock_conversestream_stream", host: "bedrock-runtime.us-east-1.amazonaws.test", answer: bedrockConverseStream("Hel", "lo!"),
			run: func(_ *testing.T, rt http.RoundTripper) error {
				out, err := bedrockClient(rt, noAWSRetries).ConverseStream(context.Background(), bedrockConverseStreamInput())
				if err != nil {
					return err
				}
				return drainConverseStream(out)
			},
			bodyType: "*io.safeWriteToReadCloser wrapping *io.safeReadCloser",
		},
		{
			name: "bedrock_invokemodel_nostream", host: "bedrock-runtime.us-east-1.amazonaws.test", answer: testkit.BedrockInvoke("Hello!"),
			run: func(_ *testing.T, rt http.RoundTripper) error {
				_, err := bedrockClient(rt, noAWSRetries).InvokeModel(context.Background(), &bedrockruntime.InvokeModelInput{
					ModelId: aws.String(bedrockModel), ContentType: aws.String("application/json"), Accept: aws.String("application/json"),
					Body: []byte(bedrockInvokeBody),
				})
				return err
			},
			bodyType: "*io.safeWriteToReadCloser wrapping *io.safeReadCloser", accept: "application/json",
		},
		{
			name: "bedrock_invokemodelwithresponsestream_stream", host: "bedrock-runtime.us-east-1.amazonaws.test", answer: bedrockInvokeStream("Hel", "lo!"),
			run: func(_ *testing.T, rt http.RoundTripper) error {
				out, err := bedrockClient(rt, noAWSRetries).InvokeModelWithResponseStream(context.Background(), &bedrockruntime.InvokeModelWithResponseStreamInput{
					ModelId: aws.String(bedrockModel), ContentType: aws.String("application/json"), Accept: aws.String("application/json"),
					Body: []byte(bedrockInvokeBody),
				})
				if err != nil {
					return err
				}
				return drainInvokeStream(out)
			},
			bodyType: "*io.safeWriteToReadCloser wrapping *io.safeReadCloser",
		},
	}
}

// The request each client really sends, against the committed capture in
// testdata/clients (or rewritten there with LLMRETRY_WRITE_CLIENTS=1). It
// also pins how the client builds the request: GetBody, the body's Go type,
// ContentLength and the Accept header, which decide how llmretry can
// replay the body and tell a stream.
func TestClientRequestCaptures(t *testing.T) {
	write := os.Getenv(writeClientsEnv) == "1"
	for _, c := range captures() {
		t.Run(c.name, func(t *testing.T) {
			prov := testkit.NewProvider(c.answer)
			require.NoError(t, c.run(t, prov), "the client completes its operation against the fake provider")
			require.Equal(t, 1, prov.Attempts())
			got := prov.Received()[0]

			assert.Equal(t, c.getBody, got.GetBody, "GetBody set")
			if c.bodyType != "" {
				assert.Equal(t, c.bodyType, got.BodyType, "the body's Go type")
			}
			assert.Equal(t, int64(len(got.Body)), got.ContentLength, "ContentLength is the body's length")
			assert.Equal(t, c.accept, got.Header.Get("Accept"))
			var members map[string]json.RawMessage
			require.NoError(t, json.Unmarshal([]byte(got.Body), &members))
			assert.Equal(t, c.stream, string(members["stream"]), "the body's \"stream\" member")
			if c.midBody {
				at := strings.Index(got.Body, `"stream":true`)
				assert.Greater(t, at, 8<<10, "\"stream\" comes after more than 8 KiB")
				assert.False(t, strings.HasSuffix(got.Body, `"stream":true}`), "\"stream\" is not the last member")
			}
			t.Logf("GetBody %v, Body %s, ContentLength %d, Accept %q, %s",
				got.GetBody, got.BodyType, got.ContentLength, got.Header.Get("Accept"), streamPosition(got.Body))

			dump := dumpCapture(t, got, c.host)
			for _, secret := range []string{dummyOpenAIKey, dummyAnthropicKey, dummyAWSKeyID, dummyAWSSecret} {
				require.NotContains(t, string(dump), secret, "no credential in a capture")
			}
			path := filepath.Join(capturesDir, c.name+".http")
			if write {
				require.NoError(t, os.MkdirAll(capturesDir, 0o755))
				require.NoError(t, os.WriteFile(path, dump, 0o644))
				return
			}
			want, err := os.ReadFile(path)
			require.NoError(t, err, regenerate)
			wantReq := parseCapture(t, want)
			gotReq := parseCapture(t, dump)
			assert.Equal(t, wantReq.Method, gotReq.Method, regenerate)
			assert.Equal(t, wantReq.URL.RequestURI(), gotReq.URL.RequestURI(), regenerate)
			for _, h := range []string{"Accept", "Content-Type"} {
				assert.Equal(t, wantReq.Header.Values(h), gotReq.Header.Values(h), "%s; %s", h, regenerate)
			}
			assert.JSONEq(t, readBody(t, wantReq), readBody(t, gotReq), regenerate)
		})
	}
}

// dumpCapture renders what reached the provider in HTTP/1.1 wire format,
// as httputil.DumpRequest does, with host as Host, credential headers
// removed and volatile ones fixed.
func dumpCapture(t *testing.T, c testkit.Call, host string) []byte {
	t.Helper()
	h := c.Header.Clone()
	for _, k := range credentialHeaders {
		h.Del(k)
	}
	for k, v := range volatileHeaders {
		if h.Get(k) != "" {
			h.Set(k, v)
		}
	}
	h.Del("Content-Length")
	req := &http.Request{
		Method:     c.Method,
		URL:        &url.URL{Path: c.Path, RawPath: c.RawPath, RawQuery: c.Query},
		Proto:      "HTTP/1.1",
		ProtoMajor: 1,
		ProtoMinor: 1,
		Host:       host,
		Header:     h,
		Body:       io.NopCloser(strings.NewReader(c.Body)),
	}
	if c.Body != "" {
		// DumpRequest writes only the headers it is given: name the length
		// so that http.ReadRequest reads the body back.
		h.Set("Content-Length", fmt.Sprint(len(c.Body)))
		req.ContentLength = int64(len(c.Body))
	}
	dump, err := httputil.DumpRequest(req, true)
	require.NoError(t, err)
	return dump
}

// parseCapture reads a capture back as a server would.
func parseCapture(t *testing.T, b []byte) *http.Request {
	t.Helper()
	req, err := http.ReadRequest(bufio.NewReader(bytes.NewReader(b)))
	require.NoError(t, err)
	return req
}

// readBody returns req's whole body.
func readBody(t *testing.T, req *http.Request) string {
	t.Helper()
	b, err := io.ReadAll(req.Body)
	require.NoError(t, err)
	return string(b)
}

// streamPosition says where a top-level "stream" member sits in body.
func streamPosition(body string) string {
	i := strings.Index(body, `"stream":`)
	if i < 0 {
		return fmt.Sprintf("no \"stream\" in the %d-byte body", len(body))
	}
	v := body[i+len(`"stream":`):]
	v = v[:strings.IndexAny(v, ",}")]
	return fmt.Sprintf("\"stream\":%s at byte %d of %d (%d bytes after it)", v, i, len(body), len(body)-i-len(`"stream":`)-len(v))
}
