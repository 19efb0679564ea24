package wire

// The streams the stream follower and the splicer are tested on, in the
// providers' own shapes (their streaming references, and the fixtures of
// the SDKs' tests: openai-go's streamaccumulator_test.go, anthropic-sdk-go's
// message_test.go and betamessage_test.go, internal/testkit's replies),
// and accumulators that read a stream as the caller's SDK does, strictly:
// openai-go's ChatCompletionAccumulator (a chunk with another id is
// refused; [DONE] ends the stream; a top-level "error" fails it),
// anthropic-sdk-go's Message.Accumulate (a block starts at the next index;
// a delta or stop names a started block; an error event fails), genai's
// chunks and the Responses events' sequence numbers.

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
)

// quoteJSON is s as a JSON string (as the providers write it: <, > and &
// as they are).
func quoteJSON(s string) string {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(s)
	return strings.TrimSuffix(b.String(), "\n")
}

// ev is a typed event.
func ev(typ, data string) sseEvent { return sseEvent{typ, data} }

// dataEv is an untyped event.
func dataEv(data string) sseEvent { return sseEvent{"", data} }

// frameEvents writes events as a stream.
func frameEvents(evs []sseEvent) []byte {
	var b []byte
	for _, e := range evs {
		b = appendEvent(b, []byte(e.typ), []byte(e.data))
	}
	return b
}

// Chat Completions, as api.openai.com streams it with
// stream_options.include_usage (and its obfuscation padding).
const (
	chatID   = "chatcmpl-B9MHDbslfkBeAs8l4bebGdFOJ6PeG"
	chatID2  = "chatcmpl-C1xTq7wzRkQ0mFh2pLr9sVb3nYd8E"
	chatHead = `{"id":%q,"object":"chat.completion.chunk","created":1741570283,"model":"gpt-4o-2024-08-06","service_tier":"default","system_fingerprint":"fp_f9f4fb6dbf","choices":[{"index":0,"delta":`
)

// chatEvents is a Chat Completions stream whose id is id answering parts.
func chatEvents(id string, parts ...string) []sseEvent {
	head := fmt.Sprintf(chatHead, id)
	evs := []sseEvent{dataEv(head + `{"role":"assistant","content":"","refusal":null},"logprobs":null,"finish_reason":null}],"usage":null,"obfuscation":"kHq3"}`)}
	for _, p := range parts {
		evs = append(evs, dataEv(head+`{"content":`+quoteJSON(p)+`},"logprobs":null,"finish_reason":null}],"usage":null,"obfuscation":"x8"}`))
	}
	return append(evs,
		dataEv(head+`{},"logprobs":null,"finish_reason":"stop"}],"usage":null,"obfuscation":"Zt"}`),
		dataEv(fmt.Sprintf(`{"id":%q,"object":"chat.completion.chunk","created":1741570283,"model":"gpt-4o-2024-08-06","service_tier":"default","system_fingerprint":"fp_f9f4fb6dbf","choices":[],"usage":{"prompt_tokens":19,"completion_tokens":%d,"total_tokens":%d,"prompt_tokens_details":{"cached_tokens":0,"audio_tokens":0},"completion_tokens_details":{"reasoning_tokens":0,"audio_tokens":0,"accepted_prediction_tokens":0,"rejected_prediction_tokens":0}},"obfuscation":"Qe"}`, id, 1+len(parts), 20+len(parts))),
		dataEv("[DONE]"))
}

// chatToolEvents is a Chat Completions stream that says text, then calls
// get_weather.
func chatToolEvents() []sseEvent {
	head := fmt.Sprintf(chatHead, chatID)
	return []sseEvent{
		dataEv(head + `{"role":"assistant","content":null},"logprobs":null,"finish_reason":null}]}`),
		dataEv(head + `{"content":"Let me check."},"logprobs":null,"finish_reason":null}]}`),
		dataEv(head + `{"tool_calls":[{"index":0,"id":"call_DdmO9pD3xa9XTPNJ32zg2hcA","type":"function","function":{"name":"get_weather","arguments":""}}]},"logprobs":null,"finish_reason":null}]}`),
		dataEv(head + `{"tool_calls":[{"index":0,"function":{"arguments":"{\"location\":"}}]},"logprobs":null,"finish_reason":null}]}`),
		dataEv(head + `{"tool_calls":[{"index":0,"function":{"arguments":"\"Paris\"}"}}]},"logprobs":null,"finish_reason":null}]}`),
		dataEv(head + `{},"logprobs":null,"finish_reason":"tool_calls"}]}`),
		dataEv("[DONE]"),
	}
}

