package agentcore

import (
	"bytes"
	"context"
	"io"
	"os"
	"sync"

	"golang.org/x/sys/unix"
)

// A line index lets read_file start a range deep in a large file without
// reading everything before it: it holds the byte offset of every
// every-th line, and the file's line count. It is made by one scan of
// the file, the first time a range of it is read, and cached by the
// file's identity and change stamps, so a file changed since (its size,
// mtime or ctime) gets a new one.
const (
	// indexMin is the smallest file indexed: a smaller one is scanned
	// from its start in well under a millisecond.
	indexMin = 4 << 20
	// indexMax is the largest file indexed (one scan of it takes about a
	// second); a larger one is read from its start as without an index.
	indexMax = 1 << 30
	// indexEntries bounds an index's offsets (8 bytes each): past it,
	// every doubles and every other offset goes.
	indexEntries = 1 << 16
	// indexCached bounds the indexes kept, the least recently used
	// dropped first.
	indexCached = 32
	// indexChunk is the scan's read size; indexPiece the part of it
	// counted at once.
	indexChunk = 1 << 20
	indexPiece = 16 << 10
)

// fileKey identifies a file's content: a write changes its ctime.
type fileKey struct {
	dev, ino, size      uint64
	mtime, ctime, mtimN int64
	ctimN               int64
}

func fileKeyOf(st *unix.Stat_t) fileKey {
	return fileKey{dev: st.Dev, ino: st.Ino, size: uint64(st.Size), mtime: st.Mtim.Sec, mtimN: st.Mtim.Nsec, ctime: st.Ctim.Sec, ctimN: st.Ctim.Nsec}
}

// lineIndex is the index of one file.
type lineIndex struct {
	every int
	// offs[i] is the byte offset where line i*every+1 starts.
	offs []int64
	// lines is the file's line count (a last line without a newline
	// counts).
	lines int
}

// seek returns the line (0-based count of lines before it) and byte
// offset of the indexed line at or before line n+1.
func (x *lineIndex) seek(n int) (before int, off int64) {
	i := min(n/x.every, len(x.offs)-1)
	return i * x.every, x.offs[i]
}

type indexCache struct {
	mu   sync.Mutex
	keys []fileKey // most recently used last
	idx  map[fileKey]*lineIndex
}

var lineIndexes = &indexCache{idx: map[fileKey]*lineIndex{}}

// indexOf returns the index of f (open for reading), making it if none
// is cached; nil if f is not worth indexing or could not be scanned.
func indexOf(ctx context.Context, f *os.File) *lineIndex {
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil || st.Size < indexMin || st.Size > indexMax {
		return nil
	}
	k := fileKeyOf(&st)
	c := lineIndexes
	c.mu.Lock()
	if x := c.idx[k]; x != nil {
		c.touch(k)
		c.mu.Unlock()
		return x
	}
	c.mu.Unlock()
	// Two readers of one new file may both scan it; the second's result
	// replaces the first's, equal to it.
	x := buildIndex(ctx, f, st.Size)
	if x == nil {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.idx[k] == nil {
		c.keys = append(c.keys, k)
	}
	c.idx[k] = x
	c.touch(k)
	for len(c.keys) > indexCached {
		delete(c.idx, c.keys[0])
		c.keys = c.keys[1:]
	}
	return x
}

// touch moves k to the end of c.keys.
func (c *indexCache) touch(k fileKey) {
	for i, kk := range c.keys {
		if kk == k {
			copy(c.keys[i:], c.keys[i+1:])
			c.keys[len(c.keys)-1] = k
			return
		}
	}
}

// buildIndex scans the size bytes of f. A file that ends up of another
// size than its stat said (it is being written) gets no index.
func buildIndex(ctx context.Context, f *os.File, size int64) *lineIndex {
	x := &lineIndex{every: 1024, offs: []int64{0}}
	buf := make([]byte, indexChunk)
	var off int64
	lines, last := 0, byte('\n')
	for off < size {
		if ctx.Err() != nil {
			return nil
		}
		n, err := f.ReadAt(buf[:min(int64(len(buf)), size-off)], off)
		if n == 0 || err != nil && err != io.EOF {
			return nil
		}
		b := buf[:n]
		// Pieces with no indexed line's start are counted at once; the
		// others are stepped through line by line.
		for len(b) > 0 {
			piece := b[:min(len(b), indexPiece)]
			if c := bytes.Count(piece, nl); lines%x.every+c < x.every {
				lines += c
				b = b[len(piece):]
				continue
			}
			for p := 0; p < len(piece); {
				i := bytes.IndexByte(piece[p:], '\n')
				if i < 0 {
					break
				}
				p += i + 1
				if lines++; lines%x.every == 0 {
					x.offs = append(x.offs, off+int64(n-len(b)+p))
					if len(x.offs) > indexEntries {
						x.thin()
					}
				}
			}
			b = b[len(piece):]
		}
		b = buf[:n]
		last = b[n-1]
		off += int64(n)
	}
	if last != '\n' {
		lines++
	}
	x.lines = lines
	return x
}

// thin doubles every and keeps every other offset.
func (x *lineIndex) thin() {
	kept := x.offs[:0]
	for i := 0; i < len(x.offs); i += 2 {
		kept = append(kept, x.offs[i])
	}
	x.offs, x.every = kept, x.every*2
}
