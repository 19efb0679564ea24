package llmretry

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// RouteTo refuses bases it cannot route with a clear error that quotes no
// credential.
func TestRouteToBases(t *testing.T) {
	for _, tc := range []struct {
		name, from, to, want string
	}{
		{"relative", "/v1", "https://b.test/v1", "want an http or https URL"},
		{"other scheme", "ftp://a.test/v1", "https://b.test/v1", "want an http or https URL"},
		{"no host", "https:///v1", "https://b.test/v1", "has no host"},
		{"user information", "https://a.test/v1", "https://user:SECRET@b.test/v1", "user information"},
		{"query", "https://a.test/v1", "https://b.test/v1?key=SECRET", "has a query or fragment"},
		{"unparsable", "https://a.test/v1", "https://b.test/%zz", "toBase"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, err := RouteTo(tc.from, tc.to, nil)
			assert.Nil(t, r)
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
			assert.NotContains(t, err.Error(), "SECRET")
			assert.True(t, strings.HasPrefix(err.Error(), "llmretry: "), err.Error())
		})
	}
}

// RouteTo sends a request under fromBase to toBase: the rest of its path
// and its query (without credentials) kept, header's values set.
func TestRouteToRoutes(t *testing.T) {
	h := http.Header{"Api-Key": {"AZURE"}}
	r, err := RouteTo("https://api.openai.com/v1/", "https://res.openai.azure.com/openai/deployments/gpt/", h)
	require.NoError(t, err)
	h.Set("Api-Key", "CHANGED") // RouteTo keeps its own copy
	for _, tc := range []struct {
		in, want string
	}{
		{"https://api.openai.com/v1/chat/completions?api-version=2024-10-21", "https://res.openai.azure.com/openai/deployments/gpt/chat/completions?api-version=2024-10-21"},
		{"https://API.OpenAI.com/v1", "https://res.openai.azure.com/openai/deployments/gpt"},
	} {
		req, err := http.NewRequest(http.MethodPost, tc.in, strings.NewReader(`{}`))
		require.NoError(t, err)
		out, err := r(forRoute(context.Background(), req, http.NoBody))
		require.NoError(t, err)
		assert.Equal(t, tc.want, out.URL.String())
		assert.Equal(t, "AZURE", out.Header.Get("Api-Key"))
		assert.Empty(t, out.Host, "the URL's host is sent")
	}
	for _, in := range []string{
		"https://api.openai.com/v10/chat", // not at a segment boundary
		"http://api.openai.com/v1/chat",   // another scheme
		"https://other.test/v1/chat",
	} {
		req, err := http.NewRequest(http.MethodPost, in, nil)
		require.NoError(t, err)
		_, err = r(req)
		assert.ErrorIs(t, err, ErrNotRouted, in)
	}
	req, err := http.NewRequest(http.MethodPost, "https://api.openai.com/v1/chat", nil)
	require.NoError(t, err)
	req.Header.Set("X-Amz-Date", "20261201T000000Z")
	_, err = r(req)
	assert.ErrorIs(t, err, ErrNotRouted, "SigV4")
	assert.ErrorContains(t, err, "Signature Version 4")
}

// rawServer records every request's bytes as they arrived (headers,
// query, body) and answers each with status.
type rawServer struct {
	*httptest.Server
	mu     sync.Mutex
	status int
	raw    []string
}

func newRawServer(t *testing.T, status int) *rawServer {
	s := &rawServer{status: status}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, err := httputil.DumpRequest(r, true)
		if err != nil {
			t.Error(err)
		}
		s.mu.Lock()
		s.raw = append(s.raw, string(b))
		s.mu.Unlock()
		w.WriteHeader(s.status)
		fmt.Fprint(w, `{"model":"fallback-model","usage":{"total_tokens":7}}`)
	}))
	t.Cleanup(s.Close)
	return s
}

func (s *rawServer) requests() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.raw...)
}