// chatAnswer is what the accumulator made of a Chat Completions stream.
type chatAnswer struct {
	id, text, finish      string
	finishes, done, roles int
	completionTokens      int
	tools                 string // the tool calls' arguments
}

// accumulateChat reads a Chat Completions stream as openai-go's
// ssestream and ChatCompletionAccumulator do, and fails where they fail
// or where one answer would not be whole (a second finish, an event
// after [DONE]).
func accumulateChat(stream []byte) (chatAnswer, error) {
	var a chatAnswer
	for _, e := range frameWhole(stream) {
		if a.done > 0 {
			return a, errors.New("an event after [DONE]")
		}
		if strings.HasPrefix(e.data, "[DONE]") {
			a.done++
			continue
		}
		var top map[string]json.RawMessage
		if err := json.Unmarshal([]byte(e.data), &top); err != nil {
			return a, err
		}
		if _, ok := top["error"]; ok {
			return a, errors.New("received error while streaming: " + string(top["error"]))
		}
		var c struct {
			ID      string `json:"id"`
			Choices []struct {
				Index int `json:"index"`
				Delta struct {
					Role      string  `json:"role"`
					Content   *string `json:"content"`
					ToolCalls []struct {
						Function struct {
							Arguments string `json:"arguments"`
						} `json:"function"`
					} `json:"tool_calls"`
				} `json:"delta"`
				FinishReason *string `json:"finish_reason"`
			} `json:"choices"`
			Usage *struct {
				CompletionTokens int `json:"completion_tokens"`
			} `json:"usage"`
		}
		if err := json.Unmarshal([]byte(e.data), &c); err != nil {
			return a, err
		}
		if a.id == "" {
			a.id = c.ID
		} else if c.ID != a.id {
			return a, fmt.Errorf("chunk id %q is not the first's %q", c.ID, a.id)
		}
		for _, ch := range c.Choices {
			if ch.Index != 0 {
				return a, fmt.Errorf("choice %d", ch.Index)
			}
			if ch.Delta.Role != "" {
				a.roles++
			}
			if ch.Delta.Content != nil {
				a.text += *ch.Delta.Content
			}
			for _, tc := range ch.Delta.ToolCalls {
				a.tools += tc.Function.Arguments
			}
			if ch.FinishReason != nil && *ch.FinishReason != "" {
				a.finish = *ch.FinishReason
				a.finishes++
			}
		}
		if c.Usage != nil {
			a.completionTokens += c.Usage.CompletionTokens
		}
	}
	return a, nil
}

// Anthropic Messages, as api.anthropic.com streams it.
const (
	msgID  = "msg_01XFDUDYJgAACzvnptvVoYEL"
	msgID2 = "msg_014p7gG3wDgGV9EUtLvnow3U"
)

// messagesEvents is a Messages stream whose message id is id answering
// parts in one text block.
func messagesEvents(id string, parts ...string) []sseEvent {
	evs := []sseEvent{
		ev("message_start", `{"type":"message_start","message":{"id":"`+id+`","type":"message","role":"assistant","model":"claude-sonnet-4-5-20250929","content":[],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":25,"cache_creation_input_tokens":0,"cache_read_input_tokens":0,"output_tokens":1,"service_tier":"standard"}}}`),
		ev("content_block_start", `{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}`),
		ev("ping", `{"type": "ping"}`),
	}
	for _, p := range parts {
		evs = append(evs, ev("content_block_delta", `{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":`+quoteJSON(p)+`}}`))
	}
	return append(evs,
		ev("content_block_stop", `{"type":"content_block_stop","index":0}`),
		ev("message_delta", fmt.Sprintf(`{"type":"message_delta","delta":{"stop_reason":"end_turn","stop_sequence":null},"usage":{"output_tokens":%d}}`, 2+len(parts))),
		ev("message_stop", `{"type":"message_stop"}`))
}

