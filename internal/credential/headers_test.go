package credential

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/assert"
)

// The header names are canonical: a request's Header map is read with
// them directly, without allocating.
func TestHeadersAreCanonical(t *testing.T) {
	for _, h := range Headers {
		assert.Equal(t, http.CanonicalHeaderKey(h), h)
	}
}
