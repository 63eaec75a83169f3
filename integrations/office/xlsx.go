package office

import (
	"fmt"
	"os"
	"strings"

	"github.com/xuri/excelize/v2"
)

// cellSpace turns the separators of the text's table (tabs, line breaks)
// inside a cell into spaces.
var cellSpace = strings.NewReplacer("\t", " ", "\n", " ", "\r", " ")

// parseXLSX reads every sheet as a table, one row a line, cells
// separated by tabs; a formula cell shows its cached value, as the
// spreadsheet last computed it (nothing is recalculated).
func parseXLSX(f *os.File, p *pkg, b *builder) error {
	if _, err := f.Seek(0, 0); err != nil {
		return errf("seek: %w", err)
	}
	x, err := excelize.OpenReader(f, excelize.Options{
		UnzipSizeLimit:    b.lim.MaxUnzipBytes,
		UnzipXMLSizeLimit: min(16<<20, b.lim.MaxPartBytes),
	})
	if err != nil {
		return refuse(LimitCorrupt, "the workbook cannot be read: %s", clip(err.Error()))
	}
	defer x.Close()
	sheets := x.GetSheetList()
	if len(sheets) > b.lim.MaxSheets {
		return refuse(LimitSheets, "the workbook has %d sheets, more than the limit of %d", len(sheets), b.lim.MaxSheets)
	}
	for _, name := range sheets {
		if b.full() {
			break
		}
		rows, err := x.Rows(name)
		if err != nil {
			return refuse(LimitCorrupt, "the sheet %q cannot be read: %s", clip(name), clip(err.Error()))
		}
		var sb strings.Builder
		for rows.Next() && sb.Len() <= b.lim.MaxText {
			cols, err := rows.Columns()
			if err != nil {
				rows.Close()
				return refuse(LimitCorrupt, "the sheet %q cannot be read: %s", clip(name), clip(err.Error()))
			}
			for i, c := range cols {
				if i > 0 {
					sb.WriteByte('\t')
				}
				sb.WriteString(cellSpace.Replace(c))
			}
			sb.WriteByte('\n')
		}
		err = rows.Error()
		rows.Close()
		if err != nil {
			return refuse(LimitCorrupt, "the sheet %q cannot be read: %s", clip(name), clip(err.Error()))
		}
		b.add(fmt.Sprintf("Sheet %s", name), sb.String())
	}
	return nil
}
