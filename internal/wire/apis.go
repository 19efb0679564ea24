package wire

import (
	"net/url"
	"strings"
)

// This file names, in one place, the events each API's stream carries:
// which open a stream without content, which only keep it alive, which
// carry the answer, which say it is complete and which are errors in its
// place, and where each keeps what continuing a stream cut mid-answer
// reads (ids, indices, sequence numbers, stop reasons, usage, the answer's
// text). The stream guard's verdict on a stream's opening (firstevent.go)
// reads its roles from here, the stream follower and the splicer
// (stream.go, splice.go) their paths.
//
// Sources: OpenAI's Chat Completions and Responses streaming references
// and openai-go packages/ssestream; Anthropic's "Streaming Messages" and
// anthropic-sdk-go packages/ssestream; Gemini's streamGenerateContent
// (?alt=sse) reference; AWS's "Amazon event stream encoding" and Bedrock's
// ConverseStream and InvokeModelWithResponseStream.

// The media types of streamed replies.
const (
	// MediaSSE is server-sent events: Chat Completions, Responses,
	// Anthropic Messages, Gemini with ?alt=sse.
	MediaSSE = "text/event-stream"
	// MediaEventStream is AWS's binary event stream (Bedrock's streaming
	// operations): length-prefixed frames with headers and a CRC, which
	// this package recognises and does not decode (Frames follows their
	// lengths only; an error in it is the SDK's to read).
	MediaEventStream = "application/vnd.amazon.eventstream"
)

// API is a model API whose streams this package reads; the zero API is
// none of them.
type API uint8

// The APIs.
const (
	// ChatCompletions is OpenAI's /v1/chat/completions, and the APIs that
	// copy it (Azure OpenAI, Groq, DeepSeek, Mistral, OpenRouter, …):
	// untyped events, one JSON chunk each, ended by "[DONE]".
	ChatCompletions API = iota + 1
	// Responses is OpenAI's /v1/responses: typed events ("event:" and the
	// JSON "type" agree), each with a sequence_number.
	Responses
	// Messages is Anthropic's /v1/messages (also on Bedrock and Vertex):
	// typed events ("event:" and the JSON "type" agree).
	Messages
	// Gemini is Google's :streamGenerateContent?alt=sse: untyped events,
	// one GenerateContentResponse each, no end marker.
	Gemini
	// Bedrock is AWS Bedrock's event stream (MediaEventStream), not
	// server-sent events.
	Bedrock
)

// Role is what an event is to the stream that carries it; the zero Role
// is RoleContent.
type Role uint8

// The roles.
const (
	// RoleContent carries (part of) the answer. An event no shape names is
	// taken for content: when unsure, it is an answer.
	RoleContent Role = iota
	// RolePreamble opens a stream and carries no content yet.
	RolePreamble
	// RoleKeepAlive says the stream is alive, and nothing else (SSE
	// comments, ": keep-alive", are not events at all).
	RoleKeepAlive
	// RoleCompletion says the answer is complete.
	RoleCompletion
	// RoleError is an error in place of (the rest of) the answer.
	RoleError
)

// Shape is one kind of event an API's stream carries, a plain value. Paths
// are dotted JSON paths into the event's data ("[]" marks an array); empty
// when the event carries no such thing.
type Shape struct {
	// API is the API whose stream carries the event.
	API API
	// Type is the event's type as the API writes it (its "event:" field,
	// repeated as the JSON "type"), for typed APIs; for untyped ones
	// (Chat Completions, Gemini) it is empty and Name says what the
	// shape is.
	Type string
	// Name names an untyped shape; empty for a typed one.
	Name string
	// Role is what the event is to its stream.
	Role Role
	// ID is the path of the message's or response's id.
	ID string
	// Index is the path of the index of the block, choice, candidate or
	// output item the event belongs to.
	Index string
	// Seq is the path of the event's sequence number.
	Seq string
	// Stop is the path of the reason the answer stopped.
	Stop string
	// Usage is the path of the token usage the event reports.
	Usage string
	// Text is the path of the answer's text the event carries.
	Text string
}

// Shapes returns the events this package knows, API by API. The slice is
// a fresh copy the caller owns.
func Shapes() []Shape { return append([]Shape(nil), shapes[:]...) }

