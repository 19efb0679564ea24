// Package fleet runs a crowd of calls as several processes against one
// fake provider, for the fleet tests and the demo: the parent serves the
// provider and starts the processes (Spawn); each process makes its calls
// through its own coordinated Transport (Run) and prints what became of
// them.
package fleet

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"time"
)

// Answer is what the provider says to one request: a status, and a
// Retry-After value if not empty.
type Answer struct {
	Status     int
	RetryAfter string
}

// Request is one request the provider received.
type Request struct {
	At     time.Time // when it arrived
	Proc   int       // the process that sent it (-1 if unknown)
	Status int       // what it was answered
}

// Provider is a fake model provider on 127.0.0.1 whose answers follow a
// function of the time and the requests seen before. It records every
// request. Safe for concurrent use.
type Provider struct {
	URL string
	srv *httptest.Server

	mu     sync.Mutex
	answer func(at time.Time, seen []Request) Answer
	reqs   []Request
}

// NewProvider starts a provider that answers as answer says, called under
// the provider's lock with the requests seen so far.
func NewProvider(answer func(at time.Time, seen []Request) Answer) *Provider {
	p := &Provider{answer: answer}
	p.srv = httptest.NewServer(http.HandlerFunc(p.handle))
	p.URL = p.srv.URL
	return p
}

// Outage returns an answer function: status from start for d, then 200.
func Outage(start time.Time, d time.Duration, status int) func(time.Time, []Request) Answer {
	return func(at time.Time, _ []Request) Answer {
		if !at.Before(start) && at.Before(start.Add(d)) {
			return Answer{Status: status}
		}
		return Answer{Status: http.StatusOK}
	}
}

func (p *Provider) handle(w http.ResponseWriter, r *http.Request) {
	_, _ = io.Copy(io.Discard, r.Body)
	proc, err := strconv.Atoi(r.Header.Get(procHeader))
	if err != nil {
		proc = -1
	}
	p.mu.Lock()
	at := time.Now()
	a := p.answer(at, p.reqs)
	p.reqs = append(p.reqs, Request{At: at, Proc: proc, Status: a.Status})
	p.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	if a.RetryAfter != "" {
		w.Header().Set("Retry-After", a.RetryAfter)
	}
	w.WriteHeader(a.Status)
	if a.Status == http.StatusOK {
		io.WriteString(w, `{"choices":[{"message":{"role":"assistant","content":"back"}}]}`)
	} else {
		io.WriteString(w, `{"error":{"message":"upstream connect error"}}`)
	}
}

// Requests returns the requests received so far, in order of arrival.
func (p *Provider) Requests() []Request {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]Request(nil), p.reqs...)
}

// Close stops the provider.
func (p *Provider) Close() { p.srv.Close() }