// Credentials never cross routes: a request carrying every credential
// shape goes to a primary that is down; the fallback host, over loopback,
// receives none of their bytes (through RouteTo, and through a Route that
// sets nothing), only the route's own, and the whole body.
func TestRouteCredentialsNeverCross(t *testing.T) {
	secrets := map[string]string{
		"Authorization":             "Bearer sk-PRIMARY-AUTH",
		"X-Api-Key":                 "PRIMARY-XAPIKEY",
		"Api-Key":                   "PRIMARY-APIKEY",
		"X-Goog-Api-Key":            "PRIMARY-GOOG",
		"Cookie":                    "session=PRIMARY-COOKIE",
		"Proxy-Authorization":       "Basic PRIMARY-PROXY",
		"X-Amz-Security-Token":      "PRIMARY-AMZTOKEN",
		"Ocp-Apim-Subscription-Key": "PRIMARY-APIM",
	}
	const queryKey, user, pass = "PRIMARY-QUERYKEY", "PRIMARYUSER", "PRIMARYPASS"
	for _, tc := range []struct {
		name  string
		route func(fb string) Route
		own   string // the Authorization the fallback must see; "" for none
	}{
		{"RouteTo", func(fb string) Route {
			r, err := RouteTo("http://primary.test/v1", fb+"/v1", http.Header{"Authorization": {"Bearer FALLBACK"}})
			require.NoError(t, err)
			return r
		}, "Bearer FALLBACK"},
		{"a Route that sets nothing", func(fb string) Route {
			u, err := url.Parse(fb)
			require.NoError(t, err)
			return func(r *http.Request) (*http.Request, error) {
				r.URL.Scheme, r.URL.Host = u.Scheme, u.Host
				return r, nil
			}
		}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			primary := newRawServer(t, http.StatusServiceUnavailable)
			fallback := newRawServer(t, http.StatusOK)
			pu, err := url.Parse(primary.URL)
			require.NoError(t, err)
			// Every request names primary.test; a dialer sends it to the
			// primary server, and the fallback's host to the fallback.
			base := &http.Transport{}
			base.DialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
				if strings.HasPrefix(addr, "primary.test") {
					addr = pu.Host
				}
				return (&net.Dialer{}).DialContext(ctx, network, addr)
			}
			defer base.CloseIdleConnections()
			rt := mustNew(t, base, Policy{Waits: []time.Duration{time.Millisecond, time.Millisecond}, Fallback: []Route{tc.route(fallback.URL)}})
			body := `{"model":"primary-model","messages":[{"role":"user","content":"hi"}]}`
			req, err := http.NewRequest(http.MethodPost, "http://"+user+":"+pass+"@primary.test/v1/chat/completions?key="+queryKey+"&api-version=1", strings.NewReader(body))
			require.NoError(t, err)
			for k, v := range secrets {
				req.Header.Set(k, v)
			}
			req.Header["x-goog-api-key"] = []string{"PRIMARY-LOWERCASE"} // set directly, not canonical
			ctx := withDeadline(t, 30*time.Second)
			resp, err := rt.RoundTrip(req.WithContext(ctx))
			require.NoError(t, err)
			got, err := io.ReadAll(resp.Body)
			require.NoError(t, err)
			resp.Body.Close()
			assert.Equal(t, 200, resp.StatusCode)
			assert.Contains(t, string(got), "fallback-model", "the fallback's own answer")

			require.Len(t, primary.requests(), 2, "a blip, then a move")
			assert.Contains(t, primary.requests()[0], "PRIMARY-XAPIKEY", "the primary got its credentials")
			fb := fallback.requests()
			require.Len(t, fb, 1)
			for name, v := range secrets {
				secret := v[strings.Index(v, "PRIMARY"):] // past "Bearer ", "Basic ", "session="
				assert.NotContains(t, fb[0], secret, name)
			}
			for _, s := range []string{queryKey, user, pass} {
				assert.NotContains(t, fb[0], s)
			}
			assert.NotContains(t, fb[0], "PRIMARY", "no byte of any primary credential")
			assert.Contains(t, fb[0], "api-version=1", "the rest of the query")
			assert.True(t, strings.HasSuffix(fb[0], body), "the whole body")
			if tc.own != "" {
				assert.Contains(t, fb[0], "Authorization: "+tc.own)
			} else {
				assert.NotContains(t, fb[0], "Authorization")
			}
		})
	}
}
