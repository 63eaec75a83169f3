package sandboxkit_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"strings"

	"github.com/codumentor/codumentor/sandboxkit"
	"github.com/codumentor/codumentor/sandboxkit/egress"
	"github.com/codumentor/codumentor/sandboxkit/seccomp"
)

// exampleWorkspace makes a tree to work on and the overlay's upper and
// work directories beside it.
func exampleWorkspace() (*sandboxkit.Workspace, func()) {
	dir, err := os.MkdirTemp("", "example-")
	if err != nil {
		log.Fatal(err)
	}
	w := &sandboxkit.Workspace{Lower: filepath.Join(dir, "repo"), Upper: filepath.Join(dir, "upper"), Work: filepath.Join(dir, "work")}
	for _, d := range []string{w.Lower, w.Upper, w.Work} {
		if err := os.Mkdir(d, 0o700); err != nil {
			log.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(w.Lower, "README"), []byte("hello\n"), 0o600); err != nil {
		log.Fatal(err)
	}
	// overlayfs leaves its work dir unreadable: make it removable.
	return w, func() { os.Chmod(filepath.Join(w.Work, "work"), 0o700); os.RemoveAll(dir) }
}

// strict is a Policy with the blocklist enforced and the default limits.
func strict(w *sandboxkit.Workspace) *sandboxkit.Policy {
	f, err := seccomp.Load(seccomp.Enforce)
	if err != nil {
		log.Fatal(err)
	}
	return &sandboxkit.Policy{Workspace: w, Seccomp: f.Program, UID: os.Getuid(), GID: os.Getgid(), Limits: sandboxkit.DefaultLimits()}
}

// A one-shot command in a copy-on-write view of a tree: it reads the
// tree and writes to it, and the tree itself stays as it was.
func ExampleCommand() {
	w, done := exampleWorkspace()
	defer done()
	var out strings.Builder
	cmd := sandboxkit.Command(context.Background(), strict(w), "sh", "-c", "cat README; echo changed > README; id -un; pwd")
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		log.Fatal(err, out.String())
	}
	fmt.Print(out.String())
	host, _ := os.ReadFile(filepath.Join(w.Lower, "README"))
	fmt.Printf("on the host: %s", host)
	// Output:
	// hello
	// sandbox
	// /workspace
	// on the host: hello
}

// A Session is one sandbox for many commands: they share its workspace
// and its background jobs, and cost no sandbox start each.
func ExampleStartSession() {
	w, done := exampleWorkspace()
	defer done()
	ctx := context.Background()
	s, err := sandboxkit.StartSession(ctx, strict(w), sandboxkit.SessionOptions{})
	if err != nil {
		log.Fatal(err)
	}
	defer s.Close()
	for _, script := range []string{"echo one > notes", "echo two >> notes", "cat notes"} {
		cmd := s.Command(ctx, "sh", "-c", script)
		cmd.Stdout = os.Stdout
		if err := cmd.Run(); err != nil {
			log.Fatal(err)
		}
	}
	// Output:
	// one
	// two
}

// With an egress allow-list the sandbox keeps its own network, and a
// proxy on the host connects it only to the listed destinations; every
// attempt is reported.
func ExamplePolicy_egress() {
	events := make(chan egress.Event, 8)
	p := strict(nil)
	p.Egress = &egress.Options{Allow: []string{"example.org:443"}, OnEvent: func(e egress.Event) { events <- e }}
	cmd := sandboxkit.Command(context.Background(), p, "curl", "-fsS", "-o", "/dev/null", "http://forbidden.test/")
	fmt.Println("curl:", cmd.Run())
	e := <-events
	fmt.Println(e.Verdict, e.Host, e.Port)
	// Output:
	// curl: sandboxed command exited with status 22
	// refused forbidden.test 80
}
