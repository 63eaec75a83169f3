package agentcore

import (
	"context"
	"encoding/json"
	"reflect"
	"strconv"
	"testing"
)

// idStore is a history that gives each message an ID, as a BranchStore
// does on read, and keeps it as JSON, as the daemon's does.
type idStore struct {
	rows  [][]byte
	reads int
}

func (s *idStore) messages(context.Context) ([]Message, error) {
	s.reads++
	out := make([]Message, len(s.rows))
	for i, b := range s.rows {
		if err := json.Unmarshal(b, &out[i]); err != nil {
			return nil, err
		}
		out[i].ID = strconv.Itoa(i + 1)
	}
	return out, nil
}

func (s *idStore) append(_ context.Context, msgs ...Message) error {
	for _, m := range msgs {
		b, err := json.Marshal(m)
		if err != nil {
			return err
		}
		s.rows = append(s.rows, b)
	}
	return nil
}

// TestReadOnce: the history a turn keeps is what a read of its Store
// gives but the IDs of what it appended, which withIDs reads again.
func TestReadOnce(t *testing.T) {
	ctx := context.Background()
	s := &idStore{}
	s.append(ctx, Message{Role: RoleUser, Content: "go"})
	r := &readOnce{h: s}
	turn := &Turn{hist: r}
	if _, err := r.messages(ctx); err != nil {
		t.Fatal(err)
	}
	appended := []Message{
		{Role: RoleAssistant, ToolCalls: []ToolCall{{ID: "c\xff", Name: "shell", Arguments: `{"command":"cat \xfe"}`}}},
		{Role: RoleTool, ToolCallID: "c\xff", Content: "bin\xff\xfe ok \xe2\x82"},
		{Role: RoleAssistant, Content: "done"},
	}
	for _, m := range appended {
		if err := r.append(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	kept, _ := r.messages(ctx)
	read, _ := s.messages(ctx)
	if s.reads != 2 {
		t.Fatalf("%d reads of the store; want 1 by the turn (and this test's)", s.reads)
	}
	for i := range read {
		want := read[i]
		if i > 0 {
			want.ID = "" // appended: kept without an ID
		}
		if !reflect.DeepEqual(kept[i], want) {
			t.Errorf("message %d kept as %+v; the store reads %+v", i, kept[i], want)
		}
	}
	if appended[0].ToolCalls[0].ID != "c\xff" {
		t.Error("the caller's message was changed")
	}
	got, err := withIDs(ctx, turn, kept, 2)
	if err != nil || got[2].ID != "3" || s.reads != 3 {
		t.Fatalf("withIDs: ID %q, %d reads, %v; want 3, read again", got[2].ID, s.reads, err)
	}
	if again, _ := r.messages(ctx); again[2].ID != "3" {
		t.Errorf("after withIDs the turn keeps ID %q; want the store's", again[2].ID)
	}
	if _, err := withIDs(ctx, turn, got, 1); err != nil || s.reads != 3 {
		t.Errorf("withIDs of a message with its ID read the store again (%d reads, %v)", s.reads, err)
	}
}

// TestPromptDataEqual: equal compares every field of PromptData, so a
// field added later cannot leave a stale system prompt in use.
func TestPromptDataEqual(t *testing.T) {
	base := PromptData{Tools: []string{"a"}, Network: []string{"n"}}
	v := reflect.ValueOf(&base).Elem()
	for i := 0; i < v.NumField(); i++ {
		d := base
		d.Tools, d.Network = []string{"a"}, []string{"n"}
		f := reflect.ValueOf(&d).Elem().Field(i)
		switch f.Kind() {
		case reflect.String:
			f.SetString("x")
		case reflect.Bool:
			f.SetBool(true)
		case reflect.Slice:
			f.Set(reflect.ValueOf([]string{"other"}))
		default:
			t.Fatalf("PromptData.%s is a %v: teach equal and this test about it", v.Type().Field(i).Name, f.Kind())
		}
		if base.equal(d) {
			t.Errorf("PromptData differing in %s compare equal", v.Type().Field(i).Name)
		}
	}
	if !base.equal(PromptData{Tools: []string{"a"}, Network: []string{"n"}}) {
		t.Error("equal PromptData compare unequal")
	}
}