// shapes is the table Shapes returns and the first event's verdict reads.
var shapes = [...]Shape{
	// Chat Completions: every event is a chunk, or [DONE].
	{API: ChatCompletions, Name: "chat.completion.chunk", Role: RoleContent,
		ID: "id", Index: "choices[].index", Stop: "choices[].finish_reason", Usage: "usage", Text: "choices[].delta.content"},
	{API: ChatCompletions, Name: chatRoleChunk, Role: RolePreamble, ID: "id", Index: "choices[].index"},
	{API: ChatCompletions, Name: azurePromptFilter, Role: RolePreamble},
	{API: ChatCompletions, Name: chatDone, Role: RoleCompletion},
	{API: ChatCompletions, Name: errorMember, Role: RoleError},

	// Responses.
	{API: Responses, Type: "response.created", Role: RolePreamble, ID: "response.id", Seq: "sequence_number"},
	{API: Responses, Type: "response.queued", Role: RolePreamble, ID: "response.id", Seq: "sequence_number"}, // a background response's
	{API: Responses, Type: "response.in_progress", Role: RolePreamble, ID: "response.id", Seq: "sequence_number"},
	{API: Responses, Type: "response.output_item.added", Role: RoleContent, Index: "output_index", Seq: "sequence_number"},
	{API: Responses, Type: "response.content_part.added", Role: RoleContent, Index: "output_index", Seq: "sequence_number"},
	{API: Responses, Type: "response.output_text.delta", Role: RoleContent, Index: "output_index", Seq: "sequence_number", Text: "delta"},
	{API: Responses, Type: "response.output_text.done", Role: RoleContent, Index: "output_index", Seq: "sequence_number"},
	{API: Responses, Type: "response.output_item.done", Role: RoleContent, Index: "output_index", Seq: "sequence_number"},
	{API: Responses, Type: "response.completed", Role: RoleCompletion, ID: "response.id", Seq: "sequence_number", Usage: "response.usage"},
	{API: Responses, Type: "response.incomplete", Role: RoleCompletion, ID: "response.id", Seq: "sequence_number",
		Stop: "response.incomplete_details.reason", Usage: "response.usage"},
	{API: Responses, Type: "response.failed", Role: RoleError, ID: "response.id", Seq: "sequence_number"},
	{API: Responses, Type: "error", Role: RoleError, Seq: "sequence_number"},

	// Anthropic Messages.
	{API: Messages, Type: "message_start", Role: RolePreamble, ID: "message.id", Usage: "message.usage"},
	{API: Messages, Type: "content_block_start", Role: RolePreamble, Index: "index", Text: "content_block.text"},
	{API: Messages, Type: "ping", Role: RoleKeepAlive},
	{API: Messages, Type: "content_block_delta", Role: RoleContent, Index: "index", Text: "delta.text"},
	{API: Messages, Type: "content_block_stop", Role: RoleContent, Index: "index"},
	{API: Messages, Type: "message_delta", Role: RoleContent, Stop: "delta.stop_reason", Usage: "usage"}, // usage is cumulative
	{API: Messages, Type: "message_stop", Role: RoleCompletion},
	{API: Messages, Type: "error", Role: RoleError},

	// Gemini: every event is a GenerateContentResponse, or an error.
	{API: Gemini, Name: "GenerateContentResponse", Role: RoleContent,
		ID: "responseId", Index: "candidates[].index", Stop: "candidates[].finishReason", Usage: "usageMetadata",
		Text: "candidates[].content.parts[].text"},
	{API: Gemini, Name: errorMember, Role: RoleError},

	// Bedrock: recognised by its media type, handed over untouched.
	{API: Bedrock, Name: MediaEventStream, Role: RoleContent},
}

// Names of the untyped shapes, recognised by their data.
const (
	// chatRoleChunk is the chunk every Chat Completions stream opens with:
	// the assistant's role, no content yet (see roleChunk).
	chatRoleChunk = "chat.completion.chunk (role only)"
	// azurePromptFilter is Azure OpenAI's first chunk: "choices": [] and
	// its prompt_filter_results.
	azurePromptFilter = "chat.completion.chunk (prompt filter)"
	// chatDone is the data "[DONE]" that ends a Chat Completions stream.
	chatDone = "[DONE]"
	// errorMember is an untyped event whose data has a top-level "error".
	errorMember = "error member"
)

// roleOf returns the role of a typed event: of typ as an "event:" field or
// the JSON "type", whatever the API, and the index of its shape in the
// table; false if no typed shape has it (an empty typ, an untyped event,
// has none).
func roleOf(typ []byte) (Role, int, bool) {
	if len(typ) == 0 {
		return RoleContent, -1, false
	}
	for i := range shapes {
		if s := &shapes[i]; s.Type != "" && s.Type == string(typ) {
			return s.Role, i, true
		}
	}
	return RoleContent, -1, false
}

