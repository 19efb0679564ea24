package wire

// This file reads one event of a committed stream, API by API, with the
// checked walk (walk.go): what the stream follower (stream.go) records and
// where the splicer (splice.go) edits. Each reader reports false for data
// that is not one JSON object (every SDK decodes an event's data into a
// struct, which a number, a string or an array is not), and then its facts
// are not to be used. The
// paths are the shapes table's (apis.go) where it names them; the rest are
// the providers' (their streaming references, and the SDKs that read them:
// openai-go's ChatCompletionAccumulator, anthropic-sdk-go's
// Message.Accumulate, genai's GenerateContentResponse).

// The paths the readers look at, compiled.
var (
	pChatChunkID                      = compile(chatChunk.ID)
	pErrorPath                        = compile(errorPath)
	pChoices                          = compile("choices")
	pPromptFilterResults              = compile("prompt_filter_results")
	pChatChunkUsage                   = compile(chatChunk.Usage)
	pChoicesElem                      = compile("choices[]")
	pChatChunkIndex                   = compile(chatChunk.Index)
	pChatChunkStop                    = compile(chatChunk.Stop)
	pChoicesElemDelta                 = compile("choices[].delta")
	pChatChunkText                    = compile(chatChunk.Text)
	pChoicesElemDeltaRole             = compile("choices[].delta.role")
	pChoicesElemDeltaToolCalls        = compile("choices[].delta.tool_calls")
	pChoicesElemDeltaFunctionCall     = compile("choices[].delta.function_call")
	pChoicesElemDeltaRefusal          = compile("choices[].delta.refusal")
	pChoicesElemDeltaReasoningContent = compile("choices[].delta.reasoning_content")
	pChoicesElemDeltaReasoning        = compile("choices[].delta.reasoning")
	pType                             = compile("type")
	pMessagesBlockIndex               = compile(messagesBlock.Index)
	pMessagesStartID                  = compile(messagesStart.ID)
	pContentBlockType                 = compile("content_block.type")
	pMessagesBlockText                = compile(messagesBlock.Text)
	pDeltaType                        = compile("delta.type")
	pMessagesDeltaText                = compile(messagesDelta.Text)
	pMessagesEndStop                  = compile(messagesEnd.Stop)
	pResponsesOpenSeq                 = compile(responsesOpen.Seq)
	pResponsesTextText                = compile(responsesText.Text)
	pResponsesOpenID                  = compile(responsesOpen.ID)
	pItemType                         = compile("item.type")
	pResponseBackground               = compile("response.background")
	pGeminiChunkID                    = compile(geminiChunk.ID)
	pCandidatesElem                   = compile("candidates[]")
	pGeminiChunkIndex                 = compile(geminiChunk.Index)
	pGeminiChunkStop                  = compile(geminiChunk.Stop)
	pCandidatesElemContent            = compile("candidates[].content")
	pPartsElem                        = compile("candidates[].content.parts[]")
)

// chatFacts is what a Chat Completions chunk says. Its first choice's
// members are read; a second choice sets several.
type chatFacts struct {
	done         bool // "[DONE]"
	err          bool // a top-level "error" object with members, or a string with more than whitespace
	several      bool // a choice at a position or index other than 0
	noChoices    bool // "choices": []
	promptFilter bool // Azure's "prompt_filter_results"
	usage        bool // a "usage" object
	id           span // the chunk's id, between its quotes
	delta        span // the first choice's delta object, braces included
	content      span // its delta.content string, between its quotes
	hasContent   bool
	nullContent  span // its delta.content when not a string ("content": null beside a finish or tool calls)
	role         bool // delta.role
	tool         bool // delta.tool_calls with an element, or delta.function_call
	refusal      bool // delta.refusal with text
	reasoning    bool // delta.reasoning_content or delta.reasoning with text (DeepSeek, OpenRouter, vLLM)
	finish       bool // the first choice's finish_reason is a string with text
	// seen and finished are the choice indices (0 to 127) the chunk
	// carries, and those it finishes.
	seen, finished [2]uint64
}