// messagesThinkingEvents is a Messages stream with extended thinking: a
// signed thinking block, then text (anthropic-sdk-go's "interleaved
// content blocks" fixture, in the API's own spacing).
func messagesThinkingEvents(parts ...string) []sseEvent {
	evs := []sseEvent{
		ev("message_start", `{"type":"message_start","message":{"id":"`+msgID+`","type":"message","role":"assistant","model":"claude-sonnet-4-5-20250929","content":[],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":40,"output_tokens":1}}}`),
		ev("content_block_start", `{"type":"content_block_start","index":0,"content_block":{"type":"thinking","thinking":""}}`),
		ev("content_block_delta", `{"type":"content_block_delta","index":0,"delta":{"type":"thinking_delta","thinking":"Let me think."}}`),
		ev("content_block_delta", `{"type":"content_block_delta","index":0,"delta":{"type":"signature_delta","signature":"EqQBCgIYAhIM1gbcDa9GJwZA2b3hGgxBdjrkzLoky3dl1pkiMOYds"}}`),
		ev("content_block_stop", `{"type":"content_block_stop","index":0}`),
		ev("content_block_start", `{"type":"content_block_start","index":1,"content_block":{"type":"text","text":""}}`),
	}
	for _, p := range parts {
		evs = append(evs, ev("content_block_delta", `{"type":"content_block_delta","index":1,"delta":{"type":"text_delta","text":`+quoteJSON(p)+`}}`))
	}
	return append(evs,
		ev("content_block_stop", `{"type":"content_block_stop","index":1}`),
		ev("message_delta", `{"type":"message_delta","delta":{"stop_reason":"end_turn","stop_sequence":null},"usage":{"output_tokens":30}}`),
		ev("message_stop", `{"type":"message_stop"}`))
}

// messagesToolEvents is a Messages stream that says text, then uses a
// tool (the streaming reference's tool-use example).
func messagesToolEvents() []sseEvent {
	return []sseEvent{
		ev("message_start", `{"type":"message_start","message":{"id":"`+msgID+`","type":"message","role":"assistant","model":"claude-sonnet-4-5-20250929","stop_sequence":null,"usage":{"input_tokens":472,"output_tokens":2},"content":[],"stop_reason":null}}`),
		ev("content_block_start", `{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}`),
		ev("ping", `{"type": "ping"}`),
		ev("content_block_delta", `{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Okay, let's check the weather for San Francisco, CA:"}}`),
		ev("content_block_stop", `{"type":"content_block_stop","index":0}`),
		ev("content_block_start", `{"type":"content_block_start","index":1,"content_block":{"type":"tool_use","id":"toolu_01T1x1fJ34qAmk2tNTrN7Up6","name":"get_weather","input":{}}}`),
		ev("content_block_delta", `{"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":""}}`),
		ev("content_block_delta", `{"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":"{\"location\":"}}`),
		ev("content_block_delta", `{"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":" \"San Francisco, CA\"}"}}`),
		ev("content_block_stop", `{"type":"content_block_stop","index":1}`),
		ev("message_delta", `{"type":"message_delta","delta":{"stop_reason":"tool_use","stop_sequence":null},"usage":{"output_tokens":89}}`),
		ev("message_stop", `{"type":"message_stop"}`),
	}
}

// messagesAnswer is what the accumulator made of a Messages stream.
type messagesAnswer struct {
	id           string
	blocks       []messagesBlockAnswer
	stop         string
	outputTokens int
	starts       int // message_start
	deltas       int // message_delta
	ends         int // message_stop
}

// messagesBlockAnswer is one content block.
type messagesBlockAnswer struct {
	typ, text string
	stopped   bool
}

// text is the answer's text blocks joined.
func (a messagesAnswer) text() string {
	var b strings.Builder
	for _, bl := range a.blocks {
		b.WriteString(bl.text)
	}
	return b.String()
}

