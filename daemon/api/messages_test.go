package api

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
)

// A message no turn may start with is refused alike when it is posted
// and when it replaces an earlier one, before any turn (there is no
// engine here) is asked for.
func TestMessageContentRefused(t *testing.T) {
	a := startAPI(t, true)
	st, body := a.do(t, http.DefaultClient, "POST", "/api/v1/conversations", `{"title":"t"}`)
	var conv struct {
		ID string `json:"id"`
	}
	if st != http.StatusCreated || json.Unmarshal([]byte(body), &conv) != nil || conv.ID == "" {
		t.Fatalf("create: %d %s", st, body)
	}
	big, _ := json.Marshal(map[string]string{"content": strings.Repeat("a", maxMessage+1)})
	for _, tc := range []struct {
		name, body string
		status     int
		code, says string
	}{
		{"empty", `{"content":""}`, http.StatusBadRequest, "bad_request", "content is empty"},
		{"blank", `{"content":" \n\t"}`, http.StatusBadRequest, "bad_request", "content is empty"},
		{"no content", `{}`, http.StatusBadRequest, "bad_request", "content is empty"},
		{"too large", string(big), http.StatusRequestEntityTooLarge, "too_large", "the limit is 262144"},
		{"not JSON", `{"content":`, http.StatusBadRequest, "bad_request", "not valid"},
		{"unknown field", `{"text":"hi"}`, http.StatusBadRequest, "bad_request", "not valid"},
	} {
		for _, route := range []struct{ method, path string }{
			{"POST", "/api/v1/conversations/" + conv.ID + "/messages"},
			{"PUT", "/api/v1/conversations/" + conv.ID + "/messages/msg_1"},
		} {
			st, body := a.do(t, http.DefaultClient, route.method, route.path, tc.body)
			var e struct {
				Error struct{ Code, Message string }
			}
			if st != tc.status || json.Unmarshal([]byte(body), &e) != nil || e.Error.Code != tc.code || !strings.Contains(e.Error.Message, tc.says) {
				t.Errorf("%s: %s %s: %d %s; want %d %s %q", tc.name, route.method, route.path, st, body, tc.status, tc.code, tc.says)
			}
		}
	}
}
