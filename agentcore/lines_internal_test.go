package agentcore

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
)

// countingReader counts the bytes read from it.
type countingReader struct {
	r io.Reader
	n int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

func TestReadLines(t *testing.T) {
	long := strings.Repeat("x", 1<<20) // one 1 MiB line
	var many strings.Builder           // 100,000 lines over many chunks
	for i := 1; i <= 100000; i++ {
		fmt.Fprintf(&many, "%d\n", i)
	}
	tests := []struct {
		name          string
		in            string
		offset, limit int
		budget        int
		want          string
		first, last   int
		total         int
		known, crlf   bool
		err           error
		maxRead       int64 // 0: no bound checked
	}{
		{name: "empty", in: "", want: "", first: 1, last: 0, total: 0, known: true},
		{name: "one line", in: "a\n", want: "     1\ta\n", first: 1, last: 1, total: 1, known: true},
		{name: "no trailing newline", in: "a\nb", want: "     1\ta\n     2\tb\n", first: 1, last: 2, total: 2, known: true},
		{name: "empty lines", in: "\n\n", want: "     1\t\n     2\t\n", first: 1, last: 2, total: 2, known: true},
		{name: "crlf", in: "a\r\nb\r\n", want: "     1\ta\n     2\tb\n", first: 1, last: 2, total: 2, known: true, crlf: true},
		{name: "lone cr kept", in: "a\rb\n", want: "     1\ta\rb\n", first: 1, last: 1, total: 1, known: true},
		{name: "range", in: "1\n2\n3\n4\n5\n", offset: 2, limit: 2, want: "     2\t2\n     3\t3\n", first: 2, last: 3, total: 5, known: true},
		{name: "range to the end", in: "1\n2\n3", offset: 3, limit: 9, want: "     3\t3\n", first: 3, last: 3, total: 3, known: true},
		{name: "range chunks away", in: many.String(), offset: 90000, limit: 2, want: " 90000\t90000\n 90001\t90001\n", first: 90000, last: 90001, total: 100000, known: true},
		{name: "range chunks away, no trailing newline", in: strings.TrimSuffix(many.String(), "\n"), offset: 100000, want: "100000\t100000\n", first: 100000, last: 100000, total: 100000, known: true},
		{name: "past end chunks away", in: strings.TrimSuffix(many.String(), "\n"), offset: 100001, err: errPastEnd},
		{name: "offset just past end", in: "1\n2\n", offset: 3, err: errPastEnd},
		{name: "offset past end", in: "1\n2", offset: 30, err: errPastEnd},
		{name: "offset in empty", in: "", offset: 2, err: errPastEnd},
		{name: "budget stops", in: "aaaa\nbbbb\ncccc\n", budget: 20, want: "     1\taaaa\n", first: 1, last: 1, total: 3, known: true},
		{name: "one line over budget shown", in: "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\nb\n", budget: 10, want: "     1\taaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\n", first: 1, last: 1, total: 2, known: true},
		{name: "huge single line bounded", in: long + "\nnext\n", limit: 1,
			want:  "     1\t" + long[:maxLineShown] + fmt.Sprintf("… [line cut: %s more bytes; use shell, e.g. cut -c, to see them]\n", commas(int64(len(long)-maxLineShown))),
			first: 1, last: 1, total: 2, known: true},
		{name: "huge line not read to its end", in: "a\n" + strings.Repeat("y", 3*countBound) + "\nz\n", offset: 2, want: "     2\t" + strings.Repeat("y", maxLineShown) + fmt.Sprintf("… [line cut: more than %s bytes; use shell, e.g. cut -c or head -c, to see them]\n", commas(countBound)),
			first: 2, last: 2, total: 2, known: false, maxRead: 2 + countBound + 2*scanChunk},
		{name: "count bounded", in: "a\n" + strings.Repeat("b\n", countBound), limit: 1, want: "     1\ta\n", first: 1, last: 1, total: 1 + countBound/2, known: false,
			maxRead: 2 + countBound + scanChunk},
		{name: "cut in a rune", in: strings.Repeat("x", maxLineShown-1) + "é\n", want: "     1\t" + strings.Repeat("x", maxLineShown-1) + "… [line cut: 2 more bytes; use shell, e.g. cut -c, to see them]\n", first: 1, last: 1, total: 1, known: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			budget := tt.budget
			if budget == 0 {
				budget = 1 << 30
			}
			r := &countingReader{r: strings.NewReader(tt.in)}
			got, lr, err := readLines(t.Context(), r, tt.offset, tt.limit, budget)
			if tt.err != nil {
				if !errors.Is(err, tt.err) {
					t.Fatalf("err %v, want %v", err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got != tt.want {
				t.Errorf("text %.200q, want %.200q", got, tt.want)
			}
			if lr.First != tt.first || lr.Last != tt.last || lr.Total != tt.total || lr.Known != tt.known || lr.CRLF != tt.crlf {
				t.Errorf("range %+v, want lines %d–%d of %d known %v crlf %v", lr, tt.first, tt.last, tt.total, tt.known, tt.crlf)
			}
			if tt.maxRead > 0 && r.n > tt.maxRead {
				t.Errorf("read %d bytes, want at most %d", r.n, tt.maxRead)
			}
		})
	}
}

func TestHeadTail(t *testing.T) {
	var all bytes.Buffer
	for i := range 20000 {
		fmt.Fprintf(&all, "line %d\n", i)
	}
	all.WriteString("SUMMARY ok\n")
	tests := []struct {
		name       string
		head, tail int
		in         string
		want       []string
		wantNot    []string
		max        int
	}{
		{"fits", 100, 100, "short\n", []string{"short\n"}, []string{"elided"}, 6},
		{"head and tail", 1000, 1000, all.String(), []string{"line 0\n", "bytes elided", "SUMMARY ok\n", "line 19999\n"}, []string{"line 10000\n"}, 2100},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHeadTail(tt.head, tt.tail)
			// Written in uneven pieces, as pipes deliver it.
			for in := tt.in; in != ""; {
				k := min(len(in), 777)
				h.Write([]byte(in[:k]))
				in = in[k:]
			}
			got := h.text(0)
			for _, w := range tt.want {
				if !strings.Contains(got, w) {
					t.Errorf("%q lacks %q", got, w)
				}
			}
			for _, w := range tt.wantNot {
				if strings.Contains(got, w) {
					t.Errorf("%q holds %q", got, w)
				}
			}
			if len(got) > tt.max {
				t.Errorf("%d bytes, want at most %d", len(got), tt.max)
			}
			if !strings.HasSuffix(got, tt.in[len(tt.in)-min(len(tt.in), 50):]) {
				t.Errorf("%q does not end as the output did", got)
			}
		})
	}
}

// TestHeadTailMargin shows a secret crossing either cut leave no piece
// of itself with the margin (and a piece without it).
func TestHeadTailMargin(t *testing.T) {
	const secret = "S3CR3T-VALUE-42"
	for _, k := range []int{1, 7, len(secret) - 1} { // bytes of it before the cut
		// The head keeps 100 bytes, the tail the last 100.
		in := strings.Repeat("a", 100-k) + secret + strings.Repeat("b", 2000) + secret + strings.Repeat("c", 100-len(secret)+k)
		for _, margin := range []int{0, len(secret)} {
			h := newHeadTail(100, 100)
			h.Write([]byte(in))
			head, tail, _ := strings.Cut(h.text(margin), "\n[…")
			_, tail, _ = strings.Cut(tail, "…]\n")
			leaks := strings.HasSuffix(head, secret[:k]) || strings.HasPrefix(tail, secret[k:])
			if leaks != (margin == 0) {
				t.Errorf("%d bytes before the cut, margin %d: head %q, tail %q", k, margin, head, tail)
			}
			if !strings.HasSuffix(tail, strings.Repeat("c", 50)) {
				t.Errorf("tail %q lost its end", tail)
			}
		}
	}
}

func TestCheckArgs(t *testing.T) {
	spec := ToolSpec{Name: "read_file", Parameters: schema([]string{"path"}, map[string]any{"path": prop("string", ""), "limit": prop("integer", "")})}
	open := ToolSpec{Name: "x", Parameters: []byte(`{"type":"object","properties":{"a":{}}}`)}
	tests := []struct {
		spec ToolSpec
		args string
		want string // "" no error
	}{
		{spec, `{"path":"a"}`, ""},
		{spec, ``, ""},
		{spec, `{"path":"a","foo":1}`, `unknown argument "foo"; the arguments are: limit, path`},
		{spec, `{"Path":"a"}`, `unknown argument "Path"`},
		{spec, `[1]`, `want a JSON object`},
		{open, `{"b":1}`, ""},
	}
	for _, tt := range tests {
		err := checkArgs(tt.spec, []byte(tt.args))
		if tt.want == "" && err != nil || tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)) {
			t.Errorf("checkArgs(%s, %s) = %v, want %q", tt.spec.Name, tt.args, err, tt.want)
		}
	}
}
