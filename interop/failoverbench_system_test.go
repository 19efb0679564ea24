package interop

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/llmretry/llmretry"
	"github.com/openai/openai-go/v3"
	oaoption "github.com/openai/openai-go/v3/option"
)

// This file is the system under test: openai-go, its own retries off,
// over an http.Client whose Transport is llmretry configured as a host
// would configure it, the way failoverbench configures every system it
// scores (its METHODOLOGY.md's baseline: a 30-s request and stream-idle
// timeout, one fallback model; the catalogue's bound of 6 attempts), or
// with the README's fallback set-up as it is (issue 30), with a deadline
// from the scenario's budget on every call.

// The primary and the fallback: two hosts of the wall, each with its own
// API key, so that the run also shows no primary credential reaching the
// fallback's host.
const (
	fbPrimaryBase  = "https://primary.wall.test/v1"
	fbFallbackBase = "https://fallback.wall.test/v1"
	fbPrimaryKey   = "sk-fb-primary-5f0c2a"
	fbFallbackKey  = "sk-fb-fallback-91d7e4"
)

// fbHost is the host's configuration common to every row: what it sets
// and why is docs/failoverbench.md's "Configuration".
func fbHost() llmretry.Policy {
	return llmretry.Policy{
		RetryStreams: true,
		// The catalogue bounds a call at 6 attempts (S02, S04, S16):
		// 5 retries after the first try.
		MaxRetries: 5,
		// A fixed schedule, the reference client's 0.5 s doubling without
		// its jitter: at most 3 attempts in S02's 3-s window, where the
		// default full jitter may draw five waits near zero.
		Waits: []time.Duration{500 * time.Millisecond, time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second},
		// The baseline's 30-s request timeout: the wait for headers.
		AttemptTimeout: 30 * time.Second,
		// The baseline's 30-s stream-idle timeout, for the stream the
		// caller reads.
		StreamIdleTimeout: 30 * time.Second,
		// The baseline's stream-idle timeout also bounds the silence
		// before the first token; with a fallback the host sets a
		// time-to-first-token limit instead (fbWithFallback).
		FirstEventTimeout: 30 * time.Second,
	}
}

// fbTTFTLimit is the host's time-to-first-token limit with a fallback:
// the reference client's. A first token later than this is looked for on
// the fallback.
const fbTTFTLimit = 10 * time.Second

// fbStayOnPrimary is Policy.FallbackAfter with a fallback: the primary
// keeps a call for its first second, so a transient failure (S03's 500,
// S05's reset) is retried there 0.5 s later, and a provider still failing
// after a second is left (S04, S16: a third failure at 1.5 s moves the
// call).
const fbStayOnPrimary = time.Second

// fbWithFallback returns the host's policy with one fallback route: the
// same API on the fallback host, its own key, and model as the model.
func fbWithFallback(model string) (llmretry.Policy, error) {
	to, err := fbToFallback()
	if err != nil {
		return llmretry.Policy{}, err
	}
	p := fbHost()
	p.FirstEventTimeout = fbTTFTLimit
	p.Fallback = []llmretry.Route{fbModelRoute(to, model)}
	p.FallbackAfter = fbStayOnPrimary
	return p, nil
}

// fbToFallback is the route to the fallback's host with its own key.
func fbToFallback() (llmretry.Route, error) {
	return llmretry.RouteTo(fbPrimaryBase, fbFallbackBase, http.Header{"Authorization": {"Bearer " + fbFallbackKey}})
}

// fbLongModel is the long-context route's model: the wall's model that
// answers, the larger window S12's model lacks.
const fbLongModel = fbDefaultFallback

