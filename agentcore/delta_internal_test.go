package agentcore

import (
	"encoding/hex"
	"strings"
	"testing"
	"time"
)

// Released at every piece, the deltas of a text holding secrets split at
// every position, in pieces of every size, join to exactly the text
// redacted whole.
func TestDeltaWriterSplits(t *testing.T) {
	secrets := map[string]string{"A": "abcabcabd-value", "B": "value-abc", "C": "zz\u00e9zzz"}
	red := newRedactor(secrets)
	text := "x abcabcabd-value y abcabcabcabd-value-abc " + hex.EncodeToString([]byte("value-abc")) + " zz\u00e9zzz ünï abcab"
	want := red.String(text)
	for size := 1; size <= 20; size++ {
		for offset := range size {
			d := deltaWriter{red: red}
			now := time.Unix(0, 0)
			var got strings.Builder
			pieces := []string{text[:offset]}
			for i := offset; i < len(text); i += size {
				pieces = append(pieces, text[i:min(i+size, len(text))])
			}
			for _, p := range pieces {
				now = now.Add(time.Second) // every piece is due
				if out, ok := d.write(p, now); ok {
					got.WriteString(out)
				}
			}
			got.WriteString(d.flush())
			if got.String() != want {
				t.Fatalf("pieces of %d from %d:\n%q\nwant\n%q", size, offset, got.String(), want)
			}
		}
	}
}
