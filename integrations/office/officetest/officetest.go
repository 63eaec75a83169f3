// Package officetest generates the office documents the tests use, the
// good ones and the hostile ones, so that no binary fixture has to be
// trusted or kept: each generator's name says what the parser must do
// with its output.
package officetest

import (
	"archive/zip"
	"bytes"
	"compress/flate"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"strings"
)

// File is one entry of a zip package.
type File struct {
	Name, Body string
}

// Zip builds a zip archive of files, deflated.
func Zip(files ...File) []byte {
	var buf bytes.Buffer
	zw := newZipWriter(&buf)
	for _, f := range files {
		// Small entries are stored: a compressor per entry costs more
		// than the entry (the 50,000-sheet workbook).
		h := &zip.FileHeader{Name: f.Name, Method: zip.Deflate}
		if len(f.Body) < 4096 {
			h.Method = zip.Store
		}
		w, err := zw.CreateHeader(h)
		if err != nil {
			panic(err)
		}
		io.WriteString(w, f.Body)
	}
	if err := zw.Close(); err != nil {
		panic(err)
	}
	return buf.Bytes()
}

const (
	ctDocx = "application/vnd.openxmlformats-officedocument.wordprocessingml.document.main+xml"
	ctXlsx = "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet.main+xml"
	ctPptx = "application/vnd.openxmlformats-officedocument.presentationml.presentation.main+xml"
	ctWs   = "application/vnd.openxmlformats-officedocument.spreadsheetml.worksheet+xml"
	ctSld  = "application/vnd.openxmlformats-officedocument.presentationml.slide+xml"
	relDoc = "http://schemas.openxmlformats.org/officeDocument/2006/relationships/officeDocument"
	relWs  = "http://schemas.openxmlformats.org/officeDocument/2006/relationships/worksheet"
	relSld = "http://schemas.openxmlformats.org/officeDocument/2006/relationships/slide"
	relNts = "http://schemas.openxmlformats.org/officeDocument/2006/relationships/notesSlide"
	nsW    = "http://schemas.openxmlformats.org/wordprocessingml/2006/main"
	nsS    = "http://schemas.openxmlformats.org/spreadsheetml/2006/main"
	nsP    = "http://schemas.openxmlformats.org/presentationml/2006/main"
	nsA    = "http://schemas.openxmlformats.org/drawingml/2006/main"
	nsR    = "http://schemas.openxmlformats.org/officeDocument/2006/relationships"
)

func contentTypes(overrides ...[2]string) File {
	var b strings.Builder
	b.WriteString(`<?xml version="1.0" encoding="UTF-8" standalone="yes"?><Types xmlns="http://schemas.openxmlformats.org/package/2006/content-types"><Default Extension="rels" ContentType="application/vnd.openxmlformats-package.relationships+xml"/><Default Extension="xml" ContentType="application/xml"/>`)
	for _, o := range overrides {
		fmt.Fprintf(&b, `<Override PartName="%s" ContentType="%s"/>`, o[0], o[1])
	}
	b.WriteString(`</Types>`)
	return File{"[Content_Types].xml", b.String()}
}

func rels(name string, rs ...[3]string) File {
	var b strings.Builder
	b.WriteString(`<?xml version="1.0" encoding="UTF-8" standalone="yes"?><Relationships xmlns="http://schemas.openxmlformats.org/package/2006/relationships">`)
	for _, r := range rs {
		fmt.Fprintf(&b, `<Relationship Id="%s" Type="%s" Target="%s"/>`, r[0], r[1], r[2])
	}
	b.WriteString(`</Relationships>`)
	return File{name, b.String()}
}

func esc(s string) string {
	var b bytes.Buffer
	xmlEscape(&b, s)
	return b.String()
}

// DOCXPara is a paragraph: Style "" is body text, "Heading1".."Heading9"
// headings; Table, if set, makes it a table of rows of cells instead.
type DOCXPara struct {
	Style string
	Text  string
	Table [][]string
}