// fbReadme returns the README's fallback set-up for the wall: the policy
// the README's snippet makes, Policy{Fallback: routes, RetryStreams:
// true}, every other field zero (the schedule's jittered waits, 6
// retries, no attempt, first-event or stream-idle bound), with the route
// the host's rows take; with long, a long-context route too, to the
// larger window on the fallback's host and key.
func fbReadme(long bool) func(model string) (llmretry.Policy, error) {
	return func(model string) (llmretry.Policy, error) {
		to, err := fbToFallback()
		if err != nil {
			return llmretry.Policy{}, err
		}
		routes := []llmretry.Route{fbModelRoute(to, model)}
		p := llmretry.Policy{Fallback: routes, RetryStreams: true}
		if long {
			p.LongContext = []llmretry.Route{fbModelRoute(to, fbLongModel)}
		}
		return p, nil
	}
}

// fbStallLimit is the stream-idle timeout of the rows that continue a
// cut stream: the reference client's stall limit (its stall_limit_s). A
// stall is now continued rather than ended, and the wall stalls a
// continuation too (20 words into it, as wall.py counts a continuation's
// words): with the baseline's 30 s, S09's two stalls alone pass its 45-s
// bound (see "What each choice changes").
const fbStallLimit = 10 * time.Second

// fbContinued returns policy with ContinueStreams (issue 29): a stream
// cut after content reached the caller is continued, spliced into the
// body the caller reads, with fbStallLimit as its stream-idle timeout.
func fbContinued(policy func(string) (llmretry.Policy, error)) func(string) (llmretry.Policy, error) {
	return func(model string) (llmretry.Policy, error) {
		p, err := policy(model)
		p.ContinueStreams = true
		p.StreamIdleTimeout = fbStallLimit
		return p, err
	}
}

// fbWithLongContext returns the host's policy with one fallback route and
// a long-context route (issue 30) to the larger window on the fallback's
// host and key.
func fbWithLongContext(model string) (llmretry.Policy, error) {
	p, err := fbWithFallback(model)
	if err != nil {
		return p, err
	}
	to, err := fbToFallback()
	if err != nil {
		return llmretry.Policy{}, err
	}
	p.LongContext = []llmretry.Route{fbModelRoute(to, fbLongModel)}
	return p, nil
}

// fbModelRoute returns route with the JSON body's "model" set to model: a
// fallback to another model, as a host configures one.
func fbModelRoute(route llmretry.Route, model string) llmretry.Route {
	name, _ := json.Marshal(model)
	return func(r *http.Request) (*http.Request, error) {
		r, err := route(r)
		if err != nil {
			return nil, err
		}
		if r.Body == nil || r.Body == http.NoBody {
			return nil, errors.New("fallback route: no body to set the model in")
		}
		raw, err := io.ReadAll(r.Body)
		r.Body.Close()
		if err != nil {
			return nil, fmt.Errorf("fallback route: reading the body: %w", err)
		}
		var body map[string]json.RawMessage
		if err := json.Unmarshal(raw, &body); err != nil {
			return nil, fmt.Errorf("fallback route: the body is not a JSON object: %w", err)
		}
		body["model"] = name
		out, err := json.Marshal(body)
		if err != nil {
			return nil, fmt.Errorf("fallback route: %w", err)
		}
		r.Body = io.NopCloser(bytes.NewReader(out))
		r.ContentLength = int64(len(out))
		r.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(out)), nil }
		return r, nil
	}
}

// fbRow is a row of our scorecard: a system under test.
type fbRow struct {
	name        string
	hasFallback bool // the capability failoverbench asks a system to declare
	// policy returns the row's policy for a scenario whose fallback model
	// is fallbackModel.
	policy func(fallbackModel string) (llmretry.Policy, error)
}

// transport returns the row's llmretry Transport over wall.
func (r fbRow) transport(wall http.RoundTripper, fallbackModel string) (http.RoundTripper, error) {
	p, err := r.policy(fallbackModel)
	if err != nil {
		return nil, err
	}
	return llmretry.New(wall, p)
}

