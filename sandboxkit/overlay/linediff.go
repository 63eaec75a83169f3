package overlay

// This file finds a shortest edit script between two sequences of lines
// with Myers' O(ND) algorithm in its linear-space form ("An O(ND)
// Difference Algorithm and Its Variations", E. W. Myers, 1986, section 4b):
// find the middle snake of an optimal path by searching from both ends at
// once, then solve the two halves on either side of it.
//
// Lines are compared as small integers (equal lines, equal ids). Edit
// graph coordinates: x indexes a, y indexes b, diagonal k = x - y.

// maxSearchCost bounds the edit cost one middle-snake search explores.
// Past it the search splits at the furthest point it reached, which keeps
// the script correct but maybe not minimal; without it two large unrelated
// files would take time quadratic in their length.
const maxSearchCost = 4096

// maxDiffWork bounds the steps (diagonals visited, lines compared) that
// one diff may take, under a second of work. Past it, what remains to
// compare is replaced wholesale: a correct but coarse script, instead of a
// server stuck on a pathological pair of files.
const maxDiffWork = 1 << 26

type lineDiffer struct {
	a, b    []int
	delA    []bool // delA[i]: line i of a is deleted
	insB    []bool // insB[j]: line j of b is inserted
	vf, vb  []int  // furthest x per diagonal, forward and backward; -1 unreachable
	limit   int    // maxSearchCost, or less for short inputs
	work    int    // steps taken, against maxWork
	maxWork int
}

// diffLines marks which lines of a to delete and which of b to insert to
// turn a into b. Unmarked lines of a and b pair up in order. Line ids must
// be small non-negative integers.
func diffLines(a, b []int) (delA, insB []bool) {
	return diffLinesCost(a, b, maxSearchCost, maxDiffWork)
}

func diffLinesCost(a, b []int, maxCost, maxWork int) (delA, insB []bool) {
	delA, insB = make([]bool, len(a)), make([]bool, len(b))
	// A line the other side lacks can only be deleted or inserted. Marking
	// those first leaves a shorter problem with the same answer, and makes
	// the common worst case, a file rewritten, cheap.
	ids := 0
	for _, id := range a {
		ids = max(ids, id+1)
	}
	for _, id := range b {
		ids = max(ids, id+1)
	}
	inA, inB := make([]bool, ids), make([]bool, ids)
	for _, id := range a {
		inA[id] = true
	}
	for _, id := range b {
		inB[id] = true
	}
	keep := func(lines []int, other, marks []bool) (kept, at []int) {
		kept, at = make([]int, 0, len(lines)), make([]int, 0, len(lines))
		for i, id := range lines {
			if other[id] {
				kept, at = append(kept, id), append(at, i)
			} else {
				marks[i] = true
			}
		}
		return kept, at
	}
	ka, atA := keep(a, inB, delA)
	kb, atB := keep(b, inA, insB)

	d := &lineDiffer{a: ka, b: kb, delA: make([]bool, len(ka)), insB: make([]bool, len(kb)), maxWork: maxWork}
	d.limit = min(maxCost, (len(ka)+len(kb)+1)/2)
	d.vf = make([]int, 2*d.limit+3)
	d.vb = make([]int, 2*d.limit+3)
	d.compare(0, len(ka), 0, len(kb))
	for i, del := range d.delA {
		delA[atA[i]] = del
	}
	for j, ins := range d.insB {
		insB[atB[j]] = ins
	}
	return delA, insB
}

// compare solves a[aLo:aHi] against b[bLo:bHi]. The first half of each
// split recurses; the second continues in the loop, so recursion depth
// stays logarithmic in the cost.
func (d *lineDiffer) compare(aLo, aHi, bLo, bHi int) {
	for {
		for aLo < aHi && bLo < bHi && d.a[aLo] == d.b[bLo] {
			aLo, bLo = aLo+1, bLo+1
		}
		for aLo < aHi && bLo < bHi && d.a[aHi-1] == d.b[bHi-1] {
			aHi, bHi = aHi-1, bHi-1
		}
		if aLo == aHi || bLo == bHi {
			break
		}
		x, y, ok := d.split(aLo, aHi, bLo, bHi)
		if !ok {
			break
		}
		d.compare(aLo, x, bLo, y)
		aLo, bLo = x, y
	}
	for i := aLo; i < aHi; i++ {
		d.delA[i] = true
	}
	for j := bLo; j < bHi; j++ {
		d.insB[j] = true
	}
}

