// Package credential holds what both the core of llmretry and its
// coordination engine know of the credentials a request carries: the
// headers model providers read API keys from, and AWS Signature Version 4
// (its access key ID, and when a request was signed). The core uses them to
// bound a signed request's retries and to redact; the engine to name a
// provider key. Nothing here keeps a credential.
package credential
