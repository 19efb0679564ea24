package credential

import (
	"net/http"
	"strings"
	"time"
)

// sigV4Scheme starts the Authorization value of a request signed with AWS
// Signature Version 4.
const sigV4Scheme = "AWS4-HMAC-SHA256"

// SigV4Identity returns the access key ID of an AWS Signature Version 4
// Authorization value (what follows Credential= up to the first slash), as
// "AWS4 " and the ID, or v itself if it is not one: a SigV4 signature
// changes with every request, its access key ID does not.
func SigV4Identity(v string) string {
	rest, ok := strings.CutPrefix(v, sigV4Scheme+" ")
	if !ok {
		return v
	}
	_, cred, ok := strings.Cut(rest, "Credential=")
	if !ok {
		return v
	}
	akid, _, _ := strings.Cut(cred, "/")
	return "AWS4 " + akid
}

// SignedAt returns when a request signed with AWS Signature Version 4 was
// signed: the X-Amz-Date of a request whose Authorization is
// AWS4-HMAC-SHA256 (the Date header if it has no X-Amz-Date).
func SignedAt(h http.Header) (time.Time, bool) {
	if !strings.HasPrefix(strings.TrimSpace(h.Get("Authorization")), sigV4Scheme) {
		return time.Time{}, false
	}
	if v := h.Get("X-Amz-Date"); v != "" {
		t, err := time.Parse("20060102T150405Z", v)
		return t, err == nil
	}
	t, err := http.ParseTime(h.Get("Date"))
	return t, err == nil
}
