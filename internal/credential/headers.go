package credential

// Header is a request header whose value is a credential, a plain value.
type Header struct {
	// Name is the header's canonical name, so that a request's Header map
	// is read with it directly, without allocating.
	Name string
	// ProviderKey says the header carries the key a model provider knows
	// the caller by: coordination counts a provider key by its value
	// (internal/coord). The others are redacted and kept from other
	// routes like the rest, but tell no provider key from another: a
	// proxy's, a cookie, a temporary AWS session token (its access key ID
	// is in the SigV4 Authorization), an Azure API Management
	// subscription in front of the provider.
	ProviderKey bool
}

// Headers are the request headers that carry credentials: their values
// are blanked in every text llmretry and otelretry write (Redact), and
// removed, in any spelling, from the request a fallback route is handed
// (Strip). It is a table shared by every reader: read it, never write it.
var Headers = [...]Header{
	{"Authorization", true},              // a Bearer key (OpenAI and most), AWS SigV4 (by its access key ID)
	{"X-Api-Key", true},                  // Anthropic
	{"Api-Key", true},                    // Azure OpenAI
	{"X-Goog-Api-Key", true},             // Gemini
	{"Proxy-Authorization", false},       // a proxy's
	{"Cookie", false},                    // a session
	{"X-Amz-Security-Token", false},      // AWS temporary credentials' session token
	{"Ocp-Apim-Subscription-Key", false}, // Azure API Management
}
