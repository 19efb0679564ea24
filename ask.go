package llmretry

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// Question is what a Person is asked once a call's retries run out: try
// again or not. A host (a terminal, a chat UI, a web page) receives it from
// Person.Questions, shows it (String says what failed and how often,
// without credentials) and calls Answer.
//
// The zero Question asks nothing: its Answer does nothing and its Done
// channel is nil. Answer, Done and String are safe for concurrent use.
// Exhausted belongs to the call that asks: the host may read it until it
// answers or Done closes (String stays usable after that), and must never
// modify it nor read or close Exhausted.Response.Body, which belongs to
// the caller of RoundTrip.
type Question struct {
	// Exhausted is the call that gave up: its request (nil for Do), the
	// number of attempts so far and the last response or error.
	Exhausted *Exhausted

	answer chan bool       // buffered, one slot; nil for the zero Question
	done   <-chan struct{} // the asking call's context's Done
	once   sync.Once       // only the first Answer counts
	text   string          // String's text, made when the question is asked
}

// Answer answers the question: retry true runs another round of the
// policy's schedule, false gives up and returns the last result. Only the
// first call counts; Answer never blocks, and answering a question whose
// call has already ended (see Done) does nothing.
func (q *Question) Answer(retry bool) {
	if q == nil || q.answer == nil {
		return
	}
	q.once.Do(func() { q.answer <- retry })
}

// Done returns a channel that is closed when the question is withdrawn:
// the asking call's context ended, or its deadline less its Reserve
// passed, so the call no longer waits for an answer and the host can stop
// showing it. It returns nil (a channel that
// never closes) for a call whose context cannot end.
func (q *Question) Done() <-chan struct{} {
	if q == nil {
		return nil
	}
	return q.done
}

// String says what failed and how often, on one line, for a person: for
// example "POST https://api.openai.com/v1/chat/completions failed 3 times;
// last: 503 Service Unavailable". It never shows the URL's query, its user
// information or any header, and it blanks credential-like query values
// (key=, token=, …) that an error text may carry.
func (q *Question) String() string {
	if q == nil {
		return "<nil question>"
	}
	if q.text == "" && q.Exhausted != nil {
		return describe(q.Exhausted)
	}
	return q.text
}

// describe renders e for a person, without credentials.
func describe(e *Exhausted) string {
	what := "a call"
	if e.Request != nil {
		what = e.Request.Method + " " + redactURL(e.Request.URL)
	}
	s := fmt.Sprintf("%s failed %d %s", what, e.Attempts, plural(e.Attempts, "time"))
	switch {
	case e.Err != nil:
		s += "; last: " + e.redact(e.Err)
	case e.Response != nil:
		s += "; last: " + e.Response.Status
	}
	return s
}

// Person puts the question of Policy.OnExhausted to a person through a
// host: set OnExhausted to the Person's Ask, which sends a *Question on the
// channel Questions returns and waits for its Answer. A question nobody
// receives or answers ends, as a no, with the asking call's context or
// once its deadline less its Reserve has passed; so give the calls a
// deadline, or make sure the host always listens.
//
// The zero Person is ready to use; a nil *Person answers no at once. A Person is safe for concurrent use by any
// number of calls and host goroutines, and must not be copied after first
// use. It starts no goroutine: Ask blocks the call that asks, and returns
// no later than the context it is given ends (see Policy.OnExhausted).
type Person struct {
	once      sync.Once
	questions chan *Question
}

// Questions returns the channel on which the host receives questions, one
// per call whose retries ran out (and per round, if the person keeps
// saying yes). The channel is never closed; it is the same channel on
// every call. A nil *Person returns nil.
func (p *Person) Questions() <-chan *Question {
	if p == nil {
		return nil
	}
	return p.ch()
}

