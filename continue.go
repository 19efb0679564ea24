package llmretry

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/llmretry/llmretry/internal/coord"
	"github.com/llmretry/llmretry/internal/wire"
)

// This file continues a committed stream that broke (Policy.ContinueStreams):
// which way (resume, prefill, regenerate and match), the request that
// asks for the rest, and the call that sends it, an attempt of the same
// call under the same limits; the stream body that hands the rest on is
// in streaming.go.

// ErrStreamCut is the reason of a stream the caller was reading that broke
// before its completion marker — its connection reset or closed early, a
// read failed, it stalled past StreamIdleTimeout, or, with
// ContinueStreams, an error event or a line that is not JSON came in
// place of the rest — and was not continued, or whose continuation
// failed. The caller's Read returns an *Exhausted whose Reason it is, whose
// Err says how the stream broke and why it was not continued, and whose
// record GaveUp returns; never io.EOF, never a bare unexpected EOF.
var ErrStreamCut = errors.New("llmretry: the stream broke before its end")

// The ways a cut stream is continued, as Attempt.Continued names them.
var strategyNames = [...]string{wire.Resume: "resume", wire.Prefill: "prefill", wire.PrefillPrefix: "prefill", wire.Regenerate: "regenerate"}

// resumer is what continuing a committed stream needs of the call that
// committed it (its commit, whose n, retries, route, taken and at move on
// with each continuation), and what it learns on the way. It lives as
// long as the stream's body.
type resumer struct {
	commit
	committed int // the attempts made when the stream was committed: n less it continued it
	api       wire.API
	body      []byte // the request's body, read at the first cut; nil until then
}

// commit is the call that committed a stream, as continuing it needs it:
// a value, so that a call whose stream is never cut pays for none of it.
type commit struct {
	t       *Transport
	f       *flight
	base    http.RoundTripper
	p       *Policy
	req     *http.Request // the caller's
	first   *http.Request // the first attempt as sent
	at      *http.Request // the latest attempt that answered the stream (on its route); nil: first
	getBody func() (io.ReadCloser, error)
	keepers coord.Gatekeepers

	n, retries, route int   // attempts made, retries of the current round, the route that committed
	taken             []int // the routes the call took, for its record
	gaveUp            bool  // the call gave up on the response: it is handed over as it is
	learnt                  // what the call learnt of its routes, which its continuations keep
}

// commit returns the call as a committed stream needs it.
func (c *call) commit() commit {
	return commit{t: c.t, f: c.f, base: c.base, p: c.p, req: c.req, first: c.first, at: c.out, getBody: c.getBody, keepers: c.keepers,
		n: c.n, retries: c.retries, route: c.route, taken: c.routesTaken(), gaveUp: c.event != nil || c.resp.StatusCode >= 400,
		learnt: c.learnt}
}

// answer is what RoundTrip returns of a call that ended with (resp, err):
// resp as the caller gets it (see handOver).
func (c *call) answer(resp *http.Response, err error) (*http.Response, error) {
	if err != nil {
		return nil, err
	}
	return handOver(resp, c.commit()), nil
}

// resumer returns what continuing the stream cm committed needs.
func (cm commit) resumer() *resumer {
	k := &resumer{commit: cm, committed: cm.n, api: wire.APIOf(cm.req.Method, cm.req.URL)}
	if k.at == nil {
		k.at = cm.first
	}
	return k
}

// cut returns the error a stream that broke for cause, and was not
// continued for why ("" when continuing failed: cause says why), reads
// as: an *Exhausted with ErrStreamCut for Reason.
func (k *resumer) cut(cause error, why string) error {
	err := cause
	if why != "" {
		err = fmt.Errorf("not continued: %s: %w", why, cause)
	}
	return &Exhausted{Request: k.req, Attempts: k.n, Reason: ErrStreamCut, Err: err, Routes: k.taken, Continued: k.n - k.committed, sent: k.at}
}

// requestBody returns the request's body, read once (through GetBody) at
// the first cut: the prefill adds to it.
func (k *resumer) requestBody() ([]byte, error) {
	if k.body != nil || k.getBody == nil {
		return k.body, nil
	}
	rc, err := k.getBody()
	if err != nil {
		return nil, fmt.Errorf("rewinding request body: %w", err)
	}
	defer rc.Close()
	b, err := readAllSized(rc, k.first.ContentLength)
	if err != nil {
		return nil, fmt.Errorf("reading request body: %w", err)
	}
	k.body = b
	return b, nil
}

