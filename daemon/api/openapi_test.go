package api

import (
	"bytes"
	"encoding/json"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// The served document lists exactly the routes the server serves, each
// with its path parameters declared and a 2xx response.
func TestOpenAPIMatchesRoutes(t *testing.T) {
	var doc struct {
		OpenAPI string                                `json:"openapi"`
		Paths   map[string]map[string]json.RawMessage `json:"paths"`
	}
	if err := json.Unmarshal(openAPI, &doc); err != nil {
		t.Fatalf("openapi.json: %v", err)
	}
	if !strings.HasPrefix(doc.OpenAPI, "3.") {
		t.Fatalf("openapi version %q", doc.OpenAPI)
	}
	var documented []string
	for path, item := range doc.Paths {
		for method, raw := range item {
			if method == "parameters" {
				continue
			}
			documented = append(documented, strings.ToUpper(method)+" "+path)
			var op struct {
				Responses  map[string]json.RawMessage  `json:"responses"`
				Parameters []struct{ Name, In string } `json:"parameters"`
			}
			if err := json.Unmarshal(raw, &op); err != nil {
				t.Fatalf("%s %s: %v", method, path, err)
			}
			ok := false
			for code := range op.Responses {
				ok = ok || strings.HasPrefix(code, "2")
			}
			if !ok {
				t.Errorf("%s %s documents no 2xx response", method, path)
			}
			var shared struct {
				Parameters []struct{ Name, In string } `json:"parameters"`
			}
			if raw, ok := item["parameters"]; ok {
				json.Unmarshal(raw, &shared.Parameters)
			}
			for _, seg := range strings.Split(path, "/") {
				if !strings.HasPrefix(seg, "{") {
					continue
				}
				name := strings.Trim(seg, "{}")
				found := slices.ContainsFunc(append(op.Parameters, shared.Parameters...), func(p struct{ Name, In string }) bool {
					return p.Name == name && p.In == "path"
				})
				if !found {
					t.Errorf("%s %s: path parameter %s is not declared", method, path, name)
				}
			}
		}
	}
	var served []string
	for _, r := range New(Deps{}).Routes() {
		served = append(served, r.Method+" "+r.Path)
	}
	if len(served) < 20 {
		t.Fatalf("Routes found only %v", served)
	}
	slices.Sort(documented)
	slices.Sort(served)
	for _, r := range served {
		if !slices.Contains(documented, r) {
			t.Errorf("served but not in openapi.json: %s", r)
		}
	}
	for _, r := range documented {
		if !slices.Contains(served, r) {
			t.Errorf("in openapi.json but not served: %s", r)
		}
	}
}

// The document has no object with a key twice: a JSON decoder keeps one
// of them silently, so a merge that adds the same response twice would
// hide a description.
func TestOpenAPINoDuplicateKeys(t *testing.T) {
	dec := json.NewDecoder(bytes.NewReader(openAPI))
	var walk func(path string) error
	walk = func(path string) error {
		tok, err := dec.Token()
		if err != nil {
			return err
		}
		switch tok {
		case json.Delim('{'):
			seen := map[string]bool{}
			for dec.More() {
				k, err := dec.Token()
				if err != nil {
					return err
				}
				key := k.(string)
				if seen[key] {
					t.Errorf("openapi.json: %s has the key %q twice", path, key)
				}
				seen[key] = true
				if err := walk(path + "/" + key); err != nil {
					return err
				}
			}
			_, err = dec.Token() // '}'
			return err
		case json.Delim('['):
			for i := 0; dec.More(); i++ {
				if err := walk(path + "/" + strconv.Itoa(i)); err != nil {
					return err
				}
			}
			_, err = dec.Token() // ']'
			return err
		}
		return nil
	}
	if err := walk(""); err != nil {
		t.Fatal(err)
	}
}

// The document passes the rules of Redocly's recommended lint set that
// apply to it (redocly lint reported 53 warnings before): a license, and
// every operation an operationId (unique, usable as an identifier), a
// summary, a 2xx and a 4xx response; every $ref resolves and every
// component schema is used.
func TestOpenAPILint(t *testing.T) {
	var doc struct {
		Info struct {
			License *struct {
				Name string `json:"name"`
			} `json:"license"`
		} `json:"info"`
		Paths      map[string]map[string]json.RawMessage `json:"paths"`
		Components struct {
			Schemas map[string]json.RawMessage `json:"schemas"`
		} `json:"components"`
	}
	if err := json.Unmarshal(openAPI, &doc); err != nil {
		t.Fatal(err)
	}
	if doc.Info.License == nil || doc.Info.License.Name == "" {
		t.Error("info-license: info has no license")
	}
	ident := regexp.MustCompile(`^[a-z][A-Za-z0-9]*$`)
	ids := map[string]string{}
	for path, item := range doc.Paths {
		for method, raw := range item {
			if method == "parameters" {
				continue
			}
			where := strings.ToUpper(method) + " " + path
			var op struct {
				OperationID string                     `json:"operationId"`
				Summary     string                     `json:"summary"`
				Responses   map[string]json.RawMessage `json:"responses"`
			}
			if err := json.Unmarshal(raw, &op); err != nil {
				t.Fatalf("%s: %v", where, err)
			}
			switch {
			case op.OperationID == "":
				t.Errorf("operation-operationId: %s has none", where)
			case !ident.MatchString(op.OperationID):
				t.Errorf("operation-operationId-url-safe: %s: %q is not a lowerCamel identifier", where, op.OperationID)
			case ids[op.OperationID] != "":
				t.Errorf("operation-operationId-unique: %s and %s are both %q", ids[op.OperationID], where, op.OperationID)
			}
			ids[op.OperationID] = where
			if op.Summary == "" {
				t.Errorf("operation-summary: %s has none", where)
			}
			var has2, has4 bool
			for code := range op.Responses {
				has2 = has2 || strings.HasPrefix(code, "2")
				has4 = has4 || strings.HasPrefix(code, "4")
			}
			if !has4 {
				t.Errorf("operation-4xx-response: %s documents no 4xx response", where)
			}
			if !has2 {
				t.Errorf("operation-2xx-response: %s documents no 2xx response", where)
			}
		}
	}
	used := map[string]bool{}
	for _, m := range regexp.MustCompile(`"\$ref":\s*"([^"]*)"`).FindAllSubmatch(openAPI, -1) {
		ref := string(m[1])
		name, ok := strings.CutPrefix(ref, "#/components/schemas/")
		if !ok {
			t.Errorf("$ref %q: only component schemas are referenced here", ref)
			continue
		}
		if _, ok := doc.Components.Schemas[name]; !ok {
			t.Errorf("no-unresolved-refs: %q does not resolve", ref)
		}
		used[name] = true
	}
	for name := range doc.Components.Schemas {
		if !used[name] {
			t.Errorf("no-unused-components: schema %s is not referenced", name)
		}
	}
}
