package officetest

import (
	"bytes"
	"encoding/xml"
)

func xmlEscape(b *bytes.Buffer, s string) { xml.EscapeText(b, []byte(s)) }