// strategy chooses how the stream st is continued on the route it was
// cut on (host, and orig the request's body): resumed, for a Responses
// stream created in the background; prefilled, where the route's API
// continues a final assistant turn and it is not known to refuse one;
// else regenerated and matched.
func (k *resumer) strategy(st *wire.Stream, host string, orig []byte) wire.Strategy {
	if _, ok := st.ResumeURL(k.first.URL); ok {
		return wire.Resume
	}
	if by, ok := k.p.ContinueBy[host]; ok {
		switch by {
		case "prefill":
			return k.unlessRefused(wire.Prefill, orig)
		case "prefix":
			return k.unlessRefused(wire.PrefillPrefix, orig)
		}
		return wire.Regenerate
	}
	switch {
	case k.api == wire.ChatCompletions && openAIHost(host):
		// api.openai.com's Chat Completions starts a final assistant
		// message over: a splice would glue a restart onto the answer.
		return wire.Regenerate
	case k.api == wire.ChatCompletions && (host == "api.deepseek.com" || host == "api.mistral.ai"):
		return k.unlessRefused(wire.PrefillPrefix, orig)
	case k.api == wire.Responses:
		return wire.Regenerate
	}
	return k.unlessRefused(wire.Prefill, orig)
}

// unlessRefused returns st, or Regenerate where the route the stream was
// cut on refused a prefill before, for its provider key and model (see
// coord.PrefillMemory).
func (k *resumer) unlessRefused(st wire.Strategy, orig []byte) wire.Strategy {
	if m := k.t.prefillMemory(); m != nil && m.RefusesPrefill(k.f, k.at, k.modelOf(k.at, k.route, orig), time.Now()) {
		return wire.Regenerate
	}
	return st
}

// modelOf returns the model req, an attempt on route, names: in its URL
// (Gemini's) or its body, the request's own (orig) on the primary, else
// the one the route made.
func (k *resumer) modelOf(req *http.Request, route int, orig []byte) string {
	body := orig
	if route != 0 && req.GetBody != nil {
		if rc, err := req.GetBody(); err == nil {
			body, _ = readAllSized(rc, req.ContentLength)
			rc.Close()
		}
	}
	return wire.ModelOf(k.api, req.URL, body)
}

// openAIHost reports whether host is OpenAI's or Azure OpenAI's.
func openAIHost(host string) bool {
	return host == "api.openai.com" || strings.HasSuffix(host, ".openai.azure.com") || strings.HasSuffix(host, ".cognitiveservices.azure.com")
}

// prefillMemory returns what remembers the provider keys and models that
// refused a prefill: a coordinated Transport's Coordinator (through its
// store, for every process that shares it), else the Transport's own; nil
// without a Transport.
func (t *Transport) prefillMemory() coord.PrefillMemory {
	if t == nil {
		return nil
	}
	if m, ok := t.keepers.(coord.PrefillMemory); ok {
		return m
	}
	return &t.refusals
}

// continuation sends the request that asks for the rest of st, cut for
// cause, and returns the response whose events, spliced, are that rest
// (a 2xx stream whose opening the guard read), with the strategy it took
// and the whitespace a prefill held back; or the error the caller's read
// fails with. It runs as an attempt of the call (its number, the call's
// retries, deadline, reserve, timeouts, coordination and routes apply),
// and falls back to regenerating from a prefill the route refuses or that
// cannot be built (wire.ErrNoPrefill).
func (k *resumer) continuation(st *wire.Stream, cause error) (*http.Response, wire.Strategy, []byte, error) {
	if why := st.Stuck(); why != "" {
		return nil, 0, nil, k.cut(cause, why)
	}
	if k.f.Context.Err() != nil {
		return nil, 0, nil, k.cut(cause, "the caller's context ended")
	}
	lim := limitsFrom(k.f.Context, k.p, k.req, k.f.start)
	if k.retries >= k.p.retryLimit(lim.hasDeadline()) {
		return nil, 0, nil, k.cut(cause, "the call's retries are spent")
	}
	if s := lim.allows(time.Now()); s != stopNone {
		// A continuation is an attempt: none is sent past the call's
		// limits (a caller that read on late, after a tool ran).
		return nil, 0, nil, k.cut(fmt.Errorf("%w: %w", s.reason(k.f.Context), cause), "")
	}
	orig, err := k.requestBody()
	if err != nil {
		return nil, 0, nil, k.cut(cause, err.Error())
	}
	if wire.SeveralChoices(k.api, orig) {
		// (Before its second choice came: a regeneration would be sent.)
		return nil, 0, nil, k.cut(cause, "the request asks for several choices")
	}
	strategy := k.strategy(st, strings.ToLower(k.at.URL.Host), orig) // the host of the route it was cut on
	for {
		req, heldBack, err := k.request(st, strategy)
		if err != nil && strategy != wire.Regenerate && errors.Is(err, wire.ErrNoPrefill) {
			// What was delivered, or the request, makes no prefill
			// (whitespace alone, extended thinking …), yet nothing
			// forbids continuing: the rest is regenerated and matched.
			strategy = wire.Regenerate
			continue
		}
		if err != nil {
			return nil, 0, nil, k.cut(cause, err.Error())
		}
		resp, refusedBy, err := k.send(req, strategy, int64(len(st.Delivered())))
		if err != nil {
			return nil, 0, nil, k.cut(err, "")
		}
		if isEventStream(resp) && resp.StatusCode < 300 {
			if ex := GaveUp(resp); ex != nil {
				// The continuation opened with an error event, and its
				// call gave up on it (a final one, or its retries
				// spent): that ends the stream, and says why.
				resp.Body.Close()
				return nil, 0, nil, k.cut(ex, "")
			}
			return resp, strategy, heldBack, nil
		}
		if refusedBy != nil {
			// Remembered for its provider key and model, and never
			// sent one again: the rest is regenerated and matched.
			resp.Body.Close()
			if m := k.t.prefillMemory(); m != nil {
				m.RefusedPrefill(k.f, refusedBy, k.modelOf(refusedBy, k.route, orig), time.Now())
			}
			strategy = wire.Regenerate
			continue
		}
		status := resp.Status
		resp.Body.Close()
		return nil, 0, nil, k.cut(fmt.Errorf("its continuation got %s", status), "")
	}
}

