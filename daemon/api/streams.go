package api

import (
	"net/http"
	"sync"
)

// streams counts the open event streams, in all and per user: each holds
// a connection, two goroutines and a subscription until the client goes,
// so a client could otherwise open them until the process runs out.
type streams struct {
	mu      sync.Mutex
	total   int
	perUser map[string]int
}

// errTooManyStreams answers a stream beyond a cap.
var errTooManyStreams = &Error{Status: http.StatusTooManyRequests, Code: "too_many_streams", Message: "too many open event streams; close one (or wait for one to end) and retry"}

// take reserves a stream for user, or reports that a cap is reached.
func (st *streams) take(l Limits, user string) bool {
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.total >= l.MaxStreams || st.perUser[user] >= l.MaxStreamsPerUser {
		return false
	}
	st.total++
	st.perUser[user]++
	return true
}

// release gives back a stream take reserved.
func (st *streams) release(user string) {
	st.mu.Lock()
	defer st.mu.Unlock()
	st.total--
	if st.perUser[user]--; st.perUser[user] <= 0 {
		delete(st.perUser, user)
	}
}