// accumulateMessages reads a Messages stream as anthropic-sdk-go's
// ssestream and Message.Accumulate do, and fails where they fail or where
// one answer would not be whole (a second message_start, a block stopped
// twice, an event after message_stop).
func accumulateMessages(stream []byte) (messagesAnswer, error) {
	var a messagesAnswer
	for _, e := range frameWhole(stream) {
		switch e.typ {
		case "ping", "":
			continue
		case "error":
			return a, errors.New("received error while streaming: " + e.data)
		}
		if a.ends > 0 {
			return a, errors.New("an event after message_stop")
		}
		var m struct {
			Type    string `json:"type"`
			Index   int    `json:"index"`
			Message struct {
				ID string `json:"id"`
			} `json:"message"`
			ContentBlock struct {
				Type string `json:"type"`
				Text string `json:"text"`
			} `json:"content_block"`
			Delta struct {
				Type       string `json:"type"`
				Text       string `json:"text"`
				StopReason string `json:"stop_reason"`
			} `json:"delta"`
			Usage struct {
				OutputTokens int `json:"output_tokens"`
			} `json:"usage"`
		}
		if err := json.Unmarshal([]byte(e.data), &m); err != nil {
			return a, err
		}
		switch m.Type {
		case "message_start":
			if a.starts++; a.starts > 1 {
				return a, errors.New("a second message_start")
			}
			a.id = m.Message.ID
		case "content_block_start":
			if m.Index != len(a.blocks) {
				return a, fmt.Errorf("received event of type content_block_start for content block at index %d, expected index %d", m.Index, len(a.blocks))
			}
			a.blocks = append(a.blocks, messagesBlockAnswer{typ: m.ContentBlock.Type, text: m.ContentBlock.Text})
		case "content_block_delta", "content_block_stop":
			if m.Index < 0 || m.Index >= len(a.blocks) {
				return a, fmt.Errorf("%s for content block %d of %d", m.Type, m.Index, len(a.blocks))
			}
			b := &a.blocks[m.Index]
			if m.Type == "content_block_stop" {
				if b.stopped {
					return a, fmt.Errorf("block %d stopped twice", m.Index)
				}
				b.stopped = true
			} else if m.Delta.Type == "text_delta" {
				b.text += m.Delta.Text
			}
		case "message_delta":
			a.deltas++
			a.stop = m.Delta.StopReason
			a.outputTokens = m.Usage.OutputTokens
		case "message_stop":
			a.ends++
		}
	}
	return a, nil
}

// Gemini, as generativelanguage.googleapis.com streams it with alt=sse
// (the testkit's chunks).
const (
	geminiID  = "mMYzaLXZO9ryjMcPmtLp6Qk"
	geminiID2 = "q2wzaJmDKOeVjMcP-Ij2gAo"
)

// geminiEvents is a Gemini stream answering parts, the last chunk
// carrying finishReason STOP.
func geminiEvents(id string, parts ...string) []sseEvent {
	var evs []sseEvent
	for i, p := range parts {
		cand := `{"content": {"parts": [{"text": ` + quoteJSON(p) + `}],"role": "model"},"index": 0`
		if i == len(parts)-1 {
			cand += `,"finishReason": "STOP"`
		}
		evs = append(evs, dataEv(`{"candidates": [`+cand+`}],"usageMetadata": {"promptTokenCount": 8,"candidatesTokenCount": 9,"totalTokenCount": 17,"promptTokensDetails": [{"modality": "TEXT","tokenCount": 8}]},"modelVersion": "gemini-2.5-flash","responseId": "`+id+`"}`))
	}
	return evs
}

// geminiAnswer is what a genai caller makes of a Gemini stream: the first
// candidate's text, thoughts left out.
type geminiAnswer struct {
	text     string
	ids      map[string]bool
	finishes int
}

// accumulateGemini reads a Gemini stream as genai does (a chunk with an
// "error" fails it) and joins the text as its callers do.
func accumulateGemini(stream []byte) (geminiAnswer, error) {
	a := geminiAnswer{ids: map[string]bool{}}
	for _, e := range frameWhole(stream) {
		var c struct {
			Error      json.RawMessage `json:"error"`
			Candidates []struct {
				Content struct {
					Parts []struct {
						Text    string `json:"text"`
						Thought bool   `json:"thought"`
					} `json:"parts"`
				} `json:"content"`
				FinishReason string `json:"finishReason"`
			} `json:"candidates"`
			ResponseID string `json:"responseId"`
		}
		if err := json.Unmarshal([]byte(e.data), &c); err != nil {
			return a, err
		}
		if c.Error != nil {
			return a, errors.New("error: " + string(c.Error))
		}
		if c.ResponseID != "" {
			a.ids[c.ResponseID] = true
		}
		for i, cand := range c.Candidates {
			if i > 0 {
				return a, errors.New("a second candidate")
			}
			for _, p := range cand.Content.Parts {
				if !p.Thought {
					a.text += p.Text
				}
			}
			if cand.FinishReason != "" {
				a.finishes++
			}
		}
	}
	return a, nil
}

