package office

import (
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"strings"
)

const (
	relSlide      = "http://schemas.openxmlformats.org/officeDocument/2006/relationships/slide"
	relNotesSlide = "http://schemas.openxmlformats.org/officeDocument/2006/relationships/notesSlide"
)

// parsePPTX reads the slides in presentation order (p:sldIdLst), each
// with its speaker notes.
func parsePPTX(p *pkg, b *builder) error {
	var pres struct {
		Slides []struct {
			RID string `xml:"http://schemas.openxmlformats.org/officeDocument/2006/relationships id,attr"`
		} `xml:"sldIdLst>sldId"`
	}
	if err := p.decodePart(p.main, &pres); err != nil {
		return err
	}
	if len(pres.Slides) > b.lim.MaxSlides {
		return refuse(LimitSlides, "the presentation has %d slides, more than the limit of %d", len(pres.Slides), b.lim.MaxSlides)
	}
	rels, err := p.rels(p.main)
	if err != nil {
		return err
	}
	for i, s := range pres.Slides {
		if b.full() {
			break
		}
		r, ok := rels[s.RID]
		if !ok || r.Type != relSlide {
			return refuse(LimitCorrupt, "slide %d refers to a missing part", i+1)
		}
		text, err := p.paragraphs(r.Target)
		if err != nil {
			return err
		}
		srels, err := p.rels(r.Target)
		if err != nil {
			return err
		}
		for _, sr := range srels {
			if sr.Type == relNotesSlide && p.has(sr.Target) {
				notes, err := p.paragraphs(sr.Target)
				if err != nil {
					return err
				}
				if strings.TrimSpace(notes) != "" {
					text += "\nNotes:\n" + notes
				}
				break
			}
		}
		b.add(fmt.Sprintf("Slide %d", i+1), text)
	}
	return nil
}

// paragraphs is the DrawingML text of a part (a:p of a:t runs), one
// paragraph a line.
func (p *pkg) paragraphs(name string) (string, error) {
	rc, err := p.open(name)
	if err != nil {
		return "", err
	}
	defer rc.Close()
	d := xml.NewDecoder(rc)
	var out, para strings.Builder
	inText := false
	for out.Len() < p.lim.MaxText {
		tok, err := d.RawToken()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return "", refuse(LimitCorrupt, "the part %q is not well-formed XML: %v", clip(name), err)
		}
		switch t := tok.(type) {
		case xml.StartElement:
			switch t.Name.Local {
			case "p":
				para.Reset()
			case "t":
				inText = true
			case "br":
				para.WriteByte('\n')
			}
		case xml.EndElement:
			switch t.Name.Local {
			case "t":
				inText = false
			case "p":
				if s := strings.TrimSpace(para.String()); s != "" {
					out.WriteString(s)
					out.WriteByte('\n')
				}
			}
		case xml.CharData:
			if inText && para.Len() < p.lim.MaxText {
				para.Write(t)
			}
		}
	}
	return out.String(), nil
}
