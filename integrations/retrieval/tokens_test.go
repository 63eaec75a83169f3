package retrieval

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"
)

// words (the reference terms is checked against) calls f with the
// lower-cased parts of each identifier or word of s: "parseConfig",
// "parse_config" and "parse config" all give "parse", "config" (the
// first two also "parseconfig" before them, see identTerms);
// "HTTPServer" gives "http", "server"; digits stay with the letters
// before them ("utf8", "sha256"); a word of one unindexed part gives
// nothing (identTerms).
func words(s string, f func(string)) {
	var parts []string // reused across identifiers
	identifiers(s, func(id string) { parts = identTerms(parts, id, f) })
}

// identifiers calls f with each identifier or word of s: a run of
// letters, digits and '_'.
func identifiers(s string, f func(id string)) {
	start := -1
	for i := 0; i < len(s); {
		c := s[i]
		var word bool
		size := 1
		if c < utf8.RuneSelf {
			word = asciiWord[c]
		} else {
			var r rune
			r, size = utf8.DecodeRuneInString(s[i:])
			word = unicode.IsLetter(r) || unicode.IsDigit(r)
		}
		if word && start < 0 {
			start = i
		}
		if !word && start >= 0 {
			f(s[start:i])
			start = -1
		}
		i += size
	}
	if start >= 0 {
		f(s[start:])
	}
}

// TestTermsMatchWords checks terms' fast path against words, the plain
// one: an index's terms must not change (a contentless index removes a
// chunk by the terms it was indexed with).
func TestTermsMatchWords(t *testing.T) {
	texts := []string{"", "a", "_", "__x__", "HTTPServer", "parseConfig parse_config", "ÉtéCafé_x", "utf8 SHA256sum x509Cert",
		"A_B_C", "aB", "ABc", "ab_CD_ef", "get2XValue", "The IS x _i_ é Été the_ isValid", strings.Repeat("x", maxToken+1) + " y", "naïveCase_über", "日本語テキスト abc"}
	root, err := goRoot()
	if err != nil {
		t.Fatal(err)
	}
	files, _ := filepath.Glob(filepath.Join(root, "src", "strings", "*.go"))
	files = append(files, filepath.Join(root, "src", "unicode", "tables.go"))
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		texts = append(texts, string(data))
	}
	for _, s := range texts {
		var b strings.Builder
		words(s, func(w string) {
			if b.Len() > 0 {
				b.WriteByte(' ')
			}
			b.WriteString(w)
		})
		if got, want := terms(s), b.String(); got != want {
			t.Errorf("terms(%.40q…) differs from words: %.200q, want %.200q", s, got, want)
		}
	}
}