// chat reads a Chat Completions chunk.
func (w *walker) chat(data []byte, f *chatFacts) bool {
	*f = chatFacts{}
	if hasPrefix(data, chatDone) { // openai-go ends a stream at data starting with [DONE]
		f.done = true
		return true
	}
	w.reset(data)
	pos, index, finish := -1, -1, false // of the choice being read
	for t, ok := w.next(); ok; t, ok = w.next() {
		switch w.vdepth {
		case 1:
			switch {
			case w.at(&pChatChunkID):
				setString(t, &f.id)
			case w.at(&pErrorPath):
				f.err = w.errorValue(t, f.err)
			case w.at(&pChoices):
				if t.Kind == EndArray {
					f.noChoices = blank(data[w.path[1].open+1 : t.From])
				}
			case w.at(&pPromptFilterResults):
				f.promptFilter = true
			case w.at(&pChatChunkUsage):
				f.usage = f.usage || t.Kind == BeginObject
			}
		case 2:
			if !w.at(&pChoicesElem) {
				break
			}
			switch t.Kind {
			case BeginObject:
				pos, index, finish = w.elem(1), -1, false
			case EndObject:
				if index < 0 {
					index = pos
				}
				if index != 0 || pos != 0 {
					f.several = true
				}
				if index >= 0 && index < 128 {
					f.seen[index/64] |= 1 << (index % 64)
					if finish {
						f.finished[index/64] |= 1 << (index % 64)
					}
				}
				if pos == 0 {
					f.finish = finish
				}
			}
		case 3:
			switch {
			case w.at(&pChatChunkIndex):
				if t.Kind == Scalar {
					index = parseIndex(data[t.From:t.To])
				}
			case w.at(&pChatChunkStop):
				finish = nonEmpty(t)
			case pos == 0 && w.at(&pChoicesElemDelta):
				switch t.Kind {
				case BeginObject:
					f.delta.From = t.From
				case EndObject:
					f.delta.To = t.To
				}
			}
		case 4:
			if pos != 0 {
				break
			}
			switch {
			case w.at(&pChatChunkText):
				setText(t, &f.content, &f.hasContent)
				if t.Kind == Scalar {
					f.nullContent = span{t.From, t.To}
				}
			case w.at(&pChoicesElemDeltaRole):
				f.role = f.role || t.Kind == String
			case w.at(&pChoicesElemDeltaToolCalls):
				if t.Kind == EndArray {
					f.tool = f.tool || !blank(data[w.path[4].open+1:t.From])
				}
			case w.at(&pChoicesElemDeltaFunctionCall):
				f.tool = f.tool || t.Kind == BeginObject
			case w.at(&pChoicesElemDeltaRefusal):
				f.refusal = f.refusal || nonEmpty(t)
			case w.at(&pChoicesElemDeltaReasoningContent), w.at(&pChoicesElemDeltaReasoning):
				f.reasoning = f.reasoning || nonEmpty(t)
			}
		}
	}
	return w.isObject()
}

// errorPath is the path of the error member of Chat Completions' and
// Gemini's error events (the shape errorMember).
const errorPath = "error"

// errorValue reads token t of a top-level "error" member: it is an error
// when it is a string with more than whitespace or an object with
// members (judged at its closing brace); null, {} and the like are not.
// was is what the member's earlier tokens said.
func (w *walker) errorValue(t Token, was bool) bool {
	switch t.Kind {
	case String:
		return !blank(w.data[t.From+1 : t.To-1])
	case EndObject:
		return !blank(w.data[w.path[1].open+1 : t.From])
	case BeginObject:
		return was
	}
	return false
}

// messagesFacts is what an Anthropic Messages event says.
type messagesFacts struct {
	typ          span // the JSON "type", between its quotes
	err          bool // a top-level "error" object or string
	id           span // message.id (message_start)
	index        int  // "index", or -1
	indexAt      span // where the index's number is
	blockType    span // content_block.type (content_block_start)
	blockText    span // content_block.text, between its quotes
	hasBlockText bool
	deltaType    span // delta.type (content_block_delta)
	deltaText    span // delta.text, between its quotes (a text_delta)
	hasDeltaText bool
	stop         bool // delta.stop_reason is a string (message_delta)
}

// messages reads an Anthropic Messages event.
func (w *walker) messages(data []byte, f *messagesFacts) bool {
	*f = messagesFacts{index: -1}
	w.reset(data)
	for t, ok := w.next(); ok; t, ok = w.next() {
		switch w.vdepth {
		case 1:
			switch {
			case w.at(&pType):
				setString(t, &f.typ)
			case w.at(&pMessagesBlockIndex):
				if t.Kind == Scalar {
					f.index, f.indexAt = parseIndex(data[t.From:t.To]), span{t.From, t.To}
				}
			case w.at(&pErrorPath):
				f.err = w.errorValue(t, f.err)
			}
		case 2:
			switch {
			case w.at(&pMessagesStartID):
				setString(t, &f.id)
			case w.at(&pContentBlockType):
				setString(t, &f.blockType)
			case w.at(&pMessagesBlockText):
				setText(t, &f.blockText, &f.hasBlockText)
			case w.at(&pDeltaType):
				setString(t, &f.deltaType)
			case w.at(&pMessagesDeltaText):
				setText(t, &f.deltaText, &f.hasDeltaText)
			case w.at(&pMessagesEndStop):
				f.stop = nonEmpty(t)
			}
		}
	}
	return w.isObject()
}

// responsesFacts is what an OpenAI Responses event says.
type responsesFacts struct {
	done     bool // "[DONE]"
	typ      span // the JSON "type", between its quotes
	err      bool // a top-level "error" object or string
	id       span // response.id
	seq      int64
	hasSeq   bool
	itemType span // item.type (output_item.added, output_item.done)
	// background says response.background is true (response.created,
	// response.queued, response.in_progress: the response runs in the
	// background).
	background bool
	delta      span // "delta", between its quotes (output_text.delta)
	hasDelta   bool
}

