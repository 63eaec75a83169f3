package daemon_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/codumentor/codumentor/agentcore"
	"github.com/codumentor/codumentor/agentcore/llmtest"
	"github.com/codumentor/codumentor/sandboxkit/sandboxtest"
)

// TestHostReadOnlyInvestigation: a host_readonly conversation's command
// reads /etc/hostname but not the instance's database, the service
// user's home or a UNIX socket under /run, and writes nowhere. Its first
// command asks for the host network, once (its second command does not
// ask again): denied, the sandbox has none;
// approved (another conversation), it reaches a host service.
func TestHostReadOnlyInvestigation(t *testing.T) {
	needSandbox(t)
	sockPath := fmt.Sprintf("/run/lock/codumentor-daemon-test-%d.sock", os.Getpid())
	sock, err := net.Listen("unix", sockPath)
	if err != nil {
		sandboxtest.SkipOrFail(t, "cannot create a socket under /run (the world-writable /run/lock): %v", err)
	}
	defer sock.Close()
	port := sandboxtest.ServeTCP(t, "127.0.0.1:0", nil) // reached: the host network
	home, _ := os.UserHomeDir()
	in := newInstance(t, "")
	db := in.config().Database()
	script := strings.Join([]string{
		"cat /etc/hostname",
		"cat " + db + " >/dev/null 2>&1 && echo DB-READABLE",
		"ls -A " + home + " 2>/dev/null | grep -q . && echo HOME-VISIBLE",
		`python3 -c 'import socket; s = socket.socket(socket.AF_UNIX); s.connect("` + sockPath + `")' 2>/dev/null && echo SOCKET-CONNECTED`,
		`python3 -c 'import socket; socket.create_connection(("127.0.0.1", ` + fmt.Sprint(port) + `), 2)' 2>/dev/null && echo NET-OK`,
		"for f in /etc/probe /usr/probe /var/log/probe /tmp/probe $HOME/probe " + in.dir + "/probe; do (echo x > $f) 2>/dev/null && echo WROTE-$f; done",
		"echo END",
	}, "; ")
	// The script names the instance's paths: the configuration comes after.
	yaml := "auth:\n  jwt_secret: " + testSecret + "\n" + llm(t, shellCall(script), shellCall("echo SECOND"), llmtest.Step{Text: "Done."}) + "investigation:\n  enabled: true\n  users: [carol]\n"
	if err := os.WriteFile(in.config().ConfigFile(), []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	in.addUser("root", pw, true)
	in.addUser("alice", pw, false)
	in.addUser("carol", pw, false)
	p := in.start()
	admin, alice, carol := p.login("root", pw), p.login("alice", pw), p.login("carol", pw)

	alice.must(http.StatusForbidden, "POST", "/api/v1/conversations", map[string]string{"mode": "host_readonly"}, nil)
	alice.must(http.StatusBadRequest, "POST", "/api/v1/conversations", map[string]string{"mode": "root_shell"}, nil)
	var conv struct{ ID, Mode string }
	carol.must(http.StatusCreated, "POST", "/api/v1/conversations", map[string]string{"mode": "host_readonly"}, &conv)
	if conv.Mode != "host_readonly" {
		t.Errorf("mode = %q", conv.Mode)
	}

	hostname, _ := os.ReadFile("/etc/hostname")
	run := func(c *client, decision string) string {
		t.Helper()
		var conv struct{ ID string }
		c.must(http.StatusCreated, "POST", "/api/v1/conversations", map[string]string{"mode": "host_readonly"}, &conv)
		s := c.follow(conv.ID, "")
		c.send(conv.ID, "investigate")
		evs := s.until(agentcore.EventApprovalPending, 60*time.Second)
		c.must(http.StatusOK, "POST", "/api/v1/conversations/"+conv.ID+"/approvals/"+approvalID(t, evs[len(evs)-1]), map[string]string{"decision": "approve"}, nil)
		evs = s.until(agentcore.EventApprovalPending, 60*time.Second)
		last := evs[len(evs)-1]
		var a agentcore.Approval
		if err := json.Unmarshal(eventData(t, last), &a); err != nil || a.Kind != agentcore.ApprovalHostNetwork {
			t.Fatalf("second approval: %s (want kind host_network)", last.Data)
		}
		c.must(http.StatusOK, "POST", "/api/v1/conversations/"+conv.ID+"/approvals/"+a.ID, map[string]string{"decision": decision}, nil)
		// The conversation's second command asks only for itself: the
		// network question was asked once.
		evs = s.until(agentcore.EventApprovalPending, 60*time.Second)
		last = evs[len(evs)-1]
		var second agentcore.Approval
		if err := json.Unmarshal(eventData(t, last), &second); err != nil || second.Kind == agentcore.ApprovalHostNetwork || second.Command != "echo SECOND" {
			t.Fatalf("third approval: %s (want the second command's, the network not asked again)", last.Data)
		}
		c.must(http.StatusOK, "POST", "/api/v1/conversations/"+conv.ID+"/approvals/"+second.ID, map[string]string{"decision": "approve"}, nil)
		s.until(agentcore.EventTurnFinished, 60*time.Second)
		i := slices.IndexFunc(evs, func(e sseEvent) bool { return e.Type == agentcore.EventToolOutput })
		if i < 0 {
			t.Fatalf("no tool output: %v", evs)
		}
		var out struct{ Output string }
		json.Unmarshal(eventData(t, evs[i]), &out)
		if !strings.Contains(out.Output, "END") {
			t.Fatalf("the command did not run to its end: %s", out.Output)
		}
		return out.Output
	}
	out := run(carol, "deny")
	if !strings.Contains(out, strings.TrimSpace(string(hostname))) {
		t.Errorf("/etc/hostname not readable: %s", out)
	}
	for _, bad := range []string{"DB-READABLE", "HOME-VISIBLE", "SOCKET-CONNECTED", "NET-OK", "WROTE"} {
		if strings.Contains(out, bad) {
			t.Errorf("investigation sandbox (network denied): %s\n%s", bad, out)
		}
	}
	out = run(admin, "approve")
	if !strings.Contains(out, "NET-OK") {
		t.Errorf("network approved but the host service is unreachable:\n%s", out)
	}
	for _, bad := range []string{"DB-READABLE", "HOME-VISIBLE", "SOCKET-CONNECTED", "WROTE"} {
		if strings.Contains(out, bad) {
			t.Errorf("investigation sandbox (network shared): %s\n%s", bad, out)
		}
	}
}

// TestInvestigationDisabled: without investigation.enabled nobody, not
// even an admin, creates a host_readonly conversation.
func TestInvestigationDisabled(t *testing.T) {
	in := newInstance(t, "")
	in.addUser("root", pw, true)
	p := in.start()
	admin := p.login("root", pw)
	_, body, _ := admin.do("POST", "/api/v1/conversations", map[string]string{"mode": "host_readonly"})
	code, _, _ := admin.do("POST", "/api/v1/conversations", map[string]string{"mode": "host_readonly"})
	if code != http.StatusForbidden || !strings.Contains(string(body), "investigation_disabled") {
		t.Errorf("host_readonly while disabled: %d %s", code, body)
	}
	var list struct{ Conversations []struct{ ID string } }
	admin.must(http.StatusOK, "GET", "/api/v1/conversations", nil, &list)
	if len(list.Conversations) != 0 {
		t.Errorf("a refused request created conversations: %+v", list)
	}
}

// TestInvestigationNetworkExpires: a host_network question nobody
// answers expires, and the conversation stays isolated: the command runs
// without the host network, and the next one is not asked again.
// (shell_always_allow does not answer the network question.)
func TestInvestigationNetworkExpires(t *testing.T) {
	needSandbox(t)
	port := sandboxtest.ServeTCP(t, "127.0.0.1:0", nil) // reached: the host network
	probe := `python3 -c 'import socket; socket.create_connection(("127.0.0.1", ` + fmt.Sprint(port) + `), 2)' 2>/dev/null && echo NET-OK; echo END`
	in := newInstance(t, llm(t, shellCall(probe), shellCall(probe), llmtest.Step{Text: "Done."})+
		"investigation:\n  enabled: true\nsandbox:\n  shell_always_allow: true\n  approval_timeout: 1s\n")
	in.addUser("root", pw, true)
	p := in.start()
	admin := p.login("root", pw)
	var conv struct{ ID string }
	admin.must(http.StatusCreated, "POST", "/api/v1/conversations", map[string]string{"mode": "host_readonly"}, &conv)
	s := admin.follow(conv.ID, "")
	admin.send(conv.ID, "investigate")
	evs := s.until(agentcore.EventTurnFinished, 60*time.Second)
	var asked, outputs []string
	for _, ev := range evs {
		switch ev.Type {
		case agentcore.EventApprovalPending:
			var a agentcore.Approval
			json.Unmarshal(eventData(t, ev), &a)
			asked = append(asked, a.Kind)
		case agentcore.EventToolOutput:
			var out struct{ Output string }
			json.Unmarshal(eventData(t, ev), &out)
			outputs = append(outputs, out.Output)
		}
	}
	if len(asked) != 1 || asked[0] != agentcore.ApprovalHostNetwork {
		t.Errorf("approvals asked: %q; want one host_network question", asked)
	}
	if len(outputs) != 2 {
		t.Fatalf("tool outputs: %q", outputs)
	}
	for _, out := range outputs {
		if !strings.Contains(out, "END") || strings.Contains(out, "NET-OK") {
			t.Errorf("after the question expired: %q; want the command run without the host network", out)
		}
	}
}

// visibleDir is the test user's directory that a host read-only view
// shows (scripts/install-prereqs makes it): everywhere else the test
// user can write is masked there anyway.
const visibleDir = "/opt/codumentor-test"

// selfSigned writes a certificate for 127.0.0.1 and its key (PEM) and
// returns a pool that trusts it.
func selfSigned(t *testing.T, certFile, keyFile string) *x509.CertPool {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "codumentor test"},
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, BasicConstraintsValid: true, IsCA: true}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kb, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644)
	os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kb}), 0o600)
	cert, _ := x509.ParseCertificate(der)
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	return pool
}

