package api

import (
	"bufio"
	"bytes"
	"encoding/json"
	"testing"
	"time"

	"github.com/codumentor/codumentor/agentcore"
)

// writeEvent's hand-written JSON must be what json.Marshal would write,
// on one data: line.
func TestWriteEventIsJSON(t *testing.T) {
	at := time.Date(2026, 11, 29, 20, 0, 0, 123456789, time.UTC)
	for _, ev := range []agentcore.Event{
		{Seq: 1, Type: "turn_started", Conversation: "conv_1", Turn: "turn_1", Time: at, Data: json.RawMessage(`{"user":"u","content":"hi \"there\"\n"}`)},
		{Seq: 42, Type: "text_delta", Conversation: "conv_1", Time: at.In(time.FixedZone("x", 3600)), Data: json.RawMessage(`{"text":"é\u2028"}`)},
		{Seq: 7, Type: "turn_cancelled", Conversation: "c\"\n<odd>", Time: at, Data: nil},
		{Seq: 8, Type: "tool_output", Conversation: "conv_1", Time: at, Data: json.RawMessage("{\n  \"output\": \"a\"\n}")},
	} {
		var buf bytes.Buffer
		w := bufio.NewWriter(&buf)
		writeEvent(w, ev)
		w.Flush()
		lines := bytes.Split(buf.Bytes(), []byte("\n"))
		if len(lines) != 5 || len(lines[3]) != 0 || len(lines[4]) != 0 {
			t.Fatalf("event %d is not id/event/data lines and a blank line: %q", ev.Seq, buf.Bytes())
		}
		data, ok := bytes.CutPrefix(lines[2], []byte("data: "))
		if !ok {
			t.Fatalf("no data line: %q", buf.Bytes())
		}
		var got agentcore.Event
		if err := json.Unmarshal(data, &got); err != nil {
			t.Fatalf("data of event %d is not JSON: %v: %s", ev.Seq, err, data)
		}
		if len(ev.Data) == 0 {
			ev.Data = json.RawMessage(`{}`)
		}
		var compact bytes.Buffer
		json.Compact(&compact, ev.Data)
		ev.Data = compact.Bytes()
		want, _ := json.Marshal(ev)
		if !bytes.Equal(data, want) {
			t.Errorf("event %d:\n got %s\nwant %s", ev.Seq, data, want)
		}
		if string(lines[0]) != "id: "+itoa(ev.Seq) || string(lines[1]) != "event: "+ev.Type {
			t.Errorf("event %d: header lines %q %q", ev.Seq, lines[0], lines[1])
		}
	}
}

func itoa(n int64) string { b, _ := json.Marshal(n); return string(b) }
