package office

import (
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"
)

// Kinds of documents.
const (
	KindXLSX = "xlsx"
	KindDOCX = "docx"
	KindPPTX = "pptx"
	KindPDF  = "pdf"
)

// Document is a parsed attachment: its kind and its text in parts (a
// sheet, a slide, a run of pages or paragraphs), each at most
// Limits.PartBytes, for the model to read one at a time.
type Document struct {
	Kind  string `json:"kind"`
	Parts []Part `json:"parts"`
	// Truncated: the text went beyond Limits.MaxText and the rest was
	// left out.
	Truncated bool `json:"truncated,omitempty"`
}

// Part is one readable piece of a document.
type Part struct {
	Title string `json:"title"`
	Text  string `json:"text"`
}

// TextBytes is the size of the document's text.
func (d *Document) TextBytes() int {
	n := 0
	for _, p := range d.Parts {
		n += len(p.Text)
	}
	return n
}

// Limit names what made a document unreadable.
type Limit string

// The limits and failures an UnparseableError names.
const (
	LimitEmpty       Limit = "empty"        // a 0-byte file
	LimitKind        Limit = "kind"         // not xlsx, docx, pptx or pdf
	LimitCorrupt     Limit = "corrupt"      // a damaged zip, XML or PDF
	LimitEntries     Limit = "entries"      // Limits.MaxEntries
	LimitEntryName   Limit = "entry_name"   // an absolute or ../ entry name
	LimitPartSize    Limit = "part_size"    // Limits.MaxPartBytes
	LimitUnzipSize   Limit = "unzip_size"   // Limits.MaxUnzipBytes
	LimitNesting     Limit = "nesting"      // archives nested too deep
	LimitDTD         Limit = "dtd"          // an XML document type declaration
	LimitSheets      Limit = "sheets"       // Limits.MaxSheets
	LimitSlides      Limit = "slides"       // Limits.MaxSlides
	LimitMemory      Limit = "memory"       // the sandbox's memory or address space
	LimitCPUTime     Limit = "cpu_time"     // the sandbox's CPU time
	LimitTimeout     Limit = "timeout"      // the worker's wall-clock time
	LimitOutput      Limit = "output"       // the worker's output cap
	LimitProcesses   Limit = "processes"    // the sandbox's process limit
	LimitWorkerCrash Limit = "worker_crash" // the worker died otherwise
)

// UnparseableError is a document the worker refused or could not read.
// Message is meant for the person who attached it and names the limit.
type UnparseableError struct {
	Limit   Limit
	Message string
}

func (e *UnparseableError) Error() string {
	return fmt.Sprintf("the document cannot be read (%s): %s", e.Limit, e.Message)
}

// ErrUnparseable is matched by every *UnparseableError (errors.Is).
var ErrUnparseable = errors.New("office: unparseable document")

// Is makes errors.Is(err, ErrUnparseable) true.
func (e *UnparseableError) Is(target error) bool { return target == ErrUnparseable }

func refuse(l Limit, format string, a ...any) *UnparseableError {
	return &UnparseableError{Limit: l, Message: fmt.Sprintf(format, a...)}
}

// Limits bound the parser's work inside the worker. Zero fields take
// the defaults of DefaultLimits.
type Limits struct {
	// MaxEntries caps the entries of a zip package.
	MaxEntries int
	// MaxPartBytes caps one entry's declared decompressed size.
	MaxPartBytes int64
	// MaxUnzipBytes caps the declared decompressed size of all entries,
	// of nested archives too.
	MaxUnzipBytes int64
	// MaxSheets and MaxSlides cap a workbook's sheets, a deck's slides.
	MaxSheets, MaxSlides int
	// MaxText caps the text kept; the rest is dropped (Truncated).
	MaxText int
	// PartBytes is the largest part handed out (the model reads one
	// part per call).
	PartBytes int
}

// DefaultLimits are the parser's limits unless told otherwise.
func DefaultLimits() Limits {
	return Limits{
		MaxEntries:    10000,
		MaxPartBytes:  64 << 20,
		MaxUnzipBytes: 256 << 20,
		MaxSheets:     1000,
		MaxSlides:     5000,
		MaxText:       8 << 20,
		PartBytes:     24 << 10,
	}
}

func (l Limits) withDefaults() Limits {
	d := DefaultLimits()
	if l.MaxEntries <= 0 {
		l.MaxEntries = d.MaxEntries
	}
	if l.MaxPartBytes <= 0 {
		l.MaxPartBytes = d.MaxPartBytes
	}
	if l.MaxUnzipBytes <= 0 {
		l.MaxUnzipBytes = d.MaxUnzipBytes
	}
	if l.MaxSheets <= 0 {
		l.MaxSheets = d.MaxSheets
	}
	if l.MaxSlides <= 0 {
		l.MaxSlides = d.MaxSlides
	}
	if l.MaxText <= 0 {
		l.MaxText = d.MaxText
	}
	if l.PartBytes <= 0 {
		l.PartBytes = d.PartBytes
	}
	return l
}

// builder collects a document's text into parts of at most PartBytes,
// split at line ends, up to MaxText in all.
type builder struct {
	lim   Limits
	doc   Document
	total int
}

// add appends a section titled title; a long one becomes several parts
// ("title (2/3)").
func (b *builder) add(title, text string) {
	title = clean(title)
	if len(title) > 200 {
		title = truncateUTF8(title, 200) + "…"
	}
	text = clean(text)
	if b.total+len(text) > b.lim.MaxText {
		text = truncateUTF8(text, max(0, b.lim.MaxText-b.total))
		b.doc.Truncated = true
	}
	b.total += len(text)
	if text == "" && b.doc.Truncated {
		return
	}
	chunks := split(text, b.lim.PartBytes)
	for i, c := range chunks {
		t := title
		if len(chunks) > 1 {
			t = fmt.Sprintf("%s (%d/%d)", title, i+1, len(chunks))
		}
		b.doc.Parts = append(b.doc.Parts, Part{Title: t, Text: c})
	}
}

func (b *builder) full() bool { return b.total >= b.lim.MaxText }

// split cuts text into pieces of at most n bytes, at a line end when
// there is one in the second half of the piece.
func split(text string, n int) []string {
	if len(text) <= n {
		return []string{text}
	}
	var out []string
	for len(text) > n {
		cut := truncateUTF8(text, n)
		if i := strings.LastIndexByte(cut, '\n'); i >= n/2 {
			cut = cut[:i+1]
		}
		if cut == "" { // n smaller than one rune
			cut = text[:n]
		}
		out = append(out, cut)
		text = text[len(cut):]
	}
	if text != "" {
		out = append(out, text)
	}
	return out
}

func truncateUTF8(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// clean makes text valid UTF-8 without control characters other than
// tab and newline: the text goes to a model and a browser.
func clean(s string) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	return strings.Map(func(r rune) rune {
		if r == '\n' || r == '\t' {
			return r
		}
		if r < 0x20 || r == 0x7f || (r >= 0x80 && r < 0xa0) {
			return -1
		}
		return r
	}, s)
}