// shapeOf returns the shape of api whose Type is typ, or whose Name is
// name when typ is empty; nil if the table has none.
func shapeOf(api API, typ []byte, name string) *Shape {
	for i := range shapes {
		s := &shapes[i]
		if s.API == api && (len(typ) > 0 && s.Type == string(typ) || len(typ) == 0 && name != "" && s.Name == name) {
			return s
		}
	}
	return nil
}

// The shapes the stream follower reads most, looked up once.
var (
	chatChunk     = shapeOf(ChatCompletions, nil, "chat.completion.chunk")
	geminiChunk   = shapeOf(Gemini, nil, "GenerateContentResponse")
	messagesStart = shapeOf(Messages, []byte("message_start"), "")
	messagesBlock = shapeOf(Messages, []byte("content_block_start"), "")
	messagesDelta = shapeOf(Messages, []byte("content_block_delta"), "")
	messagesEnd   = shapeOf(Messages, []byte("message_delta"), "")
	responsesText = shapeOf(Responses, []byte("response.output_text.delta"), "")
	responsesOpen = shapeOf(Responses, []byte("response.created"), "")
)

// APIOf names the API a request to u with method speaks, from its path
// (and, for Gemini, its query):
//
//   - POST …/chat/completions: ChatCompletions (OpenAI, Azure OpenAI's
//     deployments, DeepSeek's /beta, Mistral, Groq, OpenRouter, …);
//   - POST …/responses: Responses (also GET …/responses/{id} with
//     stream=true, a resumed background stream);
//   - POST …/messages: Messages (Anthropic; Vertex AI's Claude
//     …:streamRawPredict streams the same events);
//   - …:streamGenerateContent with alt=sse: Gemini (Google AI and Vertex
//     AI); without alt=sse the stream is a JSON array, not server-sent
//     events, and is none of these;
//   - Bedrock's …/converse-stream and …/invoke-with-response-stream:
//     Bedrock (its binary event stream, whatever model it carries);
//   - anything else: the zero API.
//
// A trailing slash is ignored. It is safe for concurrent use and keeps
// nothing of u.
func APIOf(method string, u *url.URL) API {
	if u == nil {
		return 0
	}
	path := strings.TrimSuffix(u.Path, "/")
	switch {
	case strings.HasSuffix(path, "/converse-stream"), strings.HasSuffix(path, "/invoke-with-response-stream"):
		return Bedrock
	case strings.Contains(path, ":streamGenerateContent"):
		if u.Query().Get("alt") == "sse" {
			return Gemini
		}
		return 0
	case method == "GET":
		if i := strings.LastIndex(path, "/responses/"); i >= 0 && !strings.Contains(path[i+len("/responses/"):], "/") &&
			u.Query().Get("stream") == "true" {
			return Responses
		}
		return 0
	case method != "POST":
		return 0
	case strings.HasSuffix(path, "/chat/completions"):
		return ChatCompletions
	case strings.HasSuffix(path, "/responses"):
		return Responses
	case strings.HasSuffix(path, "/messages"), strings.Contains(path, "/publishers/anthropic/") && strings.HasSuffix(path, ":streamRawPredict"):
		return Messages
	}
	return 0
}

// ModelOf returns the model a request of api to u with body asks for: the
// body's top-level "model" (Chat Completions, Responses, Messages); else
// the model its path names (Gemini's and Vertex AI's …/models/{model}:…,
// Bedrock's /model/{model}/…, Azure OpenAI's /deployments/{deployment}/…);
// "" if none. It is safe for concurrent use and keeps nothing.
func ModelOf(api API, u *url.URL, body []byte) string {
	switch api {
	case ChatCompletions, Responses, Messages:
		var model []byte
		members(body, 0, func(key span, first Token, end int) bool {
			if string(body[key.From:key.To]) == "model" {
				model = nil
				if first.Kind == String {
					model, _ = unquote(nil, body[first.From+1:end-1])
				}
			}
			return true
		})
		if len(model) > 0 {
			return string(model)
		}
	}
	if u == nil {
		return ""
	}
	for _, at := range [...]struct{ path, end string }{
		{"/models/", ":/"},     // Gemini's, Vertex AI's: models/{model}:method
		{"/model/", "/"},       // Bedrock's: its ids hold colons (…-v1:0)
		{"/deployments/", "/"}, // Azure OpenAI's
	} {
		if i := strings.LastIndex(u.Path, at.path); i >= 0 {
			name := u.Path[i+len(at.path):]
			if j := strings.IndexAny(name, at.end); j >= 0 {
				name = name[:j]
			}
			if name != "" {
				return name
			}
		}
	}
	return ""
}