// DOCX builds a word-processing document of paras.
func DOCX(paras []DOCXPara, extra ...File) []byte {
	var body strings.Builder
	para := func(style, text string) {
		body.WriteString("<w:p>")
		if style != "" {
			fmt.Fprintf(&body, `<w:pPr><w:pStyle w:val="%s"/></w:pPr>`, style)
		}
		fmt.Fprintf(&body, `<w:r><w:t xml:space="preserve">%s</w:t></w:r></w:p>`, esc(text))
	}
	for _, p := range paras {
		if p.Table == nil {
			para(p.Style, p.Text)
			continue
		}
		body.WriteString("<w:tbl>")
		for _, row := range p.Table {
			body.WriteString("<w:tr>")
			for _, c := range row {
				body.WriteString("<w:tc>")
				para("", c)
				body.WriteString("</w:tc>")
			}
			body.WriteString("</w:tr>")
		}
		body.WriteString("</w:tbl>")
	}
	return Zip(append(docxFiles(`<?xml version="1.0" encoding="UTF-8" standalone="yes"?><w:document xmlns:w="`+nsW+`"><w:body>`+body.String()+`</w:body></w:document>`), extra...)...)
}

func docxFiles(document string) []File {
	return []File{
		contentTypes([2]string{"/word/document.xml", ctDocx}),
		rels("_rels/.rels", [3]string{"rId1", relDoc, "word/document.xml"}),
		{"word/document.xml", document},
	}
}

// GoodDOCX is a report with a title, headings, text and a table.
func GoodDOCX() []byte {
	return DOCX([]DOCXPara{
		{Style: "Title", Text: "Quarterly report"},
		{Text: "Revenue grew by 12 percent in the third quarter."},
		{Style: "Heading1", Text: "Sales by region"},
		{Table: [][]string{{"Region", "Sales"}, {"North", "1200"}, {"South", "2300"}}},
		{Style: "Heading2", Text: "Outlook"},
		{Text: "We expect steady growth & fewer returns."},
	})
}

// BigDOCX is a document of pages pages of about 3 KB of text each, a
// heading every page.
func BigDOCX(pages int) []byte {
	var ps []DOCXPara
	for i := range pages {
		ps = append(ps, DOCXPara{Style: "Heading2", Text: fmt.Sprintf("Page %d", i+1)})
		for j := range 12 {
			ps = append(ps, DOCXPara{Text: fmt.Sprintf("Paragraph %d of page %d: the quick brown fox jumps over the lazy dog, again and again, until the page is full of words that mean little.", j+1, i+1)})
		}
		ps = append(ps, DOCXPara{Table: [][]string{{"k", "v"}, {fmt.Sprint(i), "value"}}})
	}
	return DOCX(ps)
}

// Cell is a worksheet cell: a literal Value, or a Formula with its
// cached Value (what the spreadsheet last computed).
type Cell struct {
	Value   string
	Formula string
	Number  bool
}

// XLSX builds a workbook with the named sheets (in order), each a table
// of rows.
func XLSX(names []string, sheets [][][]Cell) []byte {
	var over [][2]string
	over = append(over, [2]string{"/xl/workbook.xml", ctXlsx})
	var wb strings.Builder
	wb.WriteString(`<?xml version="1.0" encoding="UTF-8" standalone="yes"?><workbook xmlns="` + nsS + `" xmlns:r="` + nsR + `"><sheets>`)
	var rs [][3]string
	var files []File
	for i, name := range names {
		fmt.Fprintf(&wb, `<sheet name="%s" sheetId="%d" r:id="rId%d"/>`, esc(name), i+1, i+1)
		rs = append(rs, [3]string{fmt.Sprintf("rId%d", i+1), relWs, fmt.Sprintf("worksheets/sheet%d.xml", i+1)})
		over = append(over, [2]string{fmt.Sprintf("/xl/worksheets/sheet%d.xml", i+1), ctWs})
		var ws strings.Builder
		ws.WriteString(`<?xml version="1.0" encoding="UTF-8" standalone="yes"?><worksheet xmlns="` + nsS + `"><sheetData>`)
		if i < len(sheets) {
			for r, row := range sheets[i] {
				fmt.Fprintf(&ws, `<row r="%d">`, r+1)
				for c, cell := range row {
					ref := fmt.Sprintf("%c%d", 'A'+c, r+1)
					switch {
					case cell.Formula != "":
						fmt.Fprintf(&ws, `<c r="%s"><f>%s</f><v>%s</v></c>`, ref, esc(cell.Formula), esc(cell.Value))
					case cell.Number:
						fmt.Fprintf(&ws, `<c r="%s"><v>%s</v></c>`, ref, esc(cell.Value))
					default:
						fmt.Fprintf(&ws, `<c r="%s" t="inlineStr"><is><t>%s</t></is></c>`, ref, esc(cell.Value))
					}
				}
				ws.WriteString(`</row>`)
			}
		}
		ws.WriteString(`</sheetData></worksheet>`)
		files = append(files, File{fmt.Sprintf("xl/worksheets/sheet%d.xml", i+1), ws.String()})
	}
	wb.WriteString(`</sheets></workbook>`)
	head := []File{
		contentTypes(over...),
		rels("_rels/.rels", [3]string{"rId1", relDoc, "xl/workbook.xml"}),
		{"xl/workbook.xml", wb.String()},
		rels("xl/_rels/workbook.xml.rels", rs...),
	}
	return Zip(append(head, files...)...)
}

