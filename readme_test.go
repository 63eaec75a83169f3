package codumentor_test

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"

	"github.com/codumentor/codumentor/daemon/config"
)

// goBlock is a fenced Go block of a Markdown file.
var goBlock = regexp.MustCompile("(?s)```go\n(.*?)```")

// Every Go example in the READMEs is a whole program that builds as
// written: a reader can paste it and it compiles.
func TestREADMEExamplesBuild(t *testing.T) {
	root, err := filepath.Abs(".")
	if err != nil {
		t.Fatal(err)
	}
	docs, err := filepath.Glob(filepath.Join(root, "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	more, _ := filepath.Glob(filepath.Join(root, "*", "*.md"))
	docs = append(docs, more...)
	n := 0
	for _, doc := range docs {
		b, err := os.ReadFile(doc)
		if err != nil {
			t.Fatal(err)
		}
		rel, _ := filepath.Rel(root, doc)
		for i, m := range goBlock.FindAllSubmatch(b, -1) {
			n++
			src := string(m[1])
			name := strings.NewReplacer("/", "_", ".", "_").Replace(rel) + "_" + string(rune('a'+i))
			t.Run(name, func(t *testing.T) {
				if !strings.HasPrefix(src, "package ") {
					t.Fatalf("%s: Go example %d is not a whole program (it must start with a package clause):\n%s", rel, i+1, src)
				}
				buildExample(t, root, name, src)
			})
		}
	}
	if n < 2 {
		t.Fatalf("found %d Go examples in %v; the README and agentcore/README.md have some", n, docs)
	}
}

// buildExample builds src as package main of a directory inside the root
// module that exists only in an -overlay, so the tree is not touched and
// the workspace's modules resolve as they do for our own code.
func buildExample(t *testing.T, root, name, src string) {
	tmp := t.TempDir()
	file := filepath.Join(tmp, "main.go")
	if err := os.WriteFile(file, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	virtual := filepath.Join(root, "internal", "readmeexamples", name, "main.go")
	overlay, _ := json.Marshal(map[string]map[string]string{"Replace": {virtual: file}})
	ov := filepath.Join(tmp, "overlay.json")
	if err := os.WriteFile(ov, overlay, 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("go", "build", "-overlay", ov, "-o", os.DevNull, "./"+filepath.ToSlash(filepath.Dir(mustRel(t, root, virtual))))
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Errorf("the example does not build: %v\n%s\n%s", err, out, src)
	}
}

func mustRel(t *testing.T, base, p string) string {
	r, err := filepath.Rel(base, p)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// yamlBlock is a fenced YAML block of a Markdown file, possibly indented
// (inside a list item).
var yamlBlock = regexp.MustCompile("(?s)\n( *)```yaml\n(.*?)\n *```")

// The README's configuration example is a config.yaml the server takes:
// every key it shows exists and every value it shows is valid.
func TestREADMEConfigParses(t *testing.T) {
	b, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, m := range yamlBlock.FindAllSubmatch(b, -1) {
		indent := string(m[1])
		var lines []string
		for _, l := range strings.Split(string(m[2]), "\n") {
			lines = append(lines, strings.TrimPrefix(l, indent))
		}
		text := strings.Join(lines, "\n")
		if !strings.HasPrefix(text, "listen:") {
			continue // a fragment, not a whole config.yaml
		}
		n++
		// The example elides the secret; any 32 bytes stand for it.
		text = strings.Replace(text, "jwt_secret: …", "jwt_secret: "+strings.Repeat("s", 40), 1)
		if _, err := config.Parse([]byte(text)); err != nil {
			t.Errorf("the README's config.yaml example does not parse: %v\n%s", err, text)
		}
		checkAllKeys(t, text)
	}
	if n == 0 {
		t.Fatal("no config.yaml example (a YAML block starting with listen:) in README.md")
	}
}

// checkAllKeys: the README's config.yaml example names every key of the
// schema, so an operator reading it sees every setting there is. The
// elements of lists (external agents, MCP servers, …) have their own
// examples and are not descended into.
func checkAllKeys(t *testing.T, text string) {
	var doc yaml.Node
	if err := yaml.Unmarshal([]byte(text), &doc); err != nil {
		t.Fatal(err)
	}
	shown := map[string]bool{}
	var walk func(prefix string, n *yaml.Node)
	walk = func(prefix string, n *yaml.Node) {
		if n.Kind == yaml.DocumentNode {
			walk(prefix, n.Content[0])
			return
		}
		if n.Kind != yaml.MappingNode {
			return
		}
		for i := 0; i+1 < len(n.Content); i += 2 {
			k := prefix + n.Content[i].Value
			shown[k] = true
			walk(k+".", n.Content[i+1])
		}
	}
	walk("", &doc)
	var missing []string
	for _, k := range schemaKeys("", reflect.TypeFor[config.Config]()) {
		if !shown[k] {
			missing = append(missing, k)
		}
	}
	if len(missing) > 0 {
		t.Errorf("the README's config.yaml example lacks these keys of the schema (add each with its default and a comment):\n  %s", strings.Join(missing, "\n  "))
	}
}

// schemaKeys lists the dotted YAML keys of struct type t: every field,
// and the fields of the structs it holds (not of list or map elements,
// nor of types that read themselves from YAML).
func schemaKeys(prefix string, t reflect.Type) []string {
	var keys []string
	for i := range t.NumField() {
		f := t.Field(i)
		name, opts, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		if name == "-" || !f.IsExported() {
			continue
		}
		if opts == "inline" {
			keys = append(keys, schemaKeys(prefix, f.Type)...)
			continue
		}
		if name == "" {
			name = strings.ToLower(f.Name)
		}
		keys = append(keys, prefix+name)
		ft := f.Type
		if ft.Kind() == reflect.Pointer {
			ft = ft.Elem()
		}
		if ft.Kind() == reflect.Struct && !reflect.PointerTo(ft).Implements(reflect.TypeFor[yaml.Unmarshaler]()) {
			keys = append(keys, schemaKeys(prefix+name+".", ft)...)
		}
	}
	slices.Sort(keys)
	return keys
}

// The systemd unit, the README and scripts/run name one layout: the
// binaries and the instance where scripts/run puts them as root.
func TestOneLayout(t *testing.T) {
	run, err := os.ReadFile("scripts/run")
	if err != nil {
		t.Fatal(err)
	}
	unit, err := os.ReadFile("scripts/codumentor.service")
	if err != nil {
		t.Fatal(err)
	}
	readme, _ := os.ReadFile("README.md")
	for _, want := range []string{"base=/var/lib/codumentor\n", `instance=${CODUMENTOR_INSTANCE:-$base/instance}`, `bindir=$base/bin`} {
		if !strings.Contains(string(run), want) {
			t.Fatalf("scripts/run no longer says %q: update this test, the unit and the README together", want)
		}
	}
	exec := regexp.MustCompile(`(?m)^ExecStart=(\S+) api --instance (\S+)$`).FindStringSubmatch(string(unit))
	if exec == nil || exec[1] != "/var/lib/codumentor/bin/codumentor" || exec[2] != "/var/lib/codumentor/instance" {
		t.Errorf("codumentor.service's ExecStart %q: want /var/lib/codumentor/bin/codumentor api --instance /var/lib/codumentor/instance, as scripts/run", exec)
	}
	for _, doc := range [][]byte{unit, readme} {
		for _, m := range regexp.MustCompile(`/usr/local/bin/codumentor\b|--instance /var/lib/codumentor\b[^/]`).FindAll(doc, -1) {
			t.Errorf("another layout named: %q", m)
		}
	}
}
