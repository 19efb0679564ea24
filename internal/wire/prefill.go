package wire

import (
	"errors"
	"unicode"
	"unicode/utf8"
)

// This file builds a prefill: the original request body with the text
// delivered so far as the last assistant turn, so that the model continues
// it. The body is edited, not re-encoded: the lexer finds the messages (or
// contents) array and its last element, and bytes are inserted or one
// value replaced; every other byte of the body is kept.
//
// The providers' facts it rests on (docs/streams.md cites them):
//
//   - Anthropic Messages: a final assistant message is continued, its text
//     left out of the reply; the final assistant content "cannot end with
//     trailing whitespace" (a 400); consecutive assistant turns are
//     combined into one; Claude 4.6 and later refuse a prefill altogether
//     ("This model does not support assistant message prefill"), and no
//     model takes one with extended thinking.
//   - Chat Completions: api.openai.com starts over rather than continue a
//     final assistant message; DeepSeek (base URL /beta) and Mistral
//     continue it when it carries "prefix": true (PrefillPrefix).
//   - Gemini: a final {"role":"model"} content is continued by some
//     models; others refuse it ("Requests ending with a model turn are not
//     supported unless the last part is a function response").

// Strategy is how a cut stream is continued; the zero Strategy is none.
// It is a plain value.
type Strategy uint8

// The strategies, in order of exactness.
const (
	// Resume reconnects to a Responses stream created with background:
	// true (GET …/responses/{id}?stream=true&starting_after=N, see
	// ResumeURL): the provider sends the original's own events after N.
	Resume Strategy = iota + 1
	// Prefill sends the request again with the delivered text as a last
	// assistant (Gemini: model) turn (see PrefillBody); the reply
	// continues it. A reply that starts over is recognised (see Splice).
	Prefill
	// PrefillPrefix is Prefill with the flag DeepSeek's and Mistral's chat
	// APIs ask for: "prefix": true on that message.
	PrefillPrefix
	// Regenerate sends the request again as it was; the reply's text must
	// begin with the delivered text, which is skipped.
	Regenerate
)

// String names the strategy.
func (st Strategy) String() string {
	switch st {
	case Resume:
		return "resume"
	case Prefill:
		return "prefill"
	case PrefillPrefix:
		return "prefill with prefix"
	case Regenerate:
		return "regenerate"
	}
	return "no strategy"
}

// The reasons PrefillBody gives no body. Like every error of this
// package, their texts carry no "llmretry: ": the root wraps them in
// errors of its own, which do. Those that refuse a prefill alone are
// noPrefill constants, which wrap ErrNoPrefill; errSeveralChoices (like
// a Stuck stream) forbids any continuation.
const (
	errNotPrefill      noPrefill = "not a prefill strategy"
	errPrefixChatOnly  noPrefill = "a prefill with \"prefix\": true is Chat Completions' (DeepSeek, Mistral)"
	errNoPrefillAPI    noPrefill = "this API takes no prefill"
	errNoRequest       noPrefill = "no request body to build a prefill from"
	errNothingToFill   noPrefill = "nothing delivered to prefill (regenerate instead)"
	errThinkingPrefill noPrefill = "Anthropic takes no prefill with extended thinking"
	errRequestJSON     noPrefill = "the request body is not the API's JSON"
	errLastTurn        noPrefill = "the request's last turn is the assistant's, and its content cannot be extended"
)

var errSeveralChoices = errors.New("the request asks for several choices")

// ErrNoPrefill is wrapped by PrefillBody's errors that refuse a prefill
// alone: the delivered text or the request cannot be a prefill (nothing
// but whitespace delivered, extended thinking, an assistant turn that
// cannot be extended, an API or flag that takes none), yet nothing
// forbids continuing the stream another way, so it may be regenerated
// and matched. PrefillBody's other errors forbid any continuation.
var ErrNoPrefill = errors.New("no prefill can be built")

// noPrefill is a refusal of a prefill alone, said precisely; it wraps
// ErrNoPrefill.
type noPrefill string

func (e noPrefill) Error() string { return string(e) }
func (noPrefill) Unwrap() error   { return ErrNoPrefill }

// PrefillBody returns the original request body with the delivered text
// as the last assistant turn, as the API wants it, and the trailing
// whitespace it held back:
//
//   - Messages: a final {"role":"assistant","content":TEXT}; TEXT may not
//     end in whitespace, so it is trimmed and the whitespace returned as
//     heldBack (the caller already has it: Splice skips it where the
//     continuation repeats it, so nothing doubles);
//   - Chat Completions: a final {"role":"assistant","content":TEXT}, with
//     "prefix":true for PrefillPrefix;
//   - Gemini: a final {"role":"model","parts":[{"text":TEXT}]} in contents.
//
// When the request already ends with an assistant (model) turn, the
// user's own prefill, TEXT is added to it instead: to its string content,
// or as a text block (part) after its others. TEXT is encoded as
// encoding/json encodes a string; every other byte of the body is kept.
//
// request is the original request body (read at the cut); PrefillBody
// keeps nothing of it. It returns an error, and no body, when the
// strategy is not Prefill or PrefillPrefix (PrefillPrefix: Chat
// Completions only), the API takes no prefill, the stream is Stuck, the
// request asks for several choices, there is no request body or it is not
// the API's JSON, nothing is delivered (after trimming), or a Messages
// stream has or asked for extended thinking. body and heldBack are new
// slices the caller owns.
func (s *Stream) PrefillBody(request []byte, st Strategy) (body, heldBack []byte, err error) {
	switch {
	case st != Prefill && st != PrefillPrefix:
		return nil, nil, errNotPrefill
	case st == PrefillPrefix && s.api != ChatCompletions:
		return nil, nil, errPrefixChatOnly
	case s.api != ChatCompletions && s.api != Messages && s.api != Gemini:
		return nil, nil, errNoPrefillAPI
	case request == nil:
		return nil, nil, errNoRequest
	}
	if why := s.Stuck(); why != "" {
		return nil, nil, errors.New("the stream cannot be continued: " + why)
	}
	req := readRequest(s.api, request)
	if req.n > 1 {
		return nil, nil, errSeveralChoices
	}
	text := s.text
	if s.api == Messages {
		if s.sawThinking || req.thinking {
			return nil, nil, errThinkingPrefill
		}
		text = trimTrailingSpace(text)
		if len(text) < len(s.text) {
			heldBack = append([]byte(nil), s.text[len(text):]...)
		}
	}
	if len(text) == 0 {
		return nil, nil, errNothingToFill
	}
	var w walker
	if !w.validJSON(request) {
		return nil, nil, errRequestJSON
	}
	body, err = prefill(request, s.api, st, text)
	if err != nil {
		return nil, nil, err
	}
	return body, heldBack, nil
}

