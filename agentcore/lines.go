package agentcore

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Bounds of one read_file call. What is read is bounded by the range
// asked for plus countBound; what is returned by the byte budget the
// caller gives.
const (
	// defaultLines is the range read_file shows when no limit is sent.
	defaultLines = 2000
	// maxLineShown cuts a longer line (a minified file, a data blob):
	// the rest of it is read and counted, never kept.
	maxLineShown = 2000
	// countBound is how far past the range lines are still counted for
	// the total; beyond it the total is reported as "at least".
	countBound = 4 << 20
	// scanChunk is the read size.
	scanChunk = 64 << 10
)

// lineRange is what readLines showed of a file.
type lineRange struct {
	// First and Last are the 1-based lines shown (Last < First: none).
	First, Last int
	// Total is the number of lines; an "at least" count unless Known.
	Total int
	Known bool
	// Start and End are the byte offsets of the lines shown.
	Start, End int64
	// CRLF is set when a line shown ended with "\r\n".
	CRLF bool
}

// lineScanner reads a file chunk by chunk, never more than one chunk
// ahead of what its caller consumed.
type lineScanner struct {
	ctx context.Context
	r   io.Reader
	buf []byte
	b   []byte // the unconsumed part of buf
	off int64  // bytes consumed
	eof bool
	err error
}

// fill makes b non-empty unless the file is at its end or failed.
func (s *lineScanner) fill() bool {
	for len(s.b) == 0 && !s.eof {
		if err := s.ctx.Err(); err != nil {
			s.err, s.eof = err, true
			break
		}
		n, err := s.r.Read(s.buf)
		s.b = s.buf[:n]
		if err == io.EOF {
			s.eof = true
		} else if err != nil {
			s.err, s.eof = err, true
		}
	}
	return len(s.b) > 0
}

func (s *lineScanner) consume(n int) {
	s.b = s.b[n:]
	s.off += int64(n)
}

// skip consumes n lines and returns how many there were.
func (s *lineScanner) skip(n int) int {
	done, partial := 0, false
	for done < n && s.fill() {
		// Whole chunks short of the line wanted are counted at once.
		if c := bytes.Count(s.b, nl); done+c < n {
			done += c
			partial = s.b[len(s.b)-1] != '\n'
			s.consume(len(s.b))
			continue
		}
		i := bytes.IndexByte(s.b, '\n')
		if i < 0 {
			s.consume(len(s.b))
			partial = true
			continue
		}
		s.consume(i + 1)
		done, partial = done+1, false
	}
	if partial {
		done++ // a last line without a newline
	}
	return done
}

// line consumes one line and returns at most max bytes of it (without
// its line end), its whole length, whether it ended with "\r\n", and ok
// false at the end of the file. It stops after bound bytes of the line;
// n is then more than bound, and the rest of the line is left unread.
func (s *lineScanner) line(max int, bound int64) (text []byte, n int64, crlf, ok bool) {
	var prevCR bool
	for n <= bound && s.fill() {
		ok = true
		i := bytes.IndexByte(s.b, '\n')
		piece := s.b
		if i >= 0 {
			piece = s.b[:i]
		}
		if len(piece) > 0 {
			prevCR = piece[len(piece)-1] == '\r'
		}
		if room := max - len(text); room > 0 {
			text = append(text, piece[:min(room, len(piece))]...)
		}
		n += int64(len(piece))
		if i < 0 {
			s.consume(len(s.b))
			continue
		}
		s.consume(i + 1)
		if prevCR {
			crlf, n = true, n-1
			if int64(len(text)) > n {
				text = text[:n]
			}
		}
		return text, n, crlf, true
	}
	return text, n, false, ok
}

// count counts the lines left, reading at most bound bytes; known is
// false when it stopped there.
func (s *lineScanner) count(bound int64) (lines int, known bool) {
	start := s.off
	last := byte('\n')
	for s.off-start < bound && s.fill() {
		b := s.b[:min(int64(len(s.b)), bound-(s.off-start))]
		lines += bytes.Count(b, nl)
		last = b[len(b)-1]
		s.consume(len(b))
	}
	if last != '\n' {
		lines++
	}
	return lines, !s.fill()
}

