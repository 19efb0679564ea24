package redisstore

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
)

// nameHashLen is how many bytes of the credential's HMAC a key name
// carries: 64 bits, so that two credentials of a fleet never share a name,
// and nothing from which the credential could be recovered.
const nameHashLen = 8

// Key names the provider key of requests to host carrying credential:
// host alone without a credential, else host + "#" + the first 8 bytes of
// HMAC-SHA-256(Options.Secret, credential) in hex
// ("api.openai.com#1a2b3c4d5e6f7a8b"). Every process with the same Secret
// names a key alike; without the Secret the name tells nothing of the
// credential, and even with it a credential can only be tested, not
// recovered. The credential is not kept.
func (s *Store) Key(host string, credential []byte) string {
	if len(credential) == 0 {
		return host
	}
	mac := hmac.New(sha256.New, s.opts.Secret)
	mac.Write(credential)
	sum := mac.Sum(nil)
	return host + "#" + hex.EncodeToString(sum[:nameHashLen])
}

// keys returns the Redis keys of the provider key name: its facts (a
// hash), its retry leases and its send leases (sorted sets of holders by
// lease end), and its tallies (a hash of owner to "n:seq:until"). All
// carry the name as their hash tag, so that a script touching them runs
// on one Cluster slot.
func (s *Store) keys(name string) []string {
	tag := s.opts.Prefix + "{" + name + "}:"
	return []string{tag + "f", tag + "retries", tag + "sends", tag + "tallies"}
}

// channel returns the channel the Store's changes are published on.
func (s *Store) channel() string { return s.opts.Prefix + "changes" }