// trimTrailingSpace returns text without its trailing whitespace: what
// Unicode calls white space, and the separators \x1c to \x1f that
// Python's str.isspace (and so, likely, the provider's check) counts too.
func trimTrailingSpace(text []byte) []byte {
	for len(text) > 0 {
		r, n := utf8.DecodeLastRune(text)
		if !unicode.IsSpace(r) && (r < 0x1c || r > 0x1f) {
			break
		}
		text = text[:len(text)-n]
	}
	return text
}

// prefill edits body (one valid JSON value) to end with text as the
// assistant's turn.
func prefill(body []byte, api API, st Strategy, text []byte) ([]byte, error) {
	list := "messages"
	if api == Gemini {
		list = "contents"
	}
	// The last member named list counts, as encoding/json reads the body.
	var at Token
	found := members(body, 0, func(key span, first Token, _ int) bool {
		if string(body[key.From:key.To]) == list {
			at = first
		}
		return true
	})
	if !found || at.Kind != BeginArray {
		return nil, errRequestJSON
	}
	var last Token
	var lastEnd int
	closing := elements(body, at.From, func(first Token, end int) bool {
		last, lastEnd = first, end
		return true
	})
	if closing < 0 {
		return nil, errRequestJSON
	}
	var e editor
	if last.Kind == BeginObject && lastIsAssistant(body, last.From, api) {
		if err := extend(&e, body, last.From, lastEnd, api, st, text); err != nil {
			return nil, err
		}
	} else {
		var msg []byte
		if last.Kind != None {
			msg = append(msg, ',')
		}
		msg = appendTurn(msg, api, st, text)
		where := at.To // right after [
		if last.Kind != None {
			where = lastEnd
		}
		e.replaceBytes(span{where, where}, msg)
	}
	return e.apply(make([]byte, 0, len(body)+len(text)+64), body), nil
}

// appendTurn appends the assistant's turn holding text.
func appendTurn(dst []byte, api API, st Strategy, text []byte) []byte {
	if api == Gemini {
		dst = append(dst, `{"role":"model","parts":[{"text":`...)
		return append(appendQuoted(dst, text), "}]}"...)
	}
	dst = append(dst, `{"role":"assistant","content":`...)
	dst = appendQuoted(dst, text)
	if st == PrefillPrefix {
		dst = append(dst, `,"prefix":true`...)
	}
	return append(dst, '}')
}

// lastIsAssistant reports whether the turn object at body[from:] is the
// assistant's (Gemini: the model's).
func lastIsAssistant(body []byte, from int, api API) bool {
	want := "assistant"
	if api == Gemini {
		want = "model"
	}
	is := false
	members(body, from, func(key span, first Token, end int) bool {
		if string(body[key.From:key.To]) == "role" {
			is = first.Kind == String && string(body[first.From+1:end-1]) == want
		}
		return true
	})
	return is
}

// extend adds text to the assistant's turn at body[from:to]: to its string
// content, or as a text block (Gemini: part) after the others; with
// PrefillPrefix it sets its "prefix" to true.
func extend(e *editor, body []byte, from, to int, api API, st Strategy, text []byte) error {
	content := "content"
	if api == Gemini {
		content = "parts"
	}
	var value, prefix Token
	var valueEnd, prefixEnd int
	members(body, from, func(key span, first Token, end int) bool {
		switch string(body[key.From:key.To]) {
		case content:
			value, valueEnd = first, end
		case "prefix":
			prefix, prefixEnd = first, end
		}
		return true
	})
	switch {
	case value.Kind == String && api != Gemini:
		old, _ := unquote(nil, body[value.From+1:valueEnd-1])
		e.replaceString(span{value.From, valueEnd}, append(old, text...))
	case value.Kind == BeginArray:
		var last Token
		var lastEnd int
		elements(body, value.From, func(first Token, end int) bool {
			last, lastEnd = first, end
			return true
		})
		block := []byte(`{"type":"text","text":`)
		if api == Gemini {
			block = []byte(`{"text":`)
		}
		block = append(appendQuoted(block, text), '}')
		if last.Kind == None {
			e.replaceBytes(span{value.To, value.To}, block)
		} else {
			e.replaceBytes(span{lastEnd, lastEnd}, []byte{','}, block)
		}
	default:
		return errLastTurn
	}
	if st == PrefillPrefix {
		if prefix.Kind != None {
			e.replaceBytes(span{prefix.From, prefixEnd}, []byte("true"))
		} else {
			e.replaceBytes(span{to - 1, to - 1}, []byte(`,"prefix":true`))
		}
	}
	return nil
}