// Ask puts e to the person and returns the answer: true for another round.
// It returns false if ctx ends before a host receives the question or
// before the question is answered. It is a Policy.OnExhausted, called by
// the Transport and Do; hosts need not call it.
func (p *Person) Ask(ctx context.Context, e *Exhausted) bool {
	if p == nil || e == nil {
		return false
	}
	q := &Question{Exhausted: e, answer: make(chan bool, 1), done: ctx.Done(), text: describe(e)}
	select {
	case p.ch() <- q:
	case <-ctx.Done():
		return false
	}
	select {
	case retry := <-q.answer:
		return retry && ctx.Err() == nil
	case <-ctx.Done():
		return false
	}
}

// ch returns the question channel, made on first use.
func (p *Person) ch() chan *Question {
	p.once.Do(func() { p.questions = make(chan *Question) })
	return p.questions
}

// The rounds, one implementation for a Transport's calls (call.go) and
// Do's (do.go): a call runs its schedule's retries in rounds; once a
// round's retries are spent, Policy.OnExhausted is asked whether to run
// another, and a yes starts it with an attempt at once (or when what is
// left of the server's wait ends), then the schedule's retries from the
// first, under the same limits.

// rounds is the state of a call's rounds, embedded in the call that runs
// them. It belongs to the call's goroutine.
type rounds struct {
	lim     limits        // when the call sends nothing more
	n       int           // attempts made, across rounds
	retries int           // retries taken in the current round
	again   bool          // OnExhausted said yes: the next attempt goes at once
	server  time.Time     // when the latest server wait ends; zero if none
	wait    time.Duration // the wait before the next attempt, as decided
	why     stop          // why the latest round stopped
}

// rounder is a call that runs in rounds: a Transport's call, or Do's.
type rounder interface {
	// round runs the current round's attempts until one is not retried,
	// and says why.
	round() stop
	// exhausted returns the record OnExhausted is shown when the round's
	// retries are spent.
	exhausted() *Exhausted
	// nextRound starts the next round (rounds' own).
	nextRound()
	// limits returns the call's limits (rounds' own).
	limits() limits
}

// runRounds runs r's rounds: once per round whose retries are spent, ask
// (the policy's OnExhausted) is asked whether to run another (a done
// context counts as no, before or after it answers). The question's
// context ends with ctx or at the call's latest instant, whichever comes
// first: a yes after that could send nothing. It returns when a round
// stops for another reason, ctx ends, ask is nil or says no; r keeps the
// outcome.
func runRounds(ctx context.Context, ask func(context.Context, *Exhausted) bool, r rounder) {
	for r.round() == stopSpent && ask != nil && ctx.Err() == nil {
		if !askWithin(ctx, r.limits().latest(), ask, r.exhausted()) || ctx.Err() != nil {
			return
		}
		r.nextRound()
	}
}

// askWithin asks ask about e under ctx, withdrawn once latest has passed
// (zero: only when ctx ends); a yes once the question is withdrawn counts
// as no. (The question's deadline is the instant after latest: a yes at
// latest itself may still send, as limits.allows says.)
func askWithin(ctx context.Context, latest time.Time, ask func(context.Context, *Exhausted) bool, e *Exhausted) bool {
	if !latest.IsZero() {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, latest.Add(time.Nanosecond))
		defer cancel()
	}
	return ask(ctx, e) && ctx.Err() == nil
}

// limits returns the call's limits.
func (s *rounds) limits() limits { return s.lim }

// nextRound starts the round after OnExhausted's yes: its first attempt goes
// at once (see atOnce), then the schedule's retries from the first.
func (s *rounds) nextRound() {
	s.retries, s.why, s.again = 0, stopNone, true
}

// atOnce decides the attempt that follows OnExhausted's yes: at once, or when
// the server's wait ends, if the call's limits allow it then. It leaves
// the wait in s.wait, or why no attempt follows in s.why.
func (s *rounds) atOnce() bool {
	s.again = false
	now := time.Now()
	wait := max(0, s.server.Sub(now))
	if s.why = s.lim.allows(now.Add(wait)); s.why != stopNone {
		return false
	}
	s.wait = wait
	return true
}
