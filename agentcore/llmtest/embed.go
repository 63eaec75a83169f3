package llmtest

import (
	"encoding/base64"
	"encoding/binary"
	"hash/fnv"
	"math"
	"strings"
	"unicode"
)

// Embedding is the vector the Server answers for text: each lower-cased
// word is hashed to one of dims coordinates and a sign, and the sum is
// normalized to length 1. Texts that share words are therefore closer
// than texts that do not, which is enough for tests of vector search,
// and the same text always gets the same vector. A text with no words
// is hashed whole. dims below 1 give nil.
func Embedding(text string, dims int) []float32 {
	if dims < 1 {
		return nil
	}
	v := make([]float64, dims)
	words := strings.FieldsFunc(strings.ToLower(text), func(r rune) bool {
		return !unicode.IsLetter(r) && !unicode.IsDigit(r)
	})
	if len(words) == 0 {
		words = []string{text}
	}
	for _, w := range words {
		h := fnv.New64a()
		h.Write([]byte(w))
		x := h.Sum64()
		sign := 1.0
		if x>>63 == 1 {
			sign = -1
		}
		v[x%uint64(dims)] += sign
	}
	var norm float64
	for _, x := range v {
		norm += x * x
	}
	norm = math.Sqrt(norm)
	out := make([]float32, dims)
	for i, x := range v {
		if norm > 0 {
			out[i] = float32(x / norm)
		}
	}
	return out
}

// base64Floats is the "encoding_format": "base64" form of v: its
// little-endian float32s.
func base64Floats(v []float32) string {
	b := make([]byte, 4*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(x))
	}
	return base64.StdEncoding.EncodeToString(b)
}
