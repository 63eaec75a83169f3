package office

import (
	"testing"

	"github.com/codumentor/codumentor/integrations/office/officetest"
)

// BenchmarkParse compares parsing a 10k-row workbook and a 100-page
// document through the sandboxed worker with parsing the same file in
// this process: the difference is the sandbox's share (target: at most
// 50 ms a document). scripts/bench runs it.
func BenchmarkParse(b *testing.B) {
	files := []struct {
		name string
		data []byte
	}{
		{"xlsx-10k-rows", officetest.BigXLSX(10000)},
		{"docx-100-pages", officetest.BigDOCX(100)},
	}
	for _, f := range files {
		path := write(b, f.name, f.data)
		b.Run(f.name+"/in-process", func(b *testing.B) {
			for b.Loop() {
				if _, err := parseFile(b.Context(), path, Limits{}); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(f.name+"/worker", func(b *testing.B) {
			requireSandbox(b)
			p := &Parser{}
			for b.Loop() {
				if _, err := p.Parse(b.Context(), path); err != nil {
					b.Fatal(err)
				}
			}
		})
		// The same without a cgroup (rlimits only): the cgroup's share.
		b.Run(f.name+"/worker-rlimits-only", func(b *testing.B) {
			requireSandbox(b)
			sl := WorkerLimits()
			sl.Pids, sl.Memory, sl.CPU = 0, 0, 0
			p := &Parser{Sandbox: &sl}
			for b.Loop() {
				if _, err := p.Parse(b.Context(), path); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
