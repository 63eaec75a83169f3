package daemon_test

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/codumentor/codumentor/sandboxkit/sandboxtest"
)

// nginx runs Debian's nginx as this (unprivileged) user in front of
// upstreams (host:port, taken in turn: round robin) with the location
// block given, and returns its address. It stops with the test.
func nginx(t *testing.T, location string, upstreams ...string) string {
	t.Helper()
	bin, err := exec.LookPath("nginx")
	if err != nil {
		for _, p := range []string{"/usr/sbin/nginx", "/sbin/nginx"} {
			if _, serr := os.Stat(p); serr == nil {
				bin, err = p, nil
			}
		}
	}
	if err != nil {
		sandboxtest.SkipOrFail(t, "nginx: %v (scripts/install-prereqs installs it)", err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	dir := t.TempDir()
	// One process (no master and workers): killing it stops nginx.
	conf := fmt.Sprintf(`master_process off;
daemon off;
pid %[1]s/nginx.pid;
error_log stderr warn;
events { worker_connections 64; }
http {
	access_log off;
	client_body_temp_path %[1]s/body;
	proxy_temp_path %[1]s/proxy;
	fastcgi_temp_path %[1]s/fastcgi;
	uwsgi_temp_path %[1]s/uwsgi;
	scgi_temp_path %[1]s/scgi;
	upstream codumentor {
		%[3]s
	}
	server {
		listen %[2]s;
		location / {
			proxy_pass http://codumentor;
			%[4]s
		}
	}
}
`, dir, addr, "server "+strings.Join(upstreams, ";\n\t\tserver ")+";", location)
	file := filepath.Join(dir, "nginx.conf")
	if err := os.WriteFile(file, []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "-e", "stderr", "-p", dir, "-c", file)
	out := &sandboxtest.Buffer{}
	cmd.Stdout, cmd.Stderr = out, out
	cmd.WaitDelay = 5 * time.Second
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	sandboxtest.Eventually(t, 30*time.Second, func() error {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			return fmt.Errorf("nginx did not listen on %s: %v\n%s", addr, err, out.String())
		}
		c.Close()
		return nil
	})
	return addr
}

// Behind nginx configured with the common "proxy_set_header Host $host",
// which drops the port, the browser's sign-in is refused as cross-origin
// (the server cannot tell the proxy from an attacker), and the server
// logs one warning that names the mismatch and the fix; with $http_host
// it works.
func TestSignInBehindProxyHost(t *testing.T) {
	in := newInstance(t, "")
	in.addUser("alice", pw, false)
	p := in.start()
	upstream := strings.TrimPrefix(p.URL, "http://")
	noFollow := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	signIn := func(proxy string) int {
		t.Helper()
		form := url.Values{"username": {"alice"}, "password": {pw}, "next": {"/"}}
		req, _ := http.NewRequest("POST", "http://"+proxy+"/login", strings.NewReader(form.Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.Header.Set("Origin", "http://"+proxy)
		res, err := noFollow.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, res.Body)
		res.Body.Close()
		return res.StatusCode
	}
	const warning = "proxy_set_header Host $http_host"
	bad := nginx(t, "proxy_set_header Host $host;", upstream)
	for range 3 {
		if code := signIn(bad); code != http.StatusForbidden {
			t.Fatalf("sign-in through a proxy that drops the port: %d, want 403", code)
		}
	}
	log := p.stderr.String()
	if n := strings.Count(log, warning); n != 1 || !strings.Contains(log, "origin=http://"+bad) || !strings.Contains(log, "host=127.0.0.1\n") {
		t.Fatalf("want one warning naming the Origin and the Host it received, got %d in:\n%s", n, log)
	}
	good := nginx(t, "proxy_set_header Host $http_host;", upstream)
	if code := signIn(good); code != http.StatusSeeOther {
		t.Fatalf("sign-in through a proxy that passes the Host: %d, want 303", code)
	}
}
