package office

import (
	"encoding/xml"
	"errors"
	"io"
	"strconv"
	"strings"
)

// parseDOCX reads the main document part: paragraphs in order, headings
// as Markdown headings (a level 1 or 2 heading starts a new section),
// tables as rows of cells.
func parseDOCX(p *pkg, b *builder) error {
	rc, err := p.open(p.main)
	if err != nil {
		return err
	}
	defer rc.Close()
	d := xml.NewDecoder(rc)
	var (
		section, title = strings.Builder{}, "Document"
		para           strings.Builder
		heading        int
		inText         bool
		tblDepth       int
		row            []string
		cell           strings.Builder
	)
	flush := func(next string) {
		if strings.TrimSpace(section.String()) != "" {
			b.add(title, section.String())
		}
		section.Reset()
		title = next
	}
	for !b.full() {
		tok, err := d.RawToken()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return refuse(LimitCorrupt, "the document part is not well-formed XML: %v", err)
		}
		switch t := tok.(type) {
		case xml.StartElement:
			switch t.Name.Local {
			case "p":
				para.Reset()
				heading = 0
			case "pStyle":
				heading = headingLevel(attr(t, "val"))
			case "t":
				inText = true
			case "tab":
				para.WriteByte('\t')
			case "br", "cr":
				para.WriteByte('\n')
			case "tbl":
				tblDepth++
			case "tr":
				if tblDepth == 1 {
					row = row[:0]
				}
			case "tc":
				if tblDepth == 1 {
					cell.Reset()
				}
			}
		case xml.EndElement:
			switch t.Name.Local {
			case "t":
				inText = false
			case "p":
				text := strings.TrimRight(para.String(), " ")
				if tblDepth > 0 {
					if cell.Len() > 0 {
						cell.WriteByte(' ')
					}
					cell.WriteString(strings.ReplaceAll(text, "\n", " "))
					continue
				}
				if heading > 0 && heading <= 2 && strings.TrimSpace(text) != "" {
					flush(strings.TrimSpace(text))
				}
				if heading > 0 {
					text = strings.Repeat("#", heading) + " " + text
				}
				section.WriteString(text)
				section.WriteByte('\n')
			case "tc":
				if tblDepth == 1 {
					row = append(row, strings.ReplaceAll(strings.TrimSpace(cell.String()), "|", "\\|"))
				}
			case "tr":
				if tblDepth == 1 {
					section.WriteString("| " + strings.Join(row, " | ") + " |\n")
				}
			case "tbl":
				tblDepth--
				if tblDepth == 0 {
					section.WriteByte('\n')
				}
			}
		case xml.CharData:
			// A paragraph beyond the text limit is not kept whole.
			if inText && para.Len()+cell.Len() < b.lim.MaxText {
				para.Write(t)
			}
		}
		if section.Len() > b.lim.PartBytes*4 {
			// Long sections are handed over in pieces as they grow.
			b.add(title, section.String())
			section.Reset()
		}
	}
	flush("")
	return nil
}

// headingLevel is the level of a paragraph style ("Heading2" → 2,
// "Title" → 1), or 0.
func headingLevel(style string) int {
	s := strings.ToLower(style)
	if s == "title" {
		return 1
	}
	if rest, ok := strings.CutPrefix(s, "heading"); ok {
		if n, err := strconv.Atoi(strings.TrimSpace(rest)); err == nil && n >= 1 && n <= 9 {
			return n
		}
	}
	return 0
}

func attr(t xml.StartElement, local string) string {
	for _, a := range t.Attr {
		if a.Name.Local == local {
			return a.Value
		}
	}
	return ""
}
