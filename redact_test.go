package llmretry

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/assert"
)

// Redact blanks every credential of the request a text may quote: the
// query, URL user information, credential headers' values (and a Bearer
// token alone), and any credential-like name=value, request or not.
func TestRedact(t *testing.T) {
	req, _ := http.NewRequest(http.MethodPost, "https://alice:s3cret@api.example.test/v1?key=AIzaKEY&x=1", nil)
	req.Header.Set("Authorization", "Bearer sk-TOKEN-1234")
	req.Header.Set("X-Api-Key", "ant-KEY-5678")
	text := `Post "https://alice:s3cret@api.example.test/v1?key=AIzaKEY&x=1": sent Bearer sk-TOKEN-1234 then sk-TOKEN-1234 and ant-KEY-5678`
	got := Redact(text, req)
	for _, secret := range []string{"s3cret", "alice", "AIzaKEY", "sk-TOKEN-1234", "ant-KEY-5678"} {
		assert.NotContains(t, got, secret)
	}
	assert.Contains(t, got, "api.example.test/v1?…")
	assert.Equal(t, "retry with token=… later", Redact("retry with token=abc123 later", nil))
	assert.Equal(t, "nothing to hide", Redact("nothing to hide", req))
}
