package interop

import (
	"strings"

	"github.com/aws/aws-sdk-go-v2/service/bedrockruntime"
	brtypes "github.com/aws/aws-sdk-go-v2/service/bedrockruntime/types"
)

// drainConverseStream reads a ConverseStream reply to its end and returns
// the stream's error.
func drainConverseStream(out *bedrockruntime.ConverseStreamOutput) error {
	_, err := converseStreamText(out)
	return err
}

// converseStreamText reads a ConverseStream reply to its end and returns
// the text of its deltas and the stream's error.
func converseStreamText(out *bedrockruntime.ConverseStreamOutput) (string, error) {
	stream := out.GetStream()
	defer stream.Close()
	var text strings.Builder
	for ev := range stream.Events() {
		if d, ok := ev.(*brtypes.ConverseStreamOutputMemberContentBlockDelta); ok {
			if t, ok := d.Value.Delta.(*brtypes.ContentBlockDeltaMemberText); ok {
				text.WriteString(t.Value)
			}
		}
	}
	return text.String(), stream.Err()
}

// drainInvokeStream reads an InvokeModelWithResponseStream reply to its end
// and returns the stream's error.
func drainInvokeStream(out *bedrockruntime.InvokeModelWithResponseStreamOutput) error {
	_, err := invokeStreamChunks(out)
	return err
}

// invokeStreamChunks reads an InvokeModelWithResponseStream reply to its
// end and returns the model events it carried and the stream's error.
func invokeStreamChunks(out *bedrockruntime.InvokeModelWithResponseStreamOutput) ([]string, error) {
	stream := out.GetStream()
	defer stream.Close()
	var chunks []string
	for ev := range stream.Events() {
		if c, ok := ev.(*brtypes.ResponseStreamMemberChunk); ok {
			chunks = append(chunks, string(c.Value.Bytes))
		}
	}
	return chunks, stream.Err()
}
