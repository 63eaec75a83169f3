package agentcore

import (
	"bytes"
	"encoding/base32"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"log/slog"
	"net/url"
	"regexp"
	"strings"
	"testing"
)

func TestRedactor(t *testing.T) {
	const v = "s3cr3t/value+with=odd&chars\"x"
	r := newRedactor(map[string]string{"TOKEN": v, "SHORT": "abc"})
	tests := []struct {
		name, in string
	}{
		{"raw", "token=" + v + " end"},
		{"base64 std", base64.StdEncoding.EncodeToString([]byte(v))},
		{"base64 url", base64.URLEncoding.EncodeToString([]byte(v))},
		{"base64 raw", base64.RawStdEncoding.EncodeToString([]byte(v))},
		{"base64 with newline", base64.StdEncoding.EncodeToString([]byte(v + "\n"))},
		{"base64 offset 1", base64.StdEncoding.EncodeToString([]byte("x" + v + "\n"))},
		{"base64 offset 2", base64.StdEncoding.EncodeToString([]byte("xy" + v + "\n"))},
		{"query", "https://h/?t=" + url.QueryEscape(v)},
		{"path", "https://h/" + url.PathEscape(v)},
		{"hex", hex.EncodeToString([]byte(v))},
		{"HEX", strings.ToUpper(hex.EncodeToString([]byte(v)))},
		{"json", string(must(json.Marshal(map[string]string{"a": v})))},
		{"json without HTML escapes", `{"a":"` + strings.ReplaceAll(v, `"`, `\"`) + `"}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out := r.String(tt.in)
			if !strings.Contains(out, "[secret:TOKEN]") {
				t.Errorf("%q → %q: not redacted", tt.in, out)
			}
			if strings.Contains(out, v) {
				t.Errorf("%q still holds the value", out)
			}
		})
	}
	// A value long enough to be wrapped by base64 (76 columns) and
	// friends.
	long := strings.Repeat("L0ng/secret+", 8) // 96 bytes
	rl := newRedactor(map[string]string{"LONG": long, "TOKEN": v})
	wrap := func(s string, width int, nl string) string {
		var b strings.Builder
		for len(s) > width {
			b.WriteString(s[:width] + nl)
			s = s[width:]
		}
		return b.String() + s
	}
	spaced := func(h string) string {
		var parts []string
		for i := 0; i < len(h); i += 2 {
			parts = append(parts, h[i:i+2])
		}
		return strings.Join(parts, " ")
	}
	lowerPct := func(s string) string {
		return regexp.MustCompile(`%[0-9A-F]{2}`).ReplaceAllStringFunc(s, strings.ToLower)
	}
	longTests := []struct{ name, in, value, secret string }{
		{"base64 wrapped at 76", wrap(base64.StdEncoding.EncodeToString([]byte(long+"\n")), 76, "\n") + "\n", long, "LONG"},
		{"base64 wrapped at 76, CRLF", wrap(base64.StdEncoding.EncodeToString([]byte(long)), 76, "\r\n"), long, "LONG"},
		{"base64 wrapped at 64, offset 2", "-----BEGIN X-----\n" + wrap(base64.StdEncoding.EncodeToString([]byte("ab"+long+"tail")), 64, "\n") + "\n-----END X-----", long, "LONG"},
		{"base64 wrapped, short value split", "out: " + wrap(base64.StdEncoding.EncodeToString([]byte(strings.Repeat("z", 50)+v)), 76, "\n"), v, "TOKEN"},
		{"base32", base32.StdEncoding.EncodeToString([]byte(v)), v, "TOKEN"},
		{"base32 with newline", base32.StdEncoding.EncodeToString([]byte(v + "\n")), v, "TOKEN"},
		{"base32 offset 3", base32.StdEncoding.EncodeToString([]byte("abc" + v + "\n")), v, "TOKEN"},
		{"base32 wrapped", wrap(base32.StdEncoding.EncodeToString([]byte(long+"\n")), 76, "\n"), long, "LONG"},
		{"hex spaced", spaced(hex.EncodeToString([]byte(v))), v, "TOKEN"},
		{"HEX spaced", strings.ToUpper(spaced(hex.EncodeToString([]byte(v)))), v, "TOKEN"},
		{"hex wrapped (xxd -p)", wrap(hex.EncodeToString([]byte(long)), 60, "\n"), long, "LONG"},
		{"json \\/ escapes", strings.ReplaceAll(string(must(json.Marshal(v))), "/", `\/`), v, "TOKEN"},
		{"json \\/ escapes of base64", strings.ReplaceAll(base64.StdEncoding.EncodeToString([]byte(long)), "/", `\/`), long, "LONG"},
		{"query lower-case escapes", lowerPct(url.QueryEscape(v)), v, "TOKEN"},
		{"path lower-case escapes", lowerPct(url.PathEscape(v)), v, "TOKEN"},
	}
	for _, tt := range longTests {
		t.Run(tt.name, func(t *testing.T) {
			out := rl.String(tt.in)
			if !strings.Contains(out, "[secret:"+tt.secret+"]") {
				t.Errorf("%q → %q: not redacted", tt.in, out)
			}
		})
	}
	// Joining wrapped lines must not eat ordinary text.
	if in := "line one\nline two\n"; rl.String(in) != in {
		t.Errorf("%q → %q", in, rl.String(in))
	}
	// Values too short to redact leave text alone.
	if got := r.String("abcdef"); got != "abcdef" {
		t.Errorf("short secret redacted: %q", got)
	}
	// Redacted JSON stays JSON.
	if got := r.JSON([]byte(`{"out":"` + v[:8] + `"}`)); !strings.Contains(string(got), "out") {
		t.Errorf("JSON %s", got)
	}
}

// A short secret (under minAnywhere bytes) is redacted where it stands
// alone, never inside a word; a long one wherever it is; JSON keys and
// numbers stay.
func TestRedactShortSecrets(t *testing.T) {
	r := newRedactor(map[string]string{"PIN": "x", "ONE": "1", "MIN": "01", "PW": "hunter2", "WORD": "secret", "KEY": "sk-0123456789abcdef"})
	tests := []struct{ in, want string }{
		{"maximum context length is 12000 tokens", "maximum context length is 12000 tokens"},
		{"Authorization: Bearer x", "Authorization: Bearer [secret:PIN]"},
		{"x", "[secret:PIN]"},
		{"(x) x. x,x", "([secret:PIN]) [secret:PIN]. [secret:PIN],[secret:PIN]"},
		{"xx x_ _x 0x ünïx", "xx x_ _x 0x ünïx"},
		{"pw=hunter2;\nhunter2", "pw=[secret:PW];\n[secret:PW]"},
		{"hunter22 xhunter2 latest_hunter2", "hunter22 xhunter2 latest_hunter2"},
		{"page 1 of 10", "page [secret:ONE] of 10"},
		// The encodings of a short value that are 8 bytes or longer are
		// found anywhere, as its long forms.
		{"b64:aHVudGVyMg== hex:68756e74657232", "b64:[secret:PW] hex:[secret:PW]"},
		// A long value, also inside a word.
		{"keysk-0123456789abcdefx", "key[secret:KEY]x"},
		// The markers are not redacted again.
		{"the secret is secret", "the [secret:WORD] is [secret:WORD]"},
	}
	for _, tt := range tests {
		got := r.String(tt.in)
		if got != tt.want {
			t.Errorf("String(%q) = %q, want %q", tt.in, got, tt.want)
		}
		if again := r.String(got); again != got {
			t.Errorf("String(%q) again = %q", got, again)
		}
	}
	for _, tt := range []struct{ in, want string }{
		{`{"x":1,"count":1,"text":"a x b\nx","id":"xx"}`, `{"x":1,"count":1,"text":"a [secret:PIN] b\n[secret:PIN]","id":"xx"}`},
		{`{"output":"hunter2","n":[1,"1"]}`, `{"output":"[secret:PW]","n":[1,"[secret:ONE]"]}`},
		{`{"arguments":"{\"command\":\"echo x\"}"}`, `{"arguments":"{\"command\":\"echo [secret:PIN]\"}"}`},
		{`{"created":"2026-12-01T13:01:01Z","expires":"2026-12-01T13:11:01.5+01:00","text":"at 13:01:01"}`,
			`{"created":"2026-12-01T13:01:01Z","expires":"2026-12-01T13:11:01.5+01:00","text":"at 13:[secret:MIN]:[secret:MIN]"}`},
	} {
		got := r.JSON([]byte(tt.in))
		if string(got) != tt.want {
			t.Errorf("JSON(%s) = %s, want %s", tt.in, got, tt.want)
		}
	}
	// Many beginnings of a marker without its end are ordinary text
	// (each is looked at for the longest name's length only: searching
	// to the end for each "]" made this 50 times slower).
	flood := strings.Repeat("[secret:", 1<<17) + " x"
	if got := newRedactor(map[string]string{"PIN": "x"}).String(flood); got != flood[:len(flood)-1]+"[secret:PIN]" {
		t.Errorf("the flood's end: %q", got[len(got)-20:])
	}
	// Deltas split anywhere redact as the whole text does.
	text := "x ax xa x. hunter2 hunter22 (hunter2)\nx 1 12 secret [secret:WORD] x"
	splits(t, r, text, r.String(text), []int{1, 2, 3, 4, 5, 7, 8, 11})
}

func TestRedactLogs(t *testing.T) {
	var buf bytes.Buffer
	r := newRedactor(map[string]string{"K": "hunter22hunter"})
	log := slog.New(redactHandler{slog.NewTextHandler(&buf, nil), r}).With("pre", "hunter22hunter")
	log.Info("msg hunter22hunter", "s", "x hunter22hunter", "err", errors.New("e hunter22hunter"), slog.Group("g", "v", "hunter22hunter"))
	if strings.Contains(buf.String(), "hunter22") || strings.Count(buf.String(), "[secret:K]") != 5 {
		t.Errorf("log %q", buf.String())
	}
}

func TestSubstituteSecrets(t *testing.T) {
	secrets := map[string]string{"A": "va", "B_2": "vb"}
	tests := []struct {
		cmd, want string
		env       []string
		err       string
	}{
		{"echo hi", "echo hi", nil, ""},
		{"curl -H {{secret:A}} x{{secret:B_2}}y {{secret:A}}", `curl -H "${CODUMENTOR_SECRET_A}" x"${CODUMENTOR_SECRET_B_2}"y "${CODUMENTOR_SECRET_A}"`,
			[]string{"CODUMENTOR_SECRET_A=va", "CODUMENTOR_SECRET_B_2=vb"}, ""},
		{"echo {{secret:C}}", "", nil, `unknown secret "C"`},
		{"echo {{secret:a b}}", "echo {{secret:a b}}", nil, ""}, // not a placeholder
	}
	for _, tt := range tests {
		got, env, err := substituteSecrets(tt.cmd, secrets)
		if tt.err != "" {
			if err == nil || !strings.Contains(err.Error(), tt.err) || !strings.Contains(err.Error(), "A, B_2") {
				t.Errorf("%q: err %v, want %q", tt.cmd, err, tt.err)
			}
			continue
		}
		if err != nil || got != tt.want || strings.Join(env, ",") != strings.Join(tt.env, ",") {
			t.Errorf("%q → %q %v %v, want %q %v", tt.cmd, got, env, err, tt.want, tt.env)
		}
	}
}

func TestCleanRel(t *testing.T) {
	tests := []struct {
		in, want string
		outside  bool
	}{
		{"", "", false},
		{".", "", false},
		{"a/b", "a/b", false},
		{"a/../b", "b", false},
		{"./a//b/", "a/b", false},
		{"..", "", true},
		{"../x", "", true},
		{"a/../../x", "", true},
		{"/etc/passwd", "", true},
		{"/workspace/a", "", true},
	}
	for _, tt := range tests {
		got, err := cleanRel(tt.in)
		if tt.outside {
			if !errors.Is(err, ErrOutsideWorkspace) {
				t.Errorf("cleanRel(%q) = %q, %v; want ErrOutsideWorkspace", tt.in, got, err)
			}
			continue
		}
		if err != nil || got != tt.want {
			t.Errorf("cleanRel(%q) = %q, %v; want %q", tt.in, got, err, tt.want)
		}
	}
}

func must(b []byte, err error) []byte {
	if err != nil {
		panic(err)
	}
	return b
}

func TestSubstituteSecretsQuoting(t *testing.T) {
	secrets := map[string]string{"PW": "correct horse battery *", "K": "k-value"}
	const v, k = `"${CODUMENTOR_SECRET_PW}"`, `"${CODUMENTOR_SECRET_K}"`
	good := []struct{ in, want string }{
		{`echo {{secret:PW}}`, `echo ` + v},
		{`echo "{{secret:PW}}"`, `echo "${CODUMENTOR_SECRET_PW}"`},
		{`echo "a {{secret:PW}} b"`, `echo "a ${CODUMENTOR_SECRET_PW} b"`},
		{`echo x{{secret:PW}}y`, `echo x` + v + `y`},
		{`echo 'a'{{secret:PW}}'b'`, `echo 'a'` + v + `'b'`},
		{`echo "$(printf %s {{secret:PW}})"`, `echo "$(printf %s ` + v + `)"`},
		{`echo "$(printf %s "{{secret:PW}}")" {{secret:K}}`, `echo "$(printf %s "${CODUMENTOR_SECRET_PW}")" ` + k},
		{`echo "\"" {{secret:PW}} "\\" "{{secret:K}}"`, `echo "\"" ` + v + ` "\\" "${CODUMENTOR_SECRET_K}"`},
		{`echo it\'s {{secret:PW}}`, `echo it\'s ` + v},
		{"echo hi # it's {{secret:PW}}\necho {{secret:K}}", "echo hi # it's {{secret:PW}}\necho " + k},
		{"cat <<EOF\nplain\nEOF\necho {{secret:PW}}", "cat <<EOF\nplain\nEOF\necho " + v},
		{"cat <<-'E' > f; echo {{secret:PW}}\n\tbody\n\tE\necho \"{{secret:K}}\"", "cat <<-'E' > f; echo " + v + "\n\tbody\n\tE\necho \"${CODUMENTOR_SECRET_K}\""},
		{`x=$((1+2)); echo $x {{secret:PW}}`, `x=$((1+2)); echo $x ` + v},
		{"x=$((1 << 2))\necho {{secret:PW}}", "x=$((1 << 2))\necho " + v},
		{`echo ${HOME:-/} {{secret:PW}}`, `echo ${HOME:-/} ` + v},
	}
	for _, tt := range good {
		got, env, err := substituteSecrets(tt.in, secrets)
		if err != nil || got != tt.want {
			t.Errorf("substituteSecrets(%q) = %q, %v; want %q", tt.in, got, err, tt.want)
			continue
		}
		if len(env) == 0 || !strings.HasPrefix(env[0], "CODUMENTOR_SECRET_") {
			t.Errorf("substituteSecrets(%q): env %q", tt.in, env)
		}
	}
	bad := []struct{ in, want string }{
		{`echo '{{secret:PW}}'`, "single quotes"},
		{`echo "it's" '{{secret:PW}}'`, "single quotes"},
		{`echo $'{{secret:PW}}'`, "single quotes"},
		{"cat <<EOF\n{{secret:PW}}\nEOF", "here-document"},
		{"cat <<'EOF'\n{{secret:PW}}\nEOF", "here-document"},
		{"echo `echo {{secret:PW}}`", "backquotes"},
		{`echo ${X:-{{secret:PW}}}`, "${"},
		{`echo ${{secret:PW}}`, "after"},
		{`echo \{{secret:PW}}`, "after"},
		{`echo "\{{secret:PW}}"`, "after"},
		{`echo $(( {{secret:PW}} + 1 ))`, "arithmetic"},
		{`echo $(case x in x) echo {{secret:PW}};; esac)`, "case"},
	}
	for _, tt := range bad {
		got, _, err := substituteSecrets(tt.in, secrets)
		if err == nil || !strings.Contains(err.Error(), tt.want) || !strings.Contains(err.Error(), "nothing was run") {
			t.Errorf("substituteSecrets(%q) = %q, %v; want a refusal naming %q", tt.in, got, err, tt.want)
		}
	}
}

// SecretScanner names the secret it finds, in any form the redaction
// knows, and finds nothing in a text without one.
func TestSecretScanner(t *testing.T) {
	sc := NewSecretScanner(map[string]string{"A": "alpha-value", "B": "bravo-value", "S": "abc"})
	for in, want := range map[string]string{
		"x alpha-value y":                     "A",
		"YnJhdm8tdmFsdWU=":                    "B", // base64
		"627261766f2d76616c7565":              "B", // hex
		"bravo%2Dvalue":                       "",  // not an escape url.PathEscape makes
		"nothing here, [secret:A] as text":    "",
		"abc is too short to be looked for":   "",
		"first alpha-val\nue, split: not one": "",
	} {
		name, ok := sc.Find(in)
		if name != want || ok != (want != "") {
			t.Errorf("Find(%q) = %q, %v; want %q", in, name, ok, want)
		}
	}
	if got := sc.Redact("a alpha-value"); got != "a [secret:A]" {
		t.Errorf("Redact = %q", got)
	}
}
