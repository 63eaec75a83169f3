package api

import (
	"bytes"
	"encoding/json"
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
