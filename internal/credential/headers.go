package credential

// Headers are the canonical names of the request headers that carry model
// providers' API keys.
var Headers = [...]string{"Authorization", "X-Api-Key", "Api-Key", "X-Goog-Api-Key"}
