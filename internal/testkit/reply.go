package testkit

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Reply is one scripted answer of a Provider: a transport error (Err), or
// a status with headers and a body. Events, when set, is a streamed body:
// ServeHTTP writes and flushes each element in turn, RoundTrip sends them
// concatenated (Body is then ignored).
//
// The zero Reply is a response of status 0 with no header and no body:
// set Status, or start from one of the package's replies (OK, Fail, the
// providers'). A Reply is a value: its methods return changed copies and
// never touch the receiver's Header, so one Reply may be put in many
// scripts and used from many goroutines, as long as nobody writes to its
// Header or Events in place. The package's reply functions (OK, Fail,
// Refused, BadGateway, the providers') return a new Reply each call.
type Reply struct {
	Status int
	Header http.Header
	Body   string
	Events []string
	// Err is returned instead of a response (RoundTrip), or makes the
	// server drop the connection (ServeHTTP).
	Err error
	// Delay is how long the provider takes to answer (RoundTrip only): a
	// timer, or the request's context ending first, as over a connection.
	Delay time.Duration
	// Stall makes the body go silent after its bytes instead of ending: a
	// Read then blocks until the body is closed (and fails) or the
	// request's context ends: a provider that sent its headers, and
	// perhaps some events, then nothing.
	Stall bool
}

// With returns a copy of r with header k set to v.
func (r Reply) With(k, v string) Reply {
	h := r.Header.Clone()
	if h == nil {
		h = http.Header{}
	}
	h.Set(k, v)
	r.Header = h
	return r
}

// After returns a copy of r that the provider sends d after the request
// reached it.
func (r Reply) After(d time.Duration) Reply {
	r.Delay = d
	return r
}

// Stalled returns a copy of r whose body goes silent after its bytes.
func (r Reply) Stalled() Reply {
	r.Stall = true
	return r
}

// payload returns the whole body of r.
func (r Reply) payload() string {
	if r.Events != nil {
		return strings.Join(r.Events, "")
	}
	return r.Body
}

// Response renders r (its Err aside, which the caller handles) as the
// in-memory response to req, as net/http's client would return it over
// HTTP/1.1: Status "503 Service Unavailable" ("529 " for a code without
// a text, where a server would send "529 status code 529"), a clone of
// r's Header (an empty one for none), ContentLength the body's length (-1
// for a stalled body, a stream of unknown length), Request req. Each call
// returns a new response with a body of its own.
func (r Reply) Response(req *http.Request) *http.Response {
	body := r.payload()
	var rc io.ReadCloser = io.NopCloser(strings.NewReader(body))
	length := int64(len(body))
	if r.Stall {
		rc = &stallBody{r: strings.NewReader(body), ctx: req.Context(), closed: make(chan struct{})}
		length = -1
	}
	h := r.Header.Clone()
	if h == nil {
		h = http.Header{} // net/http's responses always have one
	}
	return &http.Response{
		Status:        fmt.Sprintf("%d %s", r.Status, http.StatusText(r.Status)),
		StatusCode:    r.Status,
		Proto:         "HTTP/1.1",
		ProtoMajor:    1,
		ProtoMinor:    1,
		Header:        h,
		Body:          rc,
		ContentLength: length,
		Request:       req,
	}
}

// stallBody is the body of a stalled reply: its bytes, then silence until
// it is closed (a Read then fails as on a closed connection) or the
// request's context ends. It blocks on channels only, so a synctest
// bubble sees it durably blocked and moves its clock on.
type stallBody struct {
	r      *strings.Reader // read by Read only
	ctx    context.Context
	closed chan struct{}
	once   sync.Once
}

func (b *stallBody) Read(p []byte) (int, error) {
	select {
	case <-b.closed:
		return 0, errStallClosed
	default:
	}
	if b.r.Len() > 0 {
		return b.r.Read(p)
	}
	select {
	case <-b.closed:
		return 0, errStallClosed
	case <-b.ctx.Done():
		return 0, b.ctx.Err()
	}
}

func (b *stallBody) Close() error {
	b.once.Do(func() { close(b.closed) })
	return nil
}

// errStallClosed is what a stalled body's Read returns once it is closed
// (net/http's own words for a read on a closed body).
var errStallClosed = errors.New("http: read on closed response body")

// --- Replies anyone in front of a provider sends ---

// OK is a provider's answer in its shortest form: 200, {"answer":42}.
func OK() Reply { return Reply{Status: http.StatusOK, Body: `{"answer":42}`} }

// Fail is a reply of status whose body names it ("error 503"), with the
// headers kv (name, value, name, value, …; an odd last name is ignored).
func Fail(status int, kv ...string) Reply {
	h := http.Header{}
	for i := 0; i+1 < len(kv); i += 2 {
		h.Set(kv[i], kv[i+1])
	}
	return Reply{Status: status, Header: h, Body: "error " + strconv.Itoa(status)}
}

// Refused is what net/http returns when nothing listens: the provider (or
// a proxy in front of it) is unreachable. Its error is a *net.OpError,
// "dial tcp 127.0.0.1:1: connect: connection refused", wrapping
// syscall.ECONNREFUSED, made without a socket.
func Refused() Reply {
	return Reply{Err: &net.OpError{
		Op:   "dial",
		Net:  "tcp",
		Addr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 1},
		Err:  &os.SyscallError{Syscall: "connect", Err: syscall.ECONNREFUSED},
	}}
}

// BadGateway is the 502 a provider's edge (here Cloudflare) sends when its
// upstream is down: an HTML page, not the provider's JSON error.
func BadGateway() Reply {
	return Reply{
		Status: http.StatusBadGateway,
		Header: http.Header{
			"Content-Type": {"text/html"},
			"Server":       {"cloudflare"},
			"Cf-Ray":       {"8e1f0c2b9d4a7f31-FRA"},
		},
		Body: "<html>\r\n<head><title>502 Bad Gateway</title></head>\r\n<body>\r\n" +
			"<center><h1>502 Bad Gateway</h1></center>\r\n<hr><center>cloudflare</center>\r\n" +
			"</body>\r\n</html>\r\n",
	}
}

// Quote returns s as a JSON string, as the replies write text into their
// bodies: quotes, backslashes and newlines escaped, nothing else (the
// texts of these tests need no other escape).
func Quote(s string) string {
	return `"` + strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`).Replace(s) + `"`
}

// nullable returns s as a JSON string, or null when s is empty.
func nullable(s string) string {
	if s == "" {
		return "null"
	}
	return Quote(s)
}