// GoodXLSX is a two-sheet budget; Budget!B4 is a formula whose cached
// value is 3500.
func GoodXLSX() []byte {
	s := func(v string) Cell { return Cell{Value: v} }
	n := func(v string) Cell { return Cell{Value: v, Number: true} }
	return XLSX([]string{"Budget", "Notes"}, [][][]Cell{
		{{s("Item"), s("Cost")}, {s("Servers"), n("1200")}, {s("Licences"), n("2300")}, {s("Total"), {Formula: "SUM(B2:B3)", Value: "3500"}}},
		{{s("Approved by finance")}},
	})
}

// BigXLSX is one sheet of rows rows of five cells.
func BigXLSX(rows int) []byte {
	sheet := make([][]Cell, rows)
	for i := range sheet {
		sheet[i] = []Cell{{Value: fmt.Sprintf("item %d", i)}, {Value: fmt.Sprint(i * 3), Number: true}, {Value: "alpha"}, {Value: fmt.Sprint(i % 97), Number: true}, {Formula: fmt.Sprintf("B%d*2", i+1), Value: fmt.Sprint(i * 6)}}
	}
	return XLSX([]string{"Data"}, [][][]Cell{sheet})
}

// PPTXSlide is a slide's text paragraphs and its speaker notes.
type PPTXSlide struct {
	Text  []string
	Notes string
}

// PPTX builds a presentation. The slides' part names run backwards, so
// that only the presentation's own order (p:sldIdLst) gives the right one.
func PPTX(slides []PPTXSlide) []byte {
	n := len(slides)
	over := [][2]string{{"/ppt/presentation.xml", ctPptx}}
	var pres strings.Builder
	pres.WriteString(`<?xml version="1.0" encoding="UTF-8" standalone="yes"?><p:presentation xmlns:p="` + nsP + `" xmlns:r="` + nsR + `"><p:sldIdLst>`)
	var rs [][3]string
	var files []File
	for i, s := range slides {
		num := n - i // part number: backwards
		fmt.Fprintf(&pres, `<p:sldId id="%d" r:id="rId%d"/>`, 256+i, i+1)
		rs = append(rs, [3]string{fmt.Sprintf("rId%d", i+1), relSld, fmt.Sprintf("slides/slide%d.xml", num)})
		over = append(over, [2]string{fmt.Sprintf("/ppt/slides/slide%d.xml", num), ctSld})
		files = append(files, File{fmt.Sprintf("ppt/slides/slide%d.xml", num), drawing("p:sld", s.Text)})
		if s.Notes != "" {
			files = append(files,
				rels(fmt.Sprintf("ppt/slides/_rels/slide%d.xml.rels", num), [3]string{"rId1", relNts, fmt.Sprintf("../notesSlides/notesSlide%d.xml", num)}),
				File{fmt.Sprintf("ppt/notesSlides/notesSlide%d.xml", num), drawing("p:notes", []string{s.Notes})})
		}
	}
	pres.WriteString(`</p:sldIdLst></p:presentation>`)
	head := []File{
		contentTypes(over...),
		rels("_rels/.rels", [3]string{"rId1", relDoc, "ppt/presentation.xml"}),
		{"ppt/presentation.xml", pres.String()},
		rels("ppt/_rels/presentation.xml.rels", rs...),
	}
	return Zip(append(head, files...)...)
}

