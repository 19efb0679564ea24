package credential

import (
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

// amzDate is X-Amz-Date's layout.
const amzDate = "20060102T150405Z"

func TestSignedAt(t *testing.T) {
	at := time.Date(2026, 12, 1, 7, 0, 0, 0, time.UTC)
	h := http.Header{}
	_, ok := SignedAt(h)
	assert.False(t, ok, "unsigned")
	h.Set("X-Amz-Date", at.Format(amzDate))
	_, ok = SignedAt(h)
	assert.False(t, ok, "a date alone is no SigV4 signature")
	h.Set("Authorization", "AWS4-HMAC-SHA256 Credential=…")
	got, ok := SignedAt(h)
	assert.True(t, ok)
	assert.Equal(t, at, got)
	h.Del("X-Amz-Date")
	h.Set("Date", at.Format(http.TimeFormat))
	got, ok = SignedAt(h)
	assert.True(t, ok, "the Date header when there is no X-Amz-Date")
	assert.Equal(t, at, got)
	h.Set("Authorization", "Bearer sk-…")
	_, ok = SignedAt(h)
	assert.False(t, ok)
}

// A SigV4 Authorization counts by its access key ID, whatever its
// signature; any other value is itself.
func TestSigV4Identity(t *testing.T) {
	a := "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20261201/us-east-1/bedrock/aws4_request, SignedHeaders=host;x-amz-date, Signature=0123abcd"
	b := "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20261202/us-east-1/bedrock/aws4_request, SignedHeaders=host;x-amz-date, Signature=4567ef01"
	assert.Equal(t, "AWS4 AKIDEXAMPLE", SigV4Identity(a))
	assert.Equal(t, SigV4Identity(a), SigV4Identity(b), "one access key ID, two signatures")
	assert.Equal(t, "Bearer sk-1", SigV4Identity("Bearer sk-1"))
	assert.Equal(t, "AWS4-HMAC-SHA256 SignedHeaders=host", SigV4Identity("AWS4-HMAC-SHA256 SignedHeaders=host"), "no Credential=: itself")
}
