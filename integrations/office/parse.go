package office

import (
	"context"
	"os"
)

// parseFile reads the document at path in this process. Only the worker
// calls it (and the benchmark that measures the worker's overhead): the
// server parses nothing itself.
func parseFile(ctx context.Context, path string, lim Limits) (*Document, error) {
	lim = lim.withDefaults()
	f, err := os.Open(path)
	if err != nil {
		return nil, errf("open the input: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, errf("stat the input: %w", err)
	}
	kind, err := detect(f, st.Size())
	if err != nil {
		return nil, err
	}
	b := &builder{lim: lim}
	if kind == KindPDF {
		b.doc.Kind = KindPDF
		if err := parsePDF(ctx, path, b); err != nil {
			return nil, err
		}
		return &b.doc, nil
	}
	p, err := openPackage(f, st.Size(), lim)
	if err != nil {
		return nil, err
	}
	b.doc.Kind = p.kind
	switch p.kind {
	case KindDOCX:
		err = parseDOCX(p, b)
	case KindPPTX:
		err = parsePPTX(p, b)
	case KindXLSX:
		err = parseXLSX(f, p, b)
	}
	if err != nil {
		return nil, err
	}
	if b.doc.Parts == nil {
		b.doc.Parts = []Part{}
	}
	return &b.doc, nil
}
