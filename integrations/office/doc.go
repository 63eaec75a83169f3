// Package office reads attachments (xlsx, docx, pptx, pdf) as text for
// the agent, without letting the file near the server process.
//
// What is isolated. The document is parsed by a worker: this program's
// own binary, executed again (sandboxkit.SelfCommand) in the office
// sandbox profile: no network, no workspace, the one input file
// read-only, an empty sized tmpfs, and limits on processes, memory,
// address space, CPU time and file size. The worker answers one JSON
// document on stdout, under an output cap. The server never opens the
// document's zip or XML itself; it decodes and checks the worker's JSON
// as untrusted data. PDFs are read by pdftotext (poppler-utils) inside
// the same sandbox.
//
// What is refused. A document the worker cannot read, or that crosses
// one of its limits (Limits: zip entries, unsafe entry names, declared
// and nested expansion, XML document type declarations, sheets, parts),
// or a worker that dies at a sandbox limit, ends with an
// *UnparseableError naming the limit. The kind is decided from the
// content (magic bytes, the OOXML package's content types), never from
// the file name.
//
// Fail closed. When the sandbox cannot be provided, Parser.Parse returns
// an error wrapping sandboxkit.ErrUnavailable and parses nothing: there
// is no in-process fallback.
//
// Programs that use Parser must call WorkerMain right after
// sandboxkit.Main in main (and in TestMain): that is where the worker
// runs.
package office