// An investigation cannot read the configuration the server runs with
// (codumentor api --config, outside the instance), nor the TLS
// certificate and key and the LDAP CA it names (in a third place), also
// through a symlink; a file beside them that the configuration does not
// name stays readable (the view shows that place). The doctor lists them.
func TestInvestigationHidesConfiguration(t *testing.T) {
	needSandbox(t)
	base, err := os.MkdirTemp(visibleDir, "investigation-")
	if err != nil {
		sandboxtest.SkipOrFail(t, "no directory of the test user's that the host view shows (scripts/install-prereqs makes %s): %v", visibleDir, err)
	}
	t.Cleanup(func() { os.RemoveAll(base) })
	etc, tlsDir := filepath.Join(base, "etc"), filepath.Join(base, "tls")
	os.Mkdir(etc, 0o755)
	os.Mkdir(tlsDir, 0o755)
	certFile, keyFile, caFile := filepath.Join(tlsDir, "cert.pem"), filepath.Join(tlsDir, "key.pem"), filepath.Join(tlsDir, "ldap-ca.pem")
	pool := selfSigned(t, certFile, keyFile)
	cert, _ := os.ReadFile(certFile)
	os.WriteFile(caFile, cert, 0o644)
	keyLink := filepath.Join(base, "key-link.pem") // named by the configuration
	if err := os.Symlink(keyFile, keyLink); err != nil {
		t.Fatal(err)
	}
	control := filepath.Join(tlsDir, "README")
	os.WriteFile(control, []byte("CONTROL-VISIBLE\n"), 0o644)
	configFile := filepath.Join(etc, "config.yaml")

	files := []string{configFile, certFile, keyFile, keyLink, caFile}
	script := "for f in " + strings.Join(files, " ") + "; do head -c 30 $f 2>/dev/null; echo; done; cat " + control + "; echo END"
	yaml := "auth:\n  jwt_secret: " + testSecret + "\n" +
		"  ldap: {url: 'ldap://127.0.0.1:1', bind_dn: 'uid={username},dc=example,dc=org', ca_cert_file: " + caFile + "}\n" +
		"tls: {cert_file: " + certFile + ", key_file: " + keyLink + "}\n" +
		llm(t, shellCall(script), llmtest.Step{Text: "Done."}) + "investigation:\n  enabled: true\n  users: [carol]\n"
	in := newInstance(t, "")
	if err := os.WriteFile(configFile, []byte(yaml+in.storeYAML()), 0o600); err != nil {
		t.Fatal(err)
	}
	in.args = []string{"--config", configFile}
	in.addUser("root", pw, true)
	in.addUser("carol", pw, false)

	tr := http.DefaultTransport.(*http.Transport)
	saved := tr.TLSClientConfig
	tr.TLSClientConfig = &tls.Config{RootCAs: pool}
	t.Cleanup(func() { tr.TLSClientConfig = saved })
	p := in.start()
	if !strings.HasPrefix(p.URL, "https://") {
		t.Fatalf("the server does not serve the configuration's TLS: %s", p.URL)
	}
	carol := p.login("carol", pw)

	var conv struct{ ID string }
	carol.must(http.StatusCreated, "POST", "/api/v1/conversations", map[string]string{"mode": "host_readonly"}, &conv)
	s := carol.follow(conv.ID, "")
	carol.send(conv.ID, "investigate")
	evs := s.until(agentcore.EventApprovalPending, 60*time.Second)
	carol.must(http.StatusOK, "POST", "/api/v1/conversations/"+conv.ID+"/approvals/"+approvalID(t, evs[len(evs)-1]), map[string]string{"decision": "approve"}, nil)
	evs = s.until(agentcore.EventApprovalPending, 60*time.Second) // the host network: no
	carol.must(http.StatusOK, "POST", "/api/v1/conversations/"+conv.ID+"/approvals/"+approvalID(t, evs[len(evs)-1]), map[string]string{"decision": "deny"}, nil)
	evs = s.until(agentcore.EventTurnFinished, 60*time.Second)
	i := slices.IndexFunc(evs, func(e sseEvent) bool { return e.Type == agentcore.EventToolOutput })
	if i < 0 {
		t.Fatalf("no tool output: %v", evs)
	}
	var out struct{ Output string }
	json.Unmarshal(eventData(t, evs[i]), &out)
	if !strings.Contains(out.Output, "END") || !strings.Contains(out.Output, "CONTROL-VISIBLE") {
		t.Fatalf("the command did not run, or the view does not show %s:\n%s", tlsDir, out.Output)
	}
	for _, bad := range []string{"auth:", "jwt_secret", testSecret[:10], "BEGIN"} {
		if strings.Contains(out.Output, bad) {
			t.Errorf("the investigation read %q:\n%s", bad, out.Output)
		}
	}

	var doctor struct {
		Checks []struct{ Name, Detail string }
	}
	p.login("root", pw).must(http.StatusOK, "GET", "/api/v1/admin/doctor", nil, &doctor)
	j := slices.IndexFunc(doctor.Checks, func(c struct{ Name, Detail string }) bool { return c.Name == "investigation/masks" })
	if j < 0 {
		t.Fatalf("admin/doctor lists no investigation/masks: %+v", doctor.Checks)
	}
	for _, f := range append(files, in.dir) {
		if !strings.Contains(doctor.Checks[j].Detail, f) {
			t.Errorf("admin/doctor's investigation/masks does not name %s: %s", f, doctor.Checks[j].Detail)
		}
	}
}
