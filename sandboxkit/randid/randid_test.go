package randid_test

import (
	"regexp"
	"testing"

	"github.com/codumentor/codumentor/sandboxkit/randid"
)

func TestNew(t *testing.T) {
	shape := regexp.MustCompile(`^conv_[0-9a-f]{24}$`)
	seen := map[string]bool{}
	for range 1000 {
		id := randid.New("conv_")
		if !shape.MatchString(id) {
			t.Fatalf("New(conv_) = %q, want conv_ and %d lowercase hex digits", id, randid.Len)
		}
		if seen[id] {
			t.Fatalf("New(conv_) returned %q twice", id)
		}
		seen[id] = true
	}
	if id := randid.New(""); len(id) != randid.Len {
		t.Fatalf("New(\"\") = %q, want %d hex digits", id, randid.Len)
	}
}
