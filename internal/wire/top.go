package wire

// topLevel is what a JSON object's top level says about a stream event,
// found without decoding and without allocating: the members that tell
// an error, a preamble and content apart (see judgeEvent).
type topLevel struct {
	typ  []byte // the raw text of a top-level "type" string
	err  bool   // a top-level "error" that is an object with members or a string with more than whitespace
	keys int    // the number of top-level members
	// noChoices ("choices": []) and promptFilter (a
	// "prompt_filter_results" member) mark Azure OpenAI's first chunk,
	// which carries no content.
	noChoices, promptFilter bool
}

// read reads the object data starts with, and reports whether it is one:
// members of a string key, a colon and a value, separated by commas.
// Values are skipped, not validated, and keys are compared as written (an
// escaped "type" is not seen); bytes after the object are not looked at.
func (t *topLevel) read(data []byte) bool {
	var l Lexer
	tok, i := l.Next(data, 0)
	if tok.Kind != BeginObject {
		return false
	}
	tok, i = l.Next(data, i)
	if tok.Kind == EndObject {
		return true
	}
	for {
		if tok.Kind != String || tok.Open() {
			return false
		}
		key := data[tok.From+1 : tok.To-1]
		if tok, i = l.Next(data, i); tok.Kind != Colon {
			return false
		}
		first, end := l.Next(data, i)
		if first.Open() {
			return false
		}
		switch first.Kind {
		case String, Scalar:
		case BeginObject, BeginArray:
			// Skip to the matching closer (of either kind).
			if end = l.Skip(data, end, 1); l.Depth() > 1 {
				return false
			}
		default:
			return false
		}
		t.member(key, data, first, end)
		switch tok, i = l.Next(data, end); tok.Kind {
		case EndObject:
			return true
		case Comma:
			tok, i = l.Next(data, i)
		default:
			return false
		}
	}
}

// member records the member key whose value starts with token first and
// ends at data[end].
func (t *topLevel) member(key, data []byte, first Token, end int) {
	t.keys++
	switch string(key) {
	case "type":
		t.typ = nil
		if first.Kind == String {
			t.typ = data[first.From+1 : end-1]
		}
	case "error":
		t.err = (first.Kind == BeginObject || first.Kind == String) && !blank(data[first.From+1:end-1])
	case "choices":
		t.noChoices = first.Kind == BeginArray && blank(data[first.From+1:end-1])
	case "prompt_filter_results":
		t.promptFilter = true
	}
}

// blank reports whether b holds only JSON whitespace.
func blank(b []byte) bool {
	for _, c := range b {
		if !isSpace(c) {
			return false
		}
	}
	return true
}
