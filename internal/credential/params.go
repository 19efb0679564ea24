package credential

import "strings"

// ProviderKeyParam is the query parameter a model provider reads an API
// key from (Gemini's ?key=): coordination counts a provider key by its
// value too, as by a ProviderKey header's.
const ProviderKeyParam = "key"

// IsProviderKeyParam reports whether name, a query parameter's name as
// the raw query writes it, is ProviderKeyParam in any spelling: any case,
// escaped or not. It allocates nothing for a name without escapes.
func IsProviderKeyParam(name string) bool {
	return strings.EqualFold(unescape(name), ProviderKeyParam)
}

// CutParam returns the first parameter of the raw query q ("name=value",
// as written) and the rest of q after its separator. A parameter ends at
// '&' or ';': the one rule for every reader of a query here (HasParam,
// MaskQuery, the provider key's key= value) and for a text's name=value
// (RedactParams, which also ends a value at ';'), since a server may read
// either as a separator. It allocates nothing.
func CutParam(q string) (param, rest string) {
	if i := strings.IndexAny(q, "&;"); i >= 0 {
		return q[:i], q[i+1:]
	}
	return q, ""
}

// IsParam reports whether a query parameter named name (decoded) carries
// a credential. The rule is one for every use (a log line blanks the
// value, a span shows REDACTED, a route removes the parameter): the name,
// or one of its words, ignoring case, is a credential word (key, sig,
// auth, authorization, apikey, accesskey, secretkey, privatekey,
// accesskeyid, awsaccesskeyid) or ends in a credential stem (token,
// secret, password, passwd, signature, credential, credentials). Words
// are split at every byte that is not an ASCII letter or digit, and
// between a lower-case letter and an upper-case one: key, api_key,
// X-Goog-Api-Key, apiKey, AWSAccessKeyId, access_token, X-Amz-Signature,
// X-Amz-Credential, X-Amz-Security-Token, subscription-key,
// client_secret and sig are credentials; monkey, keys, max_tokens and
// api-version are not. It allocates nothing.
func IsParam(name string) bool {
	return hasCredentialWord(name, false) || hasCredentialWord(name, true)
}

// credentialWords are the words that name a credential.
var credentialWords = [...]string{"key", "sig", "auth", "authorization", "apikey", "accesskey", "secretkey", "privatekey", "accesskeyid", "awsaccesskeyid"}

// credentialStems end the words that name a credential.
var credentialStems = [...]string{"token", "secret", "password", "passwd", "signature", "credential", "credentials"}

// hasCredentialWord reports whether one of name's words is a credential's,
// splitting at a lower-case letter followed by an upper-case one too when
// camel is set.
func hasCredentialWord(name string, camel bool) bool {
	start := 0
	for i := 0; i <= len(name); i++ {
		switch {
		case i == len(name) || !isAlnum(name[i]):
			if credentialWord(name[start:i]) {
				return true
			}
			start = i + 1
		case camel && i > start && isLower(name[i-1]) && isUpper(name[i]):
			if credentialWord(name[start:i]) {
				return true
			}
			start = i
		}
	}
	return false
}

// credentialWord reports whether the word w names a credential.
func credentialWord(w string) bool {
	if w == "" {
		return false
	}
	for _, c := range credentialWords {
		if strings.EqualFold(w, c) {
			return true
		}
	}
	for _, s := range credentialStems {
		if len(w) >= len(s) && strings.EqualFold(w[len(w)-len(s):], s) {
			return true
		}
	}
	return false
}

// isAlnum, isLower and isUpper classify ASCII bytes.
func isAlnum(c byte) bool { return isLower(c) || isUpper(c) || '0' <= c && c <= '9' }
func isLower(c byte) bool { return 'a' <= c && c <= 'z' }
func isUpper(c byte) bool { return 'A' <= c && c <= 'Z' }
