package config

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"slices"
	"strings"
)

// ErrEndpointNotAllowed is wrapped by AllowedEndpoint's error: the server
// connects only to model endpoints its operator listed in
// llm.allowed_endpoints, never to a URL a user typed.
var ErrEndpointNotAllowed = errors.New("the endpoint is not in the server's llm.allowed_endpoints")

// NormalizeEndpoint is the form in which model endpoints are compared:
// scheme and host in lower case, the scheme's default port dropped, the
// path without a trailing slash. Only http and https URLs with a host and
// without credentials, query or fragment are endpoints. The error does
// not quote s, which may hold credentials.
func NormalizeEndpoint(s string) (string, error) {
	u, err := url.Parse(strings.TrimSpace(s))
	if err != nil {
		return "", errors.New("not a URL")
	}
	u.Scheme = strings.ToLower(u.Scheme)
	switch {
	case u.Scheme != "http" && u.Scheme != "https":
		return "", errors.New("not an http:// or https:// URL")
	case u.Opaque != "" || u.Host == "":
		return "", errors.New("the URL has no host")
	case u.User != nil:
		return "", errors.New("the URL holds credentials (user:password@); a model profile's api_key carries the key")
	case u.RawQuery != "" || u.ForceQuery || u.Fragment != "":
		return "", errors.New("the URL has a query or fragment")
	}
	host, port := strings.ToLower(u.Hostname()), u.Port()
	if (u.Scheme == "http" && port == "80") || (u.Scheme == "https" && port == "443") {
		port = ""
	}
	if port != "" {
		host = net.JoinHostPort(host, port)
	} else if strings.Contains(host, ":") {
		host = "[" + host + "]" // IPv6
	}
	n := url.URL{Scheme: u.Scheme, Host: host, Path: strings.TrimRight(u.Path, "/")}
	return n.String(), nil
}

// Endpoints are the allowed endpoints, normalized (entries Validate
// refuses are left out).
func (l LLM) Endpoints() []string {
	out := make([]string, 0, len(l.AllowedEndpoints))
	for _, e := range l.AllowedEndpoints {
		if n, err := NormalizeEndpoint(e); err == nil && !slices.Contains(out, n) {
			out = append(out, n)
		}
	}
	return out
}

// AllowedEndpoint returns endpoint normalized if it is one of
// AllowedEndpoints, compared normalized; otherwise an error wrapping
// ErrEndpointNotAllowed, or saying why endpoint is not an endpoint URL.
func (l LLM) AllowedEndpoint(endpoint string) (string, error) {
	n, err := NormalizeEndpoint(endpoint)
	if err != nil {
		return "", fmt.Errorf("endpoint: %w", err)
	}
	if !slices.Contains(l.Endpoints(), n) {
		return "", fmt.Errorf("%w: %s (allowed: %s)", ErrEndpointNotAllowed, n, endpointList(l.Endpoints()))
	}
	return n, nil
}

func endpointList(eps []string) string {
	if len(eps) == 0 {
		return "none"
	}
	return strings.Join(eps, ", ")
}

func (l LLM) validateEndpoints() []error {
	var errs []error
	for i, e := range l.AllowedEndpoints {
		if _, err := NormalizeEndpoint(e); err != nil {
			errs = append(errs, fmt.Errorf("llm.allowed_endpoints[%d]: %w", i, err))
		}
	}
	return errs
}
