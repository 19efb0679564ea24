package testkit

import (
	"io"
	"net/http"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Post builds a replayable JSON POST; StainlessPost adds the Accept the
// Stainless SDKs send.
func TestPost(t *testing.T) {
	req := Post(t, testURL, `{"model":"m"}`)
	assert.Equal(t, http.MethodPost, req.Method)
	assert.Equal(t, testURL, req.URL.String())
	assert.Equal(t, http.Header{"Content-Type": {"application/json"}}, req.Header)
	assert.Equal(t, int64(len(`{"model":"m"}`)), req.ContentLength)
	require.NotNil(t, req.GetBody)
	for _, body := range []func() (io.ReadCloser, error){func() (io.ReadCloser, error) { return req.Body, nil }, req.GetBody} {
		rc, err := body()
		require.NoError(t, err)
		b, err := io.ReadAll(rc)
		require.NoError(t, err)
		assert.Equal(t, `{"model":"m"}`, string(b))
	}
	assert.Equal(t, "io.nopCloserWriterTo wrapping *bytes.Reader", bodyType(req.Body))

	s := StainlessPost(t, testURL, `{}`)
	assert.Equal(t, "application/json", s.Header.Get("Accept"))
	assert.Equal(t, "application/json", s.Header.Get("Content-Type"))
}
