package office

import (
	"archive/zip"
	"bytes"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"strings"
)

// OOXML main-part content types ([Content_Types].xml) by kind.
var mainTypes = map[string]string{
	"application/vnd.openxmlformats-officedocument.wordprocessingml.document.main+xml":   KindDOCX,
	"application/vnd.openxmlformats-officedocument.spreadsheetml.sheet.main+xml":         KindXLSX,
	"application/vnd.openxmlformats-officedocument.presentationml.presentation.main+xml": KindPPTX,
}

// pkg is an opened, checked OOXML package.
type pkg struct {
	zr    *zip.Reader
	files map[string]*zip.File // by part name without the leading /
	kind  string
	main  string // the main part's name
	lim   Limits
}

// detect decides the kind of the file from its first bytes.
func detect(f *os.File, size int64) (string, error) {
	if size == 0 {
		return "", refuse(LimitEmpty, "the file is empty (0 bytes)")
	}
	head := make([]byte, 8)
	n, _ := io.ReadFull(f, head)
	head = head[:n]
	switch {
	case bytes.HasPrefix(head, []byte("%PDF-")):
		return KindPDF, nil
	case bytes.HasPrefix(head, []byte("PK\x03\x04")):
		return "zip", nil
	case bytes.HasPrefix(head, []byte("\x7fELF")):
		return "", refuse(LimitKind, "this is an executable program (ELF), not a document; attach an xlsx, docx, pptx or pdf file")
	case bytes.HasPrefix(head, []byte("\xd0\xcf\x11\xe0")):
		return "", refuse(LimitKind, "this is a legacy binary Office file (doc, xls, ppt); save it as docx, xlsx or pptx")
	}
	return "", refuse(LimitKind, "not a document this server reads (xlsx, docx, pptx, pdf): the content does not start like one")
}

// openPackage opens f as an OOXML package and checks it before any part
// is decompressed: entry count, entry names, declared sizes (archive/zip
// refuses an entry that expands beyond its declared size), nested
// archives, and that no XML part carries a document type declaration.
func openPackage(f *os.File, size int64, lim Limits) (*pkg, error) {
	zr, err := zip.NewReader(f, size)
	if err != nil {
		return nil, refuse(LimitCorrupt, "the file starts like a zip archive but cannot be read as one (truncated or damaged): %v", zipErr(err))
	}
	if len(zr.File) > lim.MaxEntries {
		return nil, refuse(LimitEntries, "the archive has %d entries, more than the limit of %d", len(zr.File), lim.MaxEntries)
	}
	p := &pkg{zr: zr, files: make(map[string]*zip.File, len(zr.File)), lim: lim}
	var total uint64
	for _, zf := range zr.File {
		name := zf.Name
		if !safeName(name) {
			return nil, refuse(LimitEntryName, "the archive has an entry named %q that points outside it (absolute, .. or backslash); refused", clip(name))
		}
		if zf.UncompressedSize64 > uint64(lim.MaxPartBytes) {
			return nil, refuse(LimitPartSize, "the entry %q expands to %s, more than the limit of %s per part", clip(name), humanSize(int64(min(zf.UncompressedSize64, 1<<62))), humanSize(lim.MaxPartBytes))
		}
		total += zf.UncompressedSize64
		if total > uint64(lim.MaxUnzipBytes) {
			return nil, refuse(LimitUnzipSize, "the archive expands to more than %s in all (a zip bomb?)", humanSize(lim.MaxUnzipBytes))
		}
		p.files[strings.ToLower(name)] = zf
	}
	// Nested archives (embedded workbooks, OLE packages) count toward
	// the total too, by their declared sizes.
	for _, zf := range zr.File {
		if err := p.checkNested(zf, &total, 1); err != nil {
			return nil, err
		}
	}
	ct, ok := p.files["[content_types].xml"]
	if !ok {
		return nil, refuse(LimitKind, "a zip archive without [Content_Types].xml is not an Office document; attach an xlsx, docx, pptx or pdf file")
	}
	for _, zf := range zr.File {
		if isXML(zf.Name) {
			if err := p.checkProlog(zf); err != nil {
				return nil, err
			}
		}
	}
	var types struct {
		Overrides []struct {
			PartName    string `xml:"PartName,attr"`
			ContentType string `xml:"ContentType,attr"`
		} `xml:"Override"`
	}
	if err := p.decode(ct, &types); err != nil {
		return nil, err
	}
	for _, o := range types.Overrides {
		if k, ok := mainTypes[strings.TrimSpace(o.ContentType)]; ok {
			p.kind, p.main = k, strings.TrimPrefix(o.PartName, "/")
			break
		}
	}
	if p.kind == "" {
		return nil, refuse(LimitKind, "an Office package of a kind this server does not read (not xlsx, docx or pptx)")
	}
	return p, nil
}

const maxNesting = 3

// checkNested adds the declared sizes of an entry that is itself a zip
// archive (and of those inside it) to total.
func (p *pkg) checkNested(zf *zip.File, total *uint64, depth int) error {
	rc, err := zf.Open()
	if err != nil {
		return nil // unsupported method etc.: reported if the part is read
	}
	head := make([]byte, 4)
	n, _ := io.ReadFull(rc, head)
	if n < 4 || string(head) != "PK\x03\x04" {
		rc.Close()
		return nil
	}
	if depth >= maxNesting {
		rc.Close()
		return refuse(LimitNesting, "the archive nests archives more than %d deep (a zip bomb?)", maxNesting)
	}
	// Bounded by MaxPartBytes (the declared size was checked).
	b, err := io.ReadAll(io.MultiReader(bytes.NewReader(head), rc))
	rc.Close()
	if err != nil {
		return refuse(LimitCorrupt, "the embedded archive %q cannot be read: %v", clip(zf.Name), zipErr(err))
	}
	inner, err := zip.NewReader(bytes.NewReader(b), int64(len(b)))
	if err != nil {
		return nil // not really an archive: treated as data
	}
	if len(inner.File) > p.lim.MaxEntries {
		return refuse(LimitEntries, "an embedded archive has %d entries, more than the limit of %d", len(inner.File), p.lim.MaxEntries)
	}
	for _, f := range inner.File {
		*total += f.UncompressedSize64
		if *total > uint64(p.lim.MaxUnzipBytes) {
			return refuse(LimitUnzipSize, "the archive with the archives nested in it expands to more than %s in all (a nested zip bomb?)", humanSize(p.lim.MaxUnzipBytes))
		}
		if err := p.checkNested(f, total, depth+1); err != nil {
			return err
		}
	}
	return nil
}