// split returns a point (x, y) on an optimal path through the box, strictly
// between its corners: the end of the forward path where the two searches
// first meet. With ok false it found none within the work budget, and the
// caller replaces the whole box, which is correct if not minimal. The
// box's first and last lines differ.
func (d *lineDiffer) split(aLo, aHi, bLo, bHi int) (x, y int, ok bool) {
	n, m := aHi-aLo, bHi-bLo
	delta := n - m
	odd := delta&1 != 0
	maxD := min(d.limit, (n+m+1)/2)
	off := d.limit + 1 // index of diagonal 0 in vf and vb
	vf, vb := d.vf, d.vb
	a, b := d.a, d.b
	for D := 0; D <= maxD; D++ {
		if d.work > d.maxWork {
			return 0, 0, false
		}
		d.work += 2*D + 2
		// Forward: furthest-reaching D-paths from (0, 0).
		for k := -D; k <= D; k += 2 {
			x := d.step(vf, off, k, D, n, m)
			if x < 0 {
				continue
			}
			for x < n && x-k < m && a[aLo+x] == b[bLo+x-k] {
				x++
				d.work++
			}
			vf[off+k] = x
			// An odd delta puts the overlap in a forward step: the backward
			// (D-1)-paths cover diagonals delta-(D-1) .. delta+(D-1).
			if kb := delta - k; odd && kb >= -(D-1) && kb <= D-1 && vb[off+kb] >= 0 && x+vb[off+kb] >= n {
				return d.inside(aLo, bLo, n, m, x, x-k)
			}
		}
		// Backward: the same on the reversed sequences, from (n, m).
		for k := -D; k <= D; k += 2 {
			x := d.step(vb, off, k, D, n, m)
			if x < 0 {
				continue
			}
			for x < n && x-k < m && a[aHi-1-x] == b[bHi-1-(x-k)] {
				x++
				d.work++
			}
			vb[off+k] = x
			if kf := delta - k; !odd && kf >= -D && kf <= D && vf[off+kf] >= 0 && vf[off+kf]+x >= n {
				xf := vf[off+kf]
				return d.inside(aLo, bLo, n, m, xf, xf-kf)
			}
		}
	}
	// Too costly to finish: split where the forward search got furthest.
	best, bx := -1, 0
	for k := -maxD; k <= maxD; k += 2 {
		if x := vf[off+k]; x >= 0 && 2*x-k > best {
			best, bx = 2*x-k, x
			y = x - k
		}
	}
	if best < 0 {
		return 0, 0, false
	}
	return d.inside(aLo, bLo, n, m, bx, y)
}

// step returns where a D-path on diagonal k starts its final snake: one
// edit after the furthest (D-1)-path on k+1 (an insertion, x unchanged) or
// on k-1 (a deletion, x+1), whichever stays in the n×m grid and gets
// further. It returns -1, and marks the diagonal unreachable, if neither.
func (d *lineDiffer) step(v []int, off, k, D, n, m int) int {
	if k < -m || k > n {
		v[off+k] = -1
		return -1
	}
	if D == 0 {
		return 0
	}
	x := -1
	if k+1 <= D-1 {
		if down := v[off+k+1]; down >= 0 && down-k <= m {
			x = down
		}
	}
	if k-1 >= -(D - 1) {
		if right := v[off+k-1]; right >= 0 && right+1 <= n && right+1 > x {
			x = right + 1
		}
	}
	if x < 0 {
		v[off+k] = -1
	}
	return x
}

// inside turns a split point relative to the box into absolute indexes,
// refusing the box's corners, where splitting would make no progress.
func (d *lineDiffer) inside(aLo, bLo, n, m, x, y int) (int, int, bool) {
	if x < 0 || y < 0 || x > n || y > m || x+y == 0 || x+y == n+m {
		return 0, 0, false
	}
	return aLo + x, bLo + y, true
}