// refusesPrefill reports whether the latest attempt, a continuation by
// prefill whose result ends the call (judgement j), is a 400 that refuses
// the prefill; the body's first bytes are read at once and put back.
func (c *call) refusesPrefill(j *judgement) bool {
	switch {
	case c.continued != strategyNames[wire.Prefill] || c.resp == nil || c.event != nil || j.status != http.StatusBadRequest:
		return false
	case j.why != stopFinal && j.why != stopProvider: // (x-should-retry: false says the same)
		return false
	}
	if j.body == nil {
		j.body, _ = peekBody(c.resp, signalPeek, c.lim.before(0))
	}
	return wire.PrefillRefused(j.status, c.resp.Header, j.body)
}

// request returns the request that asks for the rest of st by strategy:
// the first attempt's, resumed (a GET), with the delivered text as a last
// assistant turn (and the whitespace held back from it), or as it was.
func (k *resumer) request(st *wire.Stream, strategy wire.Strategy) (*http.Request, []byte, error) {
	req := k.first.Clone(k.f)
	switch strategy {
	case wire.Resume:
		u, _ := st.ResumeURL(k.first.URL)
		req.Method, req.URL, req.Host = http.MethodGet, u, ""
		req.Body, req.GetBody, req.ContentLength = http.NoBody, nil, 0
		req.Header.Del("Content-Type")
		req.Header.Del("Content-Length")
		return req, nil, nil
	case wire.Prefill, wire.PrefillPrefix:
		orig, err := k.requestBody()
		if err != nil {
			return nil, nil, err
		}
		body, heldBack, err := st.PrefillBody(orig, strategy)
		if err != nil {
			return nil, nil, err
		}
		withBody(req, body)
		return req, heldBack, nil
	}
	body, err := k.requestBody()
	if err != nil {
		return nil, nil, err
	}
	withBody(req, body)
	return req, nil, nil
}

// withBody gives req the body b, replayable, and its length.
func withBody(req *http.Request, b []byte) {
	req.GetBody = replayBody(b)
	req.Body, _ = req.GetBody()
	req.ContentLength = int64(len(b))
}

// send runs req as the continuation's attempts of the call: at once on the
// route the stream was cut on, then as the call's schedule and routes say;
// each attempt's record says it continued a stream, by strategy, from
// offset bytes of content delivered. It returns the last attempt's result
// as a call does (a failure response, or an *Exhausted error), and, if
// that response refuses the prefill (its record says so), the request
// that was refused (its route is then k.route).
func (k *resumer) send(req *http.Request, strategy wire.Strategy, offset int64) (*http.Response, *http.Request, error) {
	c := newCall(k.f, k.base, k.p, req, req, req.GetBody)
	c.keepers, c.gk = k.keepers, open{}
	if k.keepers != nil {
		c.gk = k.keepers.Join(req, (*callPolicy)(k.p), 0)
	}
	defer c.gk.Leave()
	// A continuation is a retry without a wait: it counts against the
	// call's retries, like a move to another route.
	c.n, c.recorded, c.retries = k.n, k.n, k.retries+1
	c.taken, c.route, c.next = k.taken, k.route, k.route
	c.learnt = k.learnt
	c.continued, c.from = strategyNames[strategy], offset
	resp, err := c.resume()
	if c.n > k.n {
		k.at = c.out // the route a next cut is continued on
	}
	k.n, k.retries, k.route, k.taken = c.n, c.retries, c.route, c.routesTaken()
	k.learnt = c.learnt
	if err == nil && c.moved == movedPrefill {
		return resp, c.out, nil
	}
	return resp, nil, err
}

// resume runs a continuation's call: its first attempt at once, then the
// retry loop as after any failed attempt.
func (c *call) resume() (*http.Response, error) {
	defer c.leaveRoutes()
	c.send()
	runRounds(c.f.Context, c.p.OnExhausted, c)
	return c.result()
}