// safeName reports an entry name that stays inside the archive.
func safeName(name string) bool {
	if name == "" || strings.ContainsAny(name, "\\\x00") || strings.HasPrefix(name, "/") {
		return false
	}
	for _, el := range strings.Split(name, "/") {
		if el == ".." {
			return false
		}
	}
	return true
}

func isXML(name string) bool {
	n := strings.ToLower(name)
	return strings.HasSuffix(n, ".xml") || strings.HasSuffix(n, ".rels")
}

// checkProlog reads an XML part up to its root element and refuses a
// document type declaration: OOXML has none, and a DTD is how entity
// expansion (billion laughs) starts.
func (p *pkg) checkProlog(zf *zip.File) error {
	rc, err := zf.Open()
	if err != nil {
		return refuse(LimitCorrupt, "the part %q cannot be read: %v", clip(zf.Name), zipErr(err))
	}
	defer rc.Close()
	d := xml.NewDecoder(rc)
	for {
		tok, err := d.RawToken()
		if err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return refuse(LimitCorrupt, "the part %q is not well-formed XML: %v", clip(zf.Name), err)
		}
		switch t := tok.(type) {
		case xml.Directive:
			return refuse(LimitDTD, "the part %q has an XML document type declaration (<!%s…>); Office files have none, and entity expansion (billion laughs) is refused", clip(zf.Name), clip(strings.Fields(string(t) + " x")[0]))
		case xml.StartElement:
			return nil
		}
	}
}

// open returns a part's reader, or an error naming it.
func (p *pkg) open(name string) (io.ReadCloser, error) {
	zf, ok := p.files[strings.ToLower(strings.TrimPrefix(name, "/"))]
	if !ok {
		return nil, refuse(LimitCorrupt, "the package lacks its part %q", clip(name))
	}
	rc, err := zf.Open()
	if err != nil {
		return nil, refuse(LimitCorrupt, "the part %q cannot be read: %v", clip(name), zipErr(err))
	}
	return rc, nil
}

func (p *pkg) has(name string) bool {
	_, ok := p.files[strings.ToLower(strings.TrimPrefix(name, "/"))]
	return ok
}

// decode unmarshals a whole part.
func (p *pkg) decode(zf *zip.File, v any) error {
	rc, err := zf.Open()
	if err != nil {
		return refuse(LimitCorrupt, "the part %q cannot be read: %v", clip(zf.Name), zipErr(err))
	}
	defer rc.Close()
	if err := xml.NewDecoder(rc).Decode(v); err != nil {
		return refuse(LimitCorrupt, "the part %q is not valid XML: %v", clip(zf.Name), err)
	}
	return nil
}

func (p *pkg) decodePart(name string, v any) error {
	zf, ok := p.files[strings.ToLower(strings.TrimPrefix(name, "/"))]
	if !ok {
		return refuse(LimitCorrupt, "the package lacks its part %q", clip(name))
	}
	return p.decode(zf, v)
}

// rels reads the relationships of part name: id → target part name.
func (p *pkg) rels(name string) (map[string]rel, error) {
	dir, base := path.Split(name)
	rp := dir + "_rels/" + base + ".rels"
	out := map[string]rel{}
	if !p.has(rp) {
		return out, nil
	}
	var r struct {
		Rels []struct {
			ID     string `xml:"Id,attr"`
			Type   string `xml:"Type,attr"`
			Target string `xml:"Target,attr"`
			Mode   string `xml:"TargetMode,attr"`
		} `xml:"Relationship"`
	}
	if err := p.decodePart(rp, &r); err != nil {
		return nil, err
	}
	for _, x := range r.Rels {
		if x.Mode == "External" {
			continue
		}
		t := x.Target
		if strings.HasPrefix(t, "/") {
			t = strings.TrimPrefix(t, "/")
		} else {
			t = path.Join(dir, t)
		}
		out[x.ID] = rel{Type: x.Type, Target: t}
	}
	return out, nil
}

type rel struct{ Type, Target string }

func zipErr(err error) string {
	if errors.Is(err, zip.ErrFormat) || errors.Is(err, io.ErrUnexpectedEOF) {
		return "not a valid zip archive"
	}
	if errors.Is(err, zip.ErrChecksum) {
		return "checksum mismatch"
	}
	if errors.Is(err, zip.ErrAlgorithm) {
		return "unsupported compression method"
	}
	return "read error"
}

// clip bounds a name taken from the document for a message.
func clip(s string) string {
	s = clean(s)
	if len(s) > 80 {
		return truncateUTF8(s, 80) + "…"
	}
	return s
}

// humanSize is n bytes for people.
func humanSize(n int64) string {
	if n >= 1<<20 {
		return fmt.Sprintf("%d MiB", n>>20)
	}
	return fmt.Sprintf("%d bytes", n)
}

// errf wraps an unexpected error of the parser.
func errf(format string, a ...any) error { return fmt.Errorf("office: "+format, a...) }
