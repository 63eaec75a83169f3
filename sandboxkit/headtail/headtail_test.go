package headtail_test

import (
	"strings"
	"sync"
	"testing"

	"github.com/codumentor/codumentor/sandboxkit/headtail"
)

func TestBuffer(t *testing.T) {
	for _, tt := range []struct {
		name             string
		head, tail       int
		writes           []string
		skip             int64 // after the writes, then "more"
		more             []string
		wantHead, wantTl string
		wantTotal        int64
	}{
		{name: "empty", head: 4, tail: 4},
		{name: "whole in the head", head: 4, tail: 4, writes: []string{"ab", "c"}, wantHead: "abc", wantTotal: 3},
		{name: "whole in head and tail", head: 4, tail: 4, writes: []string{"abcdef"}, wantHead: "abcd", wantTl: "ef", wantTotal: 6},
		{name: "the ring wraps", head: 2, tail: 3, writes: []string{"ab", "cd", "efghij", "k", "l"}, wantHead: "ab", wantTl: "jkl", wantTotal: 12},
		{name: "one write larger than the ring", head: 1, tail: 3, writes: []string{"abcdefgh"}, wantHead: "a", wantTl: "fgh", wantTotal: 8},
		{name: "head only", head: 3, writes: []string{"ab", "cdef"}, wantHead: "abc", wantTotal: 6},
		{name: "tail only", tail: 4, writes: []string{"ab", "cd", "efghij", "k", "l", "m"}, wantTl: "jklm", wantTotal: 13},
		{name: "a skip drops the tail", head: 2, tail: 4, writes: []string{"abcdef"}, skip: 10, more: []string{"xy"}, wantHead: "ab", wantTl: "xy", wantTotal: 18},
		{name: "a skip within the head", head: 8, tail: 4, writes: []string{"ab"}, skip: 3, wantHead: "ab", wantTotal: 5},
	} {
		t.Run(tt.name, func(t *testing.T) {
			b := headtail.New(tt.head, tt.tail)
			for _, w := range tt.writes {
				if n, err := b.Write([]byte(w)); n != len(w) || err != nil {
					t.Fatalf("Write(%q) = %d, %v", w, n, err)
				}
			}
			b.Skip(tt.skip)
			for _, w := range tt.more {
				b.Write([]byte(w))
			}
			head, tail, total := b.Parts()
			if string(head) != tt.wantHead || string(tail) != tt.wantTl || total != tt.wantTotal || b.Len() != total {
				t.Errorf("Parts() = %q, %q, %d; Len() = %d; want %q, %q, %d", head, tail, total, b.Len(), tt.wantHead, tt.wantTl, tt.wantTotal)
			}
			if got := b.String(); got != tt.wantHead+tt.wantTl {
				t.Errorf("String() = %q, want %q", got, tt.wantHead+tt.wantTl)
			}
			b.Reset()
			if head, tail, total := b.Parts(); len(head)+len(tail) != 0 || total != 0 {
				t.Errorf("after Reset: Parts() = %q, %q, %d, want nothing", head, tail, total)
			}
		})
	}
}

// TestBufferConcurrent writes from several goroutines (exec's copiers):
// run with -race.
func TestBufferConcurrent(t *testing.T) {
	b := headtail.New(64, 64)
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for range 100 {
				b.Write([]byte(strings.Repeat("x", 10)))
				_ = b.String()
			}
		})
	}
	wg.Wait()
	if head, tail, total := b.Parts(); len(head) != 64 || len(tail) != 64 || total != 4000 {
		t.Errorf("Parts() = %d, %d bytes, total %d, want 64, 64, 4000", len(head), len(tail), total)
	}
}
