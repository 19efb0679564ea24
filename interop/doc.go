// Package interop holds tests, and only tests, that drive llmretry under the
// real vendor SDKs and clients — openai-go, anthropic-sdk-go, genai,
// sashabaranov/go-openai, langchaingo and aws-sdk-go-v2's bedrockruntime —
// and benchmarks it against its peers (go-retryablehttp, failsafe-go).
//
// It is a module of its own so that llmretry's go.mod keeps a single
// dependency (go-retryablehttp): the SDKs and the peers are needed here
// only. Run it from this directory:
//
//	go test -race ./...
//	go test -run '^$' -bench Peers -benchmem -count 6 .
//
// The scripted fake provider and its replies are internal/testkit's; the
// SDK clients wired to it live in provider_test.go; the recipes the tests
// prove are in docs/clients.md.
package interop