// OpenAI Responses, as api.openai.com streams it.
const (
	respID   = "resp_67c9fdcecf488190bdd9a0409de3a1ec07b8b0ad4e5eb654"
	respItem = "msg_67c9fdcf37fc8190ba82116e33fb28c507b8b0ad4e5eb654"
)

// responsesEvents is a Responses stream created with background: true
// answering parts.
func responsesEvents(parts ...string) []sseEvent { return responsesStream(true, parts...) }

// responsesStream is a Responses stream answering parts, created in the
// background or not.
func responsesStream(background bool, parts ...string) []sseEvent {
	seq := 0
	next := func(typ, rest string) sseEvent {
		e := ev(typ, fmt.Sprintf(`{"type":%q,"sequence_number":%d,%s}`, typ, seq, rest))
		seq++
		return e
	}
	resp := func(status, output string) string {
		return `"response":{"id":"` + respID + `","object":"response","created_at":1741290958,"status":"` + status + `","background":` + fmt.Sprint(background) + `,"error":null,"incomplete_details":null,"model":"gpt-4.1-2025-04-14","output":[` + output + `]}`
	}
	text := strings.Join(parts, "")
	evs := []sseEvent{
		next("response.created", resp("queued", "")),
		next("response.in_progress", resp("in_progress", "")),
		next("response.output_item.added", `"output_index":0,"item":{"id":"`+respItem+`","type":"message","status":"in_progress","content":[],"role":"assistant"}`),
		next("response.content_part.added", `"item_id":"`+respItem+`","output_index":0,"content_index":0,"part":{"type":"output_text","annotations":[],"text":""}`),
	}
	for _, p := range parts {
		evs = append(evs, next("response.output_text.delta", `"item_id":"`+respItem+`","output_index":0,"content_index":0,"delta":`+quoteJSON(p)+`,"logprobs":[]`))
	}
	item := `{"id":"` + respItem + `","type":"message","status":"completed","content":[{"type":"output_text","annotations":[],"text":` + quoteJSON(text) + `}],"role":"assistant"}`
	return append(evs,
		next("response.output_text.done", `"item_id":"`+respItem+`","output_index":0,"content_index":0,"text":`+quoteJSON(text)+`,"logprobs":[]`),
		next("response.content_part.done", `"item_id":"`+respItem+`","output_index":0,"content_index":0,"part":{"type":"output_text","annotations":[],"text":`+quoteJSON(text)+`}`),
		next("response.output_item.done", `"output_index":0,"item":`+item),
		next("response.completed", resp("completed", item)))
}

// responsesAnswer is what a Responses stream's reader makes of it.
type responsesAnswer struct {
	id, text  string
	completed int
	lastSeq   int
}

// accumulateResponses reads a Responses stream, and fails where the
// sequence numbers are not continuous from 0.
func accumulateResponses(stream []byte) (responsesAnswer, error) {
	a := responsesAnswer{lastSeq: -1}
	for _, e := range frameWhole(stream) {
		var r struct {
			Type     string `json:"type"`
			Seq      int    `json:"sequence_number"`
			Delta    string `json:"delta"`
			Response struct {
				ID string `json:"id"`
			} `json:"response"`
		}
		if err := json.Unmarshal([]byte(e.data), &r); err != nil {
			return a, err
		}
		if r.Seq != a.lastSeq+1 {
			return a, fmt.Errorf("sequence number %d after %d", r.Seq, a.lastSeq)
		}
		a.lastSeq = r.Seq
		switch r.Type {
		case "response.created":
			a.id = r.Response.ID
		case "response.output_text.delta":
			a.text += r.Delta
		case "response.completed":
			a.completed++
		case "error", "response.failed":
			return a, errors.New("error event: " + e.data)
		}
	}
	return a, nil
}

// observe tells s each event, and returns their steps.
func observe(s *Stream, evs []sseEvent) []Step {
	steps := make([]Step, len(evs))
	for i, e := range evs {
		steps[i] = s.Observe([]byte(e.typ), []byte(e.data))
	}
	return steps
}
