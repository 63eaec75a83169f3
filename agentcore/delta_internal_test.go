package agentcore

import (
	"encoding/base64"
	"encoding/hex"
	"strings"
	"testing"
	"time"
)

// Released at every piece, the deltas of a text holding secrets split at
// every position, in pieces of every size, join to exactly the text
// redacted whole.
func TestDeltaWriterSplits(t *testing.T) {
	longV := strings.Repeat("L0ng/secret+", 6) // wrapped by base64 at 76 columns
	secrets := map[string]string{"A": "abcabcabd-value", "B": "value-abc", "C": "zz\u00e9zzz", "L": longV}
	red := newRedactor(secrets)
	b64 := base64.StdEncoding.EncodeToString([]byte(longV))
	tests := []struct {
		text  string
		sizes []int
	}{
		{"x abcabcabd-value y abcabcabcabd-value-abc " + hex.EncodeToString([]byte("value-abc")) + " zz\u00e9zzz ünï abcab", nil},
		// Forms that the redactor finds across line breaks, or with
		// spaces and escapes in them: longer, so fewer piece sizes.
		{"abcab\n" + b64[:76] + "\n" + b64[76:] + "\n" + b64[:76] + "\r\n" + b64[76:] + " " +
			spacedHex(hex.EncodeToString([]byte(longV))) + " " + strings.ReplaceAll(longV, "/", `\/`) + " end", []int{1, 2, 3, 7, 16}},
	}
	for _, tt := range tests {
		want := red.String(tt.text)
		if strings.Contains(want, b64[:20]) || strings.Contains(want, "L0ng") {
			t.Fatalf("the whole text is not redacted: %q", want)
		}
		sizes := tt.sizes
		if sizes == nil {
			for size := 1; size <= 20; size++ {
				sizes = append(sizes, size)
			}
		}
		splits(t, red, tt.text, want, sizes)
	}
}

func splits(t *testing.T, red *redactor, text, want string, sizes []int) {
	t.Helper()
	for _, size := range sizes {
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
