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
// ProviderKey ones) and each key= query value, NUL-separated. An AWS
// Signature Version 4 Authorization, which changes with every request,
// counts by its access key ID alone.
func appendCredential(b []byte, req *http.Request) []byte {
	for _, h := range credential.Headers {
		if !h.ProviderKey {
			continue
		}
		for _, v := range req.Header[h.Name] {
			if h.Name == "Authorization" {
				v = credential.SigV4Identity(v)
			}
			b = append(append(append(append(b, h.Name...), 0), v...), 0)
		}
	}
	for q := req.URL.RawQuery; q != ""; {
		var part string
		part, q, _ = strings.Cut(q, "&")
		if v, ok := strings.CutPrefix(part, credential.ProviderKeyParam+"="); ok {
			b = append(append(append(b, credential.ProviderKeyParam+"="...), v...), 0)
		}
	}
	return b
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
