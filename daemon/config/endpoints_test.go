package config

import (
	"errors"
	"strings"
	"testing"
)

func TestNormalizeEndpoint(t *testing.T) {
	for _, tc := range []struct{ in, want, err string }{
		{in: "http://127.0.0.1:8000/v1", want: "http://127.0.0.1:8000/v1"},
		{in: "HTTP://Models.Example.COM:80/v1/", want: "http://models.example.com/v1"},
		{in: "https://models.example.com:443/v1//", want: "https://models.example.com/v1"},
		{in: "https://models.example.com:8443", want: "https://models.example.com:8443"},
		{in: "http://[::1]:8000/v1", want: "http://[::1]:8000/v1"},
		{in: "http://[::1]/v1", want: "http://[::1]/v1"},
		{in: " http://h/%761 ", want: "http://h/v1"},
		{in: "ftp://h/v1", err: "http"},
		{in: "file:///etc/passwd", err: "http"},
		{in: "http:///v1", err: "no host"},
		{in: "http:h", err: "no host"},
		{in: "http://user:sk-secret@h/v1", err: "credentials"},
		{in: "http://h/v1?x=1", err: "query"},
		{in: "http://h/v1?", err: "query"},
		{in: "http://h/v1#f", err: "fragment"},
		{in: "http://h:x/v1", err: "not a URL"},
		{in: "", err: "http"},
	} {
		got, err := NormalizeEndpoint(tc.in)
		switch {
		case tc.err == "" && (err != nil || got != tc.want):
			t.Errorf("NormalizeEndpoint(%q) = %q, %v; want %q", tc.in, got, err, tc.want)
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
			t.Errorf("NormalizeEndpoint(%q) = %q, %v; want an error about %s", tc.in, got, err, tc.err)
		case err != nil && strings.Contains(err.Error(), "sk-secret"):
			t.Errorf("NormalizeEndpoint(%q): the error quotes the credentials: %v", tc.in, err)
		}
	}
}

func TestAllowedEndpoint(t *testing.T) {
	l := LLM{AllowedEndpoints: []string{"http://127.0.0.1:8000/v1/", "https://Models.Example.com:443/v1"}}
	for _, tc := range []struct {
		in, want string
		allowed  bool
	}{
		{"http://127.0.0.1:8000/v1", "http://127.0.0.1:8000/v1", true},
		{"https://models.example.com/v1/", "https://models.example.com/v1", true},
		{"http://127.0.0.1:8000/v2", "", false},        // another path
		{"http://127.0.0.1:8001/v1", "", false},        // another port
		{"https://127.0.0.1:8000/v1", "", false},       // another scheme
		{"http://models.example.com/v1", "", false},    // http where https is listed
		{"http://127.0.0.1.nip.io:8000/v1", "", false}, // a name that resolves there
		{"http://a@127.0.0.1:8000/v1", "", false},      // userinfo
		{"http://127.0.0.1:8000/v1/../v1", "", false},  // not cleaned: another path
		{"http://169.254.169.254/latest/meta-data", "", false},
	} {
		got, err := l.AllowedEndpoint(tc.in)
		if tc.allowed != (err == nil) || got != tc.want {
			t.Errorf("AllowedEndpoint(%q) = %q, %v; allowed want %v", tc.in, got, err, tc.allowed)
		}
		if err != nil && !strings.Contains(tc.in, "@") && !errors.Is(err, ErrEndpointNotAllowed) {
			t.Errorf("AllowedEndpoint(%q): %v does not wrap ErrEndpointNotAllowed", tc.in, err)
		}
	}
	if got := (LLM{}).Endpoints(); len(got) != 0 {
		t.Errorf("no allowed_endpoints: Endpoints() = %v", got)
	}
}

func TestValidateAllowedEndpoints(t *testing.T) {
	_, err := Parse([]byte("llm:\n  allowed_endpoints: [http://127.0.0.1:8000/v1, 'ftp://x/', 'http://u:p@h/']\n"))
	if err == nil || !strings.Contains(err.Error(), "llm.allowed_endpoints[1]") || !strings.Contains(err.Error(), "llm.allowed_endpoints[2]") || strings.Contains(err.Error(), "[0]") {
		t.Errorf("Parse: %v; want errors for entries 1 and 2 only", err)
	}
	c, err := Parse([]byte("llm:\n  allowed_endpoints: [http://127.0.0.1:8000/v1/, HTTP://127.0.0.1:8000/v1]\n"))
	if err != nil {
		t.Fatal(err)
	}
	if got := c.LLM.Endpoints(); len(got) != 1 || got[0] != "http://127.0.0.1:8000/v1" {
		t.Errorf("Endpoints() = %v; want the one normalized endpoint", got)
	}
}
