// Command sdkuser is a program outside the repository that uses
// sandboxkit as any Go tool would: a one-shot command and a Session, in a
// copy-on-write view of a directory, with nothing of the application
// that ships sandboxkit.
package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/codumentor/codumentor/sandboxkit"
	"github.com/codumentor/codumentor/sandboxkit/seccomp"
)

func main() {
	sandboxkit.Main()
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "sdkuser:", err)
		os.Exit(1)
	}
}

func run() error {
	dir, err := os.MkdirTemp("", "sdkuser-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	w := &sandboxkit.Workspace{Lower: filepath.Join(dir, "tree"), Upper: filepath.Join(dir, "upper"), Work: filepath.Join(dir, "work")}
	for _, d := range []string{w.Lower, w.Upper, w.Work} {
		if err := os.Mkdir(d, 0o700); err != nil {
			return err
		}
	}
	defer os.Chmod(filepath.Join(w.Work, "work"), 0o700)
	if err := os.WriteFile(filepath.Join(w.Lower, "input.txt"), []byte("from the host\n"), 0o600); err != nil {
		return err
	}
	f, err := seccomp.Load(seccomp.Enforce)
	if err != nil {
		return err
	}
	p := &sandboxkit.Policy{Workspace: w, Seccomp: f.Program, UID: os.Getuid(), GID: os.Getgid(), Limits: sandboxkit.DefaultLimits()}
	ctx := context.Background()

	var out strings.Builder
	cmd := sandboxkit.Command(ctx, p, "sh", "-c", "cat input.txt; echo written > output.txt; whoami")
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("one-shot: %w: %s", err, out.String())
	}
	fmt.Print("run: ", strings.ReplaceAll(out.String(), "\n", " "), "\n")

	s, err := sandboxkit.StartSession(ctx, p, sandboxkit.SessionOptions{})
	if err != nil {
		return err
	}
	defer s.Close()
	for _, script := range []string{"echo again >> output.txt", "cat output.txt | tr '\\n' ' '; echo"} {
		c := s.Command(ctx, "sh", "-c", script)
		c.Stdout, c.Stderr = os.Stdout, os.Stderr
		if script[0] == 'c' {
			fmt.Print("session: ")
		}
		if err := c.Run(); err != nil {
			return fmt.Errorf("session: %w", err)
		}
	}
	if _, err := os.Stat(filepath.Join(w.Lower, "output.txt")); err == nil {
		return fmt.Errorf("the sandbox wrote to the host tree")
	}
	fmt.Println("host tree unchanged")
	return nil
}
