package coord

import (
	"hash/maphash"
	"net/http"
	"strings"

	"github.com/llmretry/llmretry/internal/credential"
)

// This file is what makes a provider key: the request URL's host and the
// credential the request carries. The credential's value is hashed here
// and kept nowhere: the local key holds 64 bits of a per-Transport seeded
// hash, the store's name whatever Store.Key makes of it.

// keyID identifies a provider key within one Transport: a host and a hash
// of the credential.
type keyID struct {
	host string
	cred uint64 // 0: the request carries no credential
}

// keyOf returns req's provider key under seed. It allocates nothing for a
// host in lower case and a credential of up to 512 bytes.
func keyOf(seed maphash.Seed, req *http.Request) keyID {
	var buf [512]byte
	id := keyID{host: lower(req.URL.Host)}
	if b := appendCredential(buf[:0], req); len(b) > 0 {
		id.cred = maphash.Bytes(seed, b) | 1 // never 0, which means no credential
	}
	return id
}

// credentialOf returns req's credential material, as keyOf hashes it, for
// Store.Key; nil if req carries none.
func credentialOf(req *http.Request) []byte {
	return appendCredential(nil, req)
}

// appendCredential appends req's credential material to b: each credential
// header's name and value and each key= query value, NUL-separated. An AWS
// Signature Version 4 Authorization, which changes with every request,
// counts by its access key ID alone.
func appendCredential(b []byte, req *http.Request) []byte {
	for _, name := range credential.Headers {
		for _, v := range req.Header[name] {
			if name == "Authorization" {
				v = credential.SigV4Identity(v)
			}
			b = append(append(append(append(b, name...), 0), v...), 0)
		}
	}
	for q := req.URL.RawQuery; q != ""; {
		var part string
		part, q, _ = strings.Cut(q, "&")
		if v, ok := strings.CutPrefix(part, "key="); ok {
			b = append(append(append(b, "key="...), v...), 0)
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
