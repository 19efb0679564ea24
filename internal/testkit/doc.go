// Package testkit is what the tests of this repository's modules share:
// non-test code that only tests import (the interop, otelretry and
// redisstore modules' included, which may import it as they live under
// this module's path). Provider is the one scripted fake model provider,
// in memory or over the wire; Reply is one of its answers, and the
// provider-shaped replies (OpenAI, Anthropic, Gemini, Bedrock) are its
// vocabulary. Store wraps any store.Store to count, observe and misbehave
// as a test asks; Log collects what a callback is told.
//
// Nothing here is for production: no guarantee is kept across versions.
package testkit
