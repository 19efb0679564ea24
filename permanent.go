package llmretry

import "errors"

// permanentError marks an error that a retry will not fix.
type permanentError struct{ err error }

func (e *permanentError) Error() string { return e.err.Error() }
func (e *permanentError) Unwrap() error { return e.err }

// Permanent marks err as one that a retry will not fix: a Transport whose
// base returns it, or a call run by Do that returns it, gives up at once.
// errors.Is and errors.As still reach err. Permanent(nil) is nil.
//
// Use it in a middleware under the Transport that refused a call, a request
// signer that failed, or a tool that knows its failure is final.
func Permanent(err error) error {
	if err == nil {
		return nil
	}
	return &permanentError{err: err}
}

// isPermanent reports whether err or anything it wraps was marked Permanent.
func isPermanent(err error) bool {
	var p *permanentError
	return errors.As(err, &p)
}
