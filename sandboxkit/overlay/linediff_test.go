package overlay

import (
	"math/rand/v2"
	"testing"
)

// checkScript fails unless the marks turn a into b: the unmarked lines of
// a and b pair up in order and are equal.
func checkScript(t *testing.T, a, b []int, delA, insB []bool) {
	t.Helper()
	var keptA, keptB []int
	for i, del := range delA {
		if !del {
			keptA = append(keptA, a[i])
		}
	}
	for j, ins := range insB {
		if !ins {
			keptB = append(keptB, b[j])
		}
	}
	if len(keptA) != len(keptB) {
		t.Fatalf("a=%v b=%v: %d kept lines of a, %d of b", a, b, len(keptA), len(keptB))
	}
	for i := range keptA {
		if keptA[i] != keptB[i] {
			t.Fatalf("a=%v b=%v: kept line %d pairs %d with %d", a, b, i, keptA[i], keptB[i])
		}
	}
}

func lcsLen(a, b []int) int {
	prev, cur := make([]int, len(b)+1), make([]int, len(b)+1)
	for i := range a {
		for j := range b {
			if a[i] == b[j] {
				cur[j+1] = prev[j] + 1
			} else {
				cur[j+1] = max(prev[j+1], cur[j])
			}
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

func cost(delA, insB []bool) int {
	n := 0
	for _, d := range delA {
		if d {
			n++
		}
	}
	for _, d := range insB {
		if d {
			n++
		}
	}
	return n
}

func randSeq(r *rand.Rand, n, alphabet int) []int {
	s := make([]int, n)
	for i := range s {
		s[i] = r.IntN(alphabet)
	}
	return s
}

func TestDiffLinesMinimal(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for i := 0; i < 20000; i++ {
		a := randSeq(r, r.IntN(16), 1+r.IntN(4))
		b := randSeq(r, r.IntN(16), 1+r.IntN(4))
		if r.IntN(3) == 0 { // b an edit of a, the usual case
			b = append([]int(nil), a...)
			for e := r.IntN(4); e > 0 && len(b) > 0; e-- {
				p := r.IntN(len(b))
				b = append(b[:p], append([]int{r.IntN(6)}, b[p+1:]...)...)
			}
		}
		delA, insB := diffLines(a, b)
		checkScript(t, a, b, delA, insB)
		if got, want := cost(delA, insB), len(a)+len(b)-2*lcsLen(a, b); got != want {
			t.Fatalf("a=%v b=%v: edit cost %d, minimal is %d", a, b, got, want)
		}
	}
}

// A search cut short, by its cost or by the work budget, still yields a
// correct, if longer, script.
func TestDiffLinesLimits(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for i := 0; i < 2000; i++ {
		a := randSeq(r, r.IntN(200), 1+r.IntN(8))
		b := randSeq(r, r.IntN(200), 1+r.IntN(8))
		delA, insB := diffLinesCost(a, b, 1+r.IntN(5), maxDiffWork)
		checkScript(t, a, b, delA, insB)
		delA, insB = diffLinesCost(a, b, maxSearchCost, r.IntN(300))
		checkScript(t, a, b, delA, insB)
	}
}

// Lines only one side has are set aside before the search; the answer
// must stay minimal.
func TestDiffLinesUniqueLines(t *testing.T) {
	a := []int{0, 1, 2, 3, 4, 5, 1, 2}
	b := []int{9, 1, 2, 8, 4, 1, 7, 2}
	delA, insB := diffLines(a, b)
	checkScript(t, a, b, delA, insB)
	if got, want := cost(delA, insB), len(a)+len(b)-2*lcsLen(a, b); got != want {
		t.Errorf("edit cost %d, minimal is %d", got, want)
	}
}
