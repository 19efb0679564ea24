// Package ratehdr reads the values of providers' rate-limit headers, as
// both the core of llmretry (a 429's wait, ratelimit.go) and its
// coordination engine (a spent limit's pace) read them: counts, Go
// durations and instants in Unix time.
package ratehdr
