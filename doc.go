// Package llmretry keeps AI agents working through model-provider outages.
//
// A Transport is an http.RoundTripper that sends a failed model request
// again after a wait, for as long as the request's deadline allows while
// leaving a reserve, honouring the waits providers ask for. Put it under any
// http.Client, including the ones vendor SDKs (openai-go, anthropic-sdk-go,
// genai) accept:
//
//	rt, err := llmretry.New(nil, llmretry.Policy{
//		Waits:   []time.Duration{15 * time.Second, 45 * time.Second, 2 * time.Minute},
//		Reserve: time.Minute,
//	})
//	client := &http.Client{Transport: rt}
//
// When one client carries many concurrent calls to a provider,
// NewCoordinated makes them share what they learn: during an outage one
// call at a time probes the provider while the others are held, and all
// go again within seconds of its recovery.
//
// A request that works the first time costs next to nothing: the retry
// machinery (github.com/hashicorp/go-retryablehttp, with this package's own
// CheckRetry and Backoff) is set up only after a first attempt fails.
package llmretry

// This file holds only the package documentation above; it has no code, so
// it has no test file of its name.