// jittered reports whether the row's schedule draws its waits (no
// Waits): its figures change from run to run, so each of its cells is run
// fbJitterRuns times.
func (r fbRow) jittered() bool {
	p, err := r.policy(fbDefaultFallback)
	return err == nil && len(p.Waits) == 0
}

// fbRows are our rows: llmretry configured as a host, with one fallback
// and without; the README's fallback set-up with a long-context route, and
// without; and the host's rows that continue a cut stream (issue 29): no
// route, one fallback, one fallback and a long-context route.
var fbRows = []fbRow{
	{name: "llmretry + 1 fallback", hasFallback: true, policy: fbWithFallback},
	{name: "llmretry, no fallback", policy: fbHostAlone},
	{name: "llmretry, README set-up + long context", hasFallback: true, policy: fbReadme(true)},
	{name: "llmretry, README set-up", hasFallback: true, policy: fbReadme(false)},
	{name: fbContinuedAlone, policy: fbContinued(fbHostAlone)},
	{name: fbContinuedFallback, hasFallback: true, policy: fbContinued(fbWithFallback)},
	{name: fbContinuedLong, hasFallback: true, policy: fbContinued(fbWithLongContext)},
}

// The rows that continue a cut stream, by name.
const (
	fbContinuedAlone    = "llmretry + ContinueStreams, no fallback"
	fbContinuedFallback = "llmretry + ContinueStreams + 1 fallback"
	fbContinuedLong     = "llmretry + ContinueStreams + 1 fallback + long context"
)

// fbHostAlone is the host's policy without a fallback.
func fbHostAlone(string) (llmretry.Policy, error) { return fbHost(), nil }

// fbClient is openai-go as the host uses it: the primary's base URL and
// key, rt as its HTTP transport, and no retries of its own (llmretry
// retries).
func fbClient(rt http.RoundTripper) openai.Client {
	return openai.NewClient(
		oaoption.WithBaseURL(fbPrimaryBase+"/"),
		oaoption.WithAPIKey(fbPrimaryKey),
		oaoption.WithHTTPClient(&http.Client{Transport: rt}),
		oaoption.WithMaxRetries(0),
	)
}

// fbChat makes one chat completion of model through client, as
// failoverbench's openai adapter does: a stream asks for usage, and the
// caller keeps the content, the last reported model and the usage block
// it read, even from a stream that failed. It leaves elapsed to the
// runner.
func fbChat(ctx context.Context, client openai.Client, model string, stream bool) fbResult {
	params := openai.ChatCompletionNewParams{
		Model:    model,
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage(fbPrompt)},
	}
	if !stream {
		got, err := client.Chat.Completions.New(ctx, params)
		if err != nil {
			return fbResult{outcome: fbError, err: err.Error()}
		}
		r := fbResult{outcome: fbSuccess, model: got.Model}
		if len(got.Choices) > 0 {
			r.content = got.Choices[0].Message.Content
		}
		if got.JSON.Usage.Valid() {
			r.usage = &fbUsage{PromptTokens: int(got.Usage.PromptTokens), CompletionTokens: int(got.Usage.CompletionTokens), TotalTokens: int(got.Usage.TotalTokens)}
		}
		return r
	}
	params.StreamOptions = openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)}
	s := client.Chat.Completions.NewStreaming(ctx, params)
	defer s.Close()
	var r fbResult
	var text bytes.Buffer
	for s.Next() {
		c := s.Current()
		if c.Model != "" {
			r.model = c.Model
		}
		if c.JSON.Usage.Valid() {
			r.usage = &fbUsage{PromptTokens: int(c.Usage.PromptTokens), CompletionTokens: int(c.Usage.CompletionTokens), TotalTokens: int(c.Usage.TotalTokens)}
		}
		for _, ch := range c.Choices {
			text.WriteString(ch.Delta.Content)
		}
	}
	r.content = text.String()
	if err := s.Err(); err != nil {
		r.outcome, r.err = fbError, err.Error()
	}
	return r
}
