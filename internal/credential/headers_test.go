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
		assert.Equal(t, http.CanonicalHeaderKey(h.Name), h.Name)
	}
}

// The headers that name a provider key are the model providers' API-key
// headers; the others are credentials too, but of a proxy, a session, a
// temporary AWS token or a gateway in front of the provider.
func TestProviderKeyHeaders(t *testing.T) {
	var keys []string
	for _, h := range Headers {
		if h.ProviderKey {
			keys = append(keys, h.Name)
		}
	}
	assert.Equal(t, []string{"Authorization", "X-Api-Key", "Api-Key", "X-Goog-Api-Key"}, keys)
}
