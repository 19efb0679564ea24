package coord

import (
	"hash/maphash"
	"net/http"
	"strconv"
	"strings"

	"github.com/llmretry/llmretry/internal/credential"
	"github.com/llmretry/llmretry/store"
)

// This file is what makes a provider key: the request URL's host and the
// credential the request carries, and the route the call takes. The
// credential's value is hashed here and kept nowhere: the local key holds
// 64 bits of a per-Transport seeded hash, the store's name whatever
// Store.Key makes of it (with the route after it, see nameOf).

// keyID identifies a provider key within one Transport: a host, a hash
// of the credential and the route (0 a call's primary, k its policy's
// Fallback[k-1]).
type keyID struct {
	host  string
	cred  uint64 // 0: the request carries no credential
	route int
}

// keyOf returns req's provider key under seed, for route 0 (the caller
// sets the route of another). It allocates nothing for a
// host in lower case and a credential of up to 512 bytes.
func keyOf(seed maphash.Seed, req *http.Request) keyID {
	var buf [512]byte
	id := keyID{host: lower(req.URL.Host)}
	if b := appendCredential(buf[:0], req); len(b) > 0 {
		id.cred = maphash.Bytes(seed, b) | 1 // never 0, which means no credential
	}
	return id
}

// nameOf returns the store s's name for the key id of req: Store.Key's
// name for its host and credential, and for a fallback route "~route" and
// its number after it ("api.openai.com#1a2b3c4d~route1"), so that a
// fallback to another model on the same host and credential has facts of
// its own. Every process of a fleet with the same routes names a key
// alike; the route's number carries no credential.
func nameOf(s store.Store, id keyID, req *http.Request) string {
	name := s.Key(id.host, credentialOf(req))
	if id.route == 0 {
		return name
	}
	return name + routeMark + strconv.Itoa(id.route)
}

// routeMark separates a fallback route's number from the store's name of
// its host and credential.
const routeMark = "~route"

// credentialOf returns req's credential material, as keyOf hashes it, for
// Store.Key; nil if req carries none.
func credentialOf(req *http.Request) []byte {
	return appendCredential(nil, req)
}

// appendCredential appends req's credential material to b: the name and
// value of each header that names a provider key (credential.Headers'
// ProviderKey ones) and each key= query value, NUL-separated. A request
// that carries no provider key header under its canonical name may carry
// one spelt otherwise (a map set directly may hold "x-api-key", which
// net/http sends as written): each is appended under its canonical name.
// A key= value is appended under "key=" whatever the spelling of its name
// (credential.IsProviderKeyParam), the query split at '&' and ';'
// (credential.CutParam): every spelling of one credential makes one key,
// and two credentials two. An AWS Signature Version 4 Authorization,
// which changes with every request, counts by its access key ID alone.
// (The spellings are looked for only without a canonical one, so that a
// request from an SDK, whose headers are canonical, pays for no pass over
// its header map.)
func appendCredential(b []byte, req *http.Request) []byte {
	n := len(b)
	for _, h := range credential.Headers {
		if !h.ProviderKey {
			continue
		}
		if vs := req.Header[h.Name]; len(vs) > 0 {
			b = appendHeader(b, h.Name, vs)
		}
	}
	if len(b) == n && respelt(req.Header) {
		for _, h := range credential.Headers {
			if h.ProviderKey {
				b = appendSpellings(b, h.Name, req.Header)
			}
		}
	}
	for q := req.URL.RawQuery; q != ""; {
		var part string
		part, q = credential.CutParam(q)
		if name, v, ok := strings.Cut(part, "="); ok && credential.IsProviderKeyParam(name) {
			b = append(append(append(b, credential.ProviderKeyParam+"="...), v...), 0)
		}
	}
	return b
}

// appendHeader appends the values vs of the provider key header name (its
// canonical name) to b.
func appendHeader(b []byte, name string, vs []string) []byte {
	for _, v := range vs {
		if name == "Authorization" {
			v = credential.SigV4Identity(v)
		}
		b = append(append(append(append(b, name...), 0), v...), 0)
	}
	return b
}

// respelt reports whether h holds a provider key header under a name that
// is not its canonical one (see spells). A map filled by Header.Set or
// Add, or read off the wire, holds none; appendCredential asks only when
// it found no canonical one.
func respelt(h http.Header) bool {
	for name := range h {
		for _, c := range credential.Headers {
			if c.ProviderKey && spells(name, c.Name) {
				return true
			}
		}
	}
	return false
}

// appendSpellings appends the values of each spelling of the provider key
// header canonical in h other than canonical itself (see spells) to b,
// under canonical, the spellings in byte order: the map's order makes no
// key of its own.
func appendSpellings(b []byte, canonical string, h http.Header) []byte {
	last := "" // before every spelling, none of which is empty
	for {
		next := ""
		for name := range h {
			if spells(name, canonical) && name > last && (next == "" || name < next) {
				next = name
			}
		}
		if next == "" {
			return b
		}
		b = appendHeader(b, canonical, h[next])
		last = next
	}
}

// spells reports whether name is the header name canonical spelt
// otherwise: the same ASCII letters in another case. A header name is
// ASCII (net/http refuses to send any other), so a name of another length
// is passed over without a look.
func spells(name, canonical string) bool {
	return len(name) == len(canonical) && name != canonical && strings.EqualFold(name, canonical)
}

// lower returns s in lower case, without allocating when it already is.
func lower(s string) string {
	for i := 0; i < len(s); i++ {
		if c := s[i]; 'A' <= c && c <= 'Z' {
			return strings.ToLower(s)
		}
	}
	return s
}