var nl = []byte{'\n'}

// errPastEnd is wrapped by readLines' error for an offset past the end.
var errPastEnd = errors.New("offset is past the end of the file")

// readLines returns lines offset.. (1-based) of r, at most limit of
// them and at most budget bytes of text, numbered as cat -n numbers
// them; at least one line is shown whatever its length. Lines longer
// than maxLineShown are cut (and say so). It reads r only up to the end
// of the range plus countBound bytes to count the lines after it.
func readLines(ctx context.Context, r io.Reader, offset, limit, budget int) (string, lineRange, error) {
	return readLinesFrom(ctx, r, offset, limit, budget, 0, 0, -1)
}

// readLinesFrom is readLines of r positioned at byte off, the start of
// line skipped+1; total is the file's line count, or -1 to count it.
func readLinesFrom(ctx context.Context, r io.Reader, offset, limit, budget, skipped int, off int64, total int) (string, lineRange, error) {
	if offset < 1 {
		offset = 1
	}
	if limit < 1 {
		limit = defaultLines
	}
	s := &lineScanner{ctx: ctx, r: r, buf: make([]byte, scanChunk), off: off}
	// rest counts the lines after the first shown ones (the indexed
	// total tells without reading them).
	rest := func(shown int) (int, bool) {
		if total >= 0 {
			return max(0, total-shown), true
		}
		return s.count(countBound)
	}
	lr := lineRange{First: offset, Last: offset - 1}
	before := skipped + s.skip(offset-1-skipped)
	lr.Start = s.off
	var out strings.Builder
	var num [24]byte
	for lr.Last-lr.First+1 < limit {
		at := s.off
		text, n, crlf, ok := s.line(maxLineShown, countBound)
		if !ok {
			break
		}
		var cut string
		if n > countBound {
			// Not read to its end: the lines after it are not counted.
			text = wholeRunes(text)
			fmt.Fprintf(&out, "%6d\t%s… [line cut: more than %s bytes; use shell, e.g. cut -c or head -c, to see them]\n", lr.Last+1, strings.ToValidUTF8(string(text), "\uFFFD"), commas(countBound))
			lr.Last++
			lr.Total, lr.Known, lr.End = lr.Last, false, s.off
			if total >= 0 {
				lr.Total, lr.Known = total, true
			}
			return out.String(), lr, s.err
		}
		if n > int64(len(text)) {
			text = wholeRunes(text)
			cut = fmt.Sprintf("… [line cut: %s more bytes; use shell, e.g. cut -c, to see them]", commas(n-int64(len(text))))
		}
		w := strconv.AppendInt(num[:0], int64(lr.Last+1), 10)
		size := max(6, len(w)) + 1 + len(text) + len(cut) + 1
		if out.Len() > 0 && out.Len()+size > budget {
			// It does not fit: it begins the next page.
			more, known := rest(lr.Last + 1)
			lr.Total, lr.Known, lr.End = lr.Last+1+more, known, at
			return out.String(), lr, s.err
		}
		fmt.Fprintf(&out, "%6s\t%s%s\n", w, strings.ToValidUTF8(string(text), "\uFFFD"), cut)
		lr.Last++
		lr.CRLF = lr.CRLF || crlf
	}
	lr.End = s.off
	if s.err != nil {
		return "", lr, s.err
	}
	if lr.Last < lr.First && offset > 1 {
		return "", lr, fmt.Errorf("%w: offset %d, the file has %d lines", errPastEnd, offset, before)
	}
	more, known := rest(lr.Last)
	lr.Total, lr.Known = lr.Last+more, known
	return out.String(), lr, s.err
}

// wholeRunes drops a rune cut off at the end of b.
func wholeRunes(b []byte) []byte {
	for i := len(b) - 1; i >= 0 && i >= len(b)-utf8.UTFMax; i-- {
		if utf8.RuneStart(b[i]) {
			if !utf8.FullRune(b[i:]) {
				return b[:i]
			}
			break
		}
	}
	return b
}

// commas formats n with thousands separators.
func commas(n int64) string {
	s := strconv.FormatInt(n, 10)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	if neg {
		b.WriteByte('-')
	}
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	return b.String()
}