func drawing(root string, paras []string) string {
	var b strings.Builder
	b.WriteString(`<?xml version="1.0" encoding="UTF-8" standalone="yes"?><` + root + ` xmlns:p="` + nsP + `" xmlns:a="` + nsA + `"><p:cSld><p:spTree><p:sp><p:txBody>`)
	for _, p := range paras {
		fmt.Fprintf(&b, `<a:p><a:r><a:t>%s</a:t></a:r></a:p>`, esc(p))
	}
	b.WriteString(`</p:txBody></p:sp></p:spTree></p:cSld></` + root + `>`)
	return b.String()
}

// GoodPPTX is a three-slide deck with notes on the second slide.
func GoodPPTX() []byte {
	return PPTX([]PPTXSlide{
		{Text: []string{"Roadmap 2027", "Engineering all-hands"}},
		{Text: []string{"Milestones", "Ship the office worker"}, Notes: "Mention the sandbox limits."},
		{Text: []string{"Questions?"}},
	})
}

// PDF builds a PDF of pages, each page's lines in Helvetica.
func PDF(pages [][]string) []byte {
	var objs []string
	// 1: catalog, 2: pages, 3: font, then page and content pairs.
	kids := []string{}
	for i := range pages {
		kids = append(kids, fmt.Sprintf("%d 0 R", 4+2*i))
	}
	objs = append(objs,
		"<< /Type /Catalog /Pages 2 0 R >>",
		fmt.Sprintf("<< /Type /Pages /Kids [%s] /Count %d >>", strings.Join(kids, " "), len(pages)),
		"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>")
	for i, lines := range pages {
		var cs strings.Builder
		cs.WriteString("BT /F1 12 Tf 72 720 Td 14 TL\n")
		for _, l := range lines {
			r := strings.NewReplacer(`\`, `\\`, "(", `\(`, ")", `\)`)
			fmt.Fprintf(&cs, "(%s) Tj T*\n", r.Replace(l))
		}
		cs.WriteString("ET")
		objs = append(objs,
			fmt.Sprintf("<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Resources << /Font << /F1 3 0 R >> >> /Contents %d 0 R >>", 5+2*i),
			fmt.Sprintf("<< /Length %d >>\nstream\n%s\nendstream", cs.Len(), cs.String()))
	}
	var b bytes.Buffer
	b.WriteString("%PDF-1.4\n")
	offs := make([]int, len(objs))
	for i, o := range objs {
		offs[i] = b.Len()
		fmt.Fprintf(&b, "%d 0 obj\n%s\nendobj\n", i+1, o)
	}
	xref := b.Len()
	fmt.Fprintf(&b, "xref\n0 %d\n0000000000 65535 f \n", len(objs)+1)
	for _, o := range offs {
		fmt.Fprintf(&b, "%010d 00000 n \n", o)
	}
	fmt.Fprintf(&b, "trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n", len(objs)+1, xref)
	return b.Bytes()
}

// GoodPDF is a two-page PDF.
func GoodPDF() []byte {
	return PDF([][]string{{"Incident review", "The outage lasted 14 minutes."}, {"Action items", "Add a second DNS resolver."}})
}

// Hostile documents, each refused with the limit its name says.

// newZipWriter deflates at the fastest level: the tests generate large
// repetitive entries.
func newZipWriter(w io.Writer) *zip.Writer {
	zw := zip.NewWriter(w)
	zw.RegisterCompressor(zip.Deflate, func(w io.Writer) (io.WriteCloser, error) { return flate.NewWriter(w, flate.BestSpeed) })
	return zw
}

// FailFlatBomb is a zip bomb without nesting: seventeen entries that
// each expand to 16 MiB of one repeated byte, 272 MiB in all
// (unzip_size).
func FailFlatBomb() []byte {
	const size = 16 << 20
	var comp bytes.Buffer
	fw, _ := flate.NewWriter(&comp, flate.BestSpeed)
	block := bytes.Repeat([]byte(" "), 1<<20)
	for range size >> 20 {
		fw.Write(block)
	}
	fw.Close()
	crc := crc32.NewIEEE()
	for range size >> 20 {
		crc.Write(block)
	}
	var buf bytes.Buffer
	zw := newZipWriter(&buf)
	for _, f := range docxFiles(`<?xml version="1.0"?><w:document xmlns:w="` + nsW + `"><w:body/></w:document>`) {
		w, _ := zw.Create(f.Name)
		io.WriteString(w, f.Body)
	}
	for i := range 17 {
		w, err := zw.CreateRaw(&zip.FileHeader{Name: fmt.Sprintf("word/media/pad%d.xml", i), Method: zip.Deflate, CRC32: crc.Sum32(), CompressedSize64: uint64(comp.Len()), UncompressedSize64: size})
		if err != nil {
			panic(err)
		}
		w.Write(comp.Bytes())
	}
	zw.Close()
	return buf.Bytes()
}

// FailNestedBomb is a document that embeds an archive of twenty
// archives of a 16 MiB entry each, 320 MiB once all are expanded
// (unzip_size).
func FailNestedBomb() []byte {
	inner := Zip(File{"zeros.bin", strings.Repeat("\x00", 16<<20)})
	var layer []File
	for i := range 20 {
		layer = append(layer, File{fmt.Sprintf("part%d.zip", i), string(inner)})
	}
	return DOCX([]DOCXPara{{Text: "nothing to see"}}, File{"word/embeddings/package.zip", string(Zip(layer...))})
}

// FailBillionLaughs is a document whose main part declares nested XML
// entities that would expand to gigabytes (dtd).
func FailBillionLaughs() []byte {
	var dtd strings.Builder
	dtd.WriteString(`<?xml version="1.0"?><!DOCTYPE lolz [<!ENTITY lol "lol">`)
	prev := "lol"
	for i := 1; i <= 9; i++ {
		name := fmt.Sprintf("lol%d", i)
		fmt.Fprintf(&dtd, `<!ENTITY %s "%s">`, name, strings.Repeat("&"+prev+";", 10))
		prev = name
	}
	dtd.WriteString(`]><w:document xmlns:w="` + nsW + `"><w:body><w:p><w:r><w:t>&lol9;</w:t></w:r></w:p></w:body></w:document>`)
	return Zip(docxFiles(dtd.String())...)
}

// SlowDOCX is a well-formed document of 60 MiB of empty paragraphs,
// within every size limit: parsing it costs seconds of CPU (cpu_time,
// under a one-second CPU limit).
func SlowDOCX() []byte {
	return Zip(docxFiles(`<?xml version="1.0"?><w:document xmlns:w="` + nsW + `"><w:body>` + strings.Repeat("<w:p/>", 10<<20) + `</w:body></w:document>`)...)
}

// FailEmpty is a 0-byte file (empty).
func FailEmpty() []byte { return []byte{} }

// FailTruncated is a good document cut in half: its central directory
// is gone (corrupt).
func FailTruncated() []byte {
	d := GoodDOCX()
	return d[:len(d)/2]
}

// FailELF is the start of a real executable, to be named .docx (kind).
func FailELF() []byte {
	b, err := os.ReadFile("/usr/bin/true")
	if err != nil || len(b) < 4 {
		return append([]byte("\x7fELF\x02\x01\x01\x00"), make([]byte, 4096)...)
	}
	return b
}

// FailDotDot is a document with an entry named ../../evil.sh
// (entry_name).
func FailDotDot() []byte {
	return Zip(append(docxFiles(`<?xml version="1.0"?><w:document xmlns:w="`+nsW+`"><w:body/></w:document>`), File{"../../evil.sh", "#!/bin/sh\necho pwned\n"})...)
}

// FailManySheets is a workbook of 50,000 sheets (entries: each sheet is
// a part of the package).
func FailManySheets() []byte {
	names := make([]string, 50000)
	for i := range names {
		names[i] = fmt.Sprintf("S%d", i+1)
	}
	return XLSX(names, nil)
}

// Hostile lists the hostile documents by name (the file name they are
// uploaded as) with the limit their refusal must name.
func Hostile() []struct {
	Name, Limit string
	Data        func() []byte
} {
	return []struct {
		Name, Limit string
		Data        func() []byte
	}{
		{"flat-bomb.docx", "unzip_size", FailFlatBomb},
		{"nested-bomb.docx", "unzip_size", FailNestedBomb},
		{"billion-laughs.docx", "dtd", FailBillionLaughs},
		{"empty.docx", "empty", FailEmpty},
		{"truncated.docx", "corrupt", FailTruncated},
		{"elf.docx", "kind", FailELF},
		{"dotdot.docx", "entry_name", FailDotDot},
		{"many-sheets.xlsx", "entries", FailManySheets},
	}
}
