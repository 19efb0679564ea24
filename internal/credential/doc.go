// Package credential is llmretry's one list of the credentials a request
// may carry, and what is done with them: the headers (headers.go) and the
// query parameters (params.go) that carry one, which of them name the
// provider key coordination counts by, the redaction of a text or a URL
// (redact.go: the core's error texts and log lines, otelretry's url.full),
// the removal of the primary's credentials from the request a fallback
// route gets (Strip), and AWS Signature Version 4 (sigv4.go: its access
// key ID, and when a request was signed). The core of llmretry, its
// coordination engine (internal/coord) and otelretry all read them here,
// so that a span never shows a value a log line blanks and a route never
// carries a credential a log line would blank. Nothing here keeps a
// credential.
package credential