// responses reads an OpenAI Responses event.
func (w *walker) responses(data []byte, f *responsesFacts) bool {
	*f = responsesFacts{}
	if hasPrefix(data, chatDone) {
		f.done = true
		return true
	}
	w.reset(data)
	for t, ok := w.next(); ok; t, ok = w.next() {
		switch w.vdepth {
		case 1:
			switch {
			case w.at(&pType):
				setString(t, &f.typ)
			case w.at(&pResponsesOpenSeq):
				if t.Kind == Scalar {
					f.seq, f.hasSeq = parseSeq(data[t.From:t.To])
				}
			case w.at(&pResponsesTextText):
				setText(t, &f.delta, &f.hasDelta)
			case w.at(&pErrorPath):
				f.err = w.errorValue(t, f.err)
			}
		case 2:
			switch {
			case w.at(&pResponsesOpenID):
				setString(t, &f.id)
			case w.at(&pItemType):
				setString(t, &f.itemType)
			case w.at(&pResponseBackground):
				f.background = t.Kind == Scalar && string(data[t.From:t.To]) == "true"
			}
		}
	}
	return w.isObject()
}

// partKind is what a Gemini part carries.
type partKind uint8

const (
	partText  partKind = iota // text (or nothing known)
	partTool                  // a function call or response, code to execute or its result
	partOther                 // inline or file data: not text
)

// geminiPart is one part of a Gemini candidate's content.
type geminiPart struct {
	kind    partKind
	thought bool // "thought": true: a thought summary, not the answer
	text    span // "text", between its quotes
	hasText bool
}

// geminiFacts is what a Gemini GenerateContentResponse says; the parts of
// its first candidate are in the slice the reader is given.
type geminiFacts struct {
	err     bool // a top-level "error"
	several bool // a candidate at a position or index other than 0
	finish  bool // the first candidate's finishReason
	content bool // the first candidate has a content
	id      span // responseId, between its quotes
}

// gemini reads a Gemini GenerateContentResponse; with collect, it appends
// the first candidate's parts to parts[:0] and returns them.
func (w *walker) gemini(data []byte, f *geminiFacts, parts []geminiPart, collect bool) ([]geminiPart, bool) {
	*f = geminiFacts{}
	parts = parts[:0]
	w.reset(data)
	pos := -1 // of the candidate being read
	var part geminiPart
	for t, ok := w.next(); ok; t, ok = w.next() {
		switch w.vdepth {
		case 1:
			switch {
			case w.at(&pGeminiChunkID):
				setString(t, &f.id)
			case w.at(&pErrorPath):
				f.err = w.errorValue(t, f.err)
			}
		case 2:
			if w.at(&pCandidatesElem) && t.Kind == BeginObject {
				if pos = w.elem(1); pos != 0 {
					f.several = true
				}
			}
		case 3:
			switch {
			case w.at(&pGeminiChunkIndex):
				if t.Kind == Scalar && parseIndex(data[t.From:t.To]) != 0 {
					f.several = true
				}
			case pos == 0 && w.at(&pGeminiChunkStop):
				f.finish = nonEmpty(t)
			case pos == 0 && w.at(&pCandidatesElemContent):
				f.content = f.content || t.Kind == BeginObject
			}
		case 5:
			if pos == 0 && w.at(&pPartsElem) {
				switch t.Kind {
				case BeginObject:
					part = geminiPart{}
				case EndObject:
					if collect {
						parts = append(parts, part)
					}
				}
			}
		case 6:
			if pos != 0 || !w.in(&pPartsElem) || w.path[5].array {
				break
			}
			switch string(w.text(w.path[5].key)) {
			case "text":
				setText(t, &part.text, &part.hasText)
			case "thought":
				part.thought = t.Kind == Scalar && string(data[t.From:t.To]) == "true"
			case "functionCall", "functionResponse", "executableCode", "codeExecutionResult", "toolCall", "toolResponse":
				part.kind = partTool
			case "inlineData", "fileData":
				if part.kind == partText {
					part.kind = partOther
				}
			}
		}
	}
	return parts, w.isObject()
}

// setString sets s to string token t's bytes between its quotes, if t is
// a string.
func setString(t Token, s *span) {
	if t.Kind == String {
		*s = raw(t)
	}
}

// setText is setString that also says the string was there.
func setText(t Token, s *span, has *bool) {
	if t.Kind == String {
		*s, *has = raw(t), true
	}
}

// nonEmpty reports whether t is a string with at least one byte between
// its quotes (a finish_reason, a stop_reason, a refusal).
func nonEmpty(t Token) bool {
	return t.Kind == String && t.To-t.From > 2
}
