// Package pgtest runs the throwaway PostgreSQL cluster of the store's
// tests (see storetest, which says how it is run and cleaned up); it is
// apart so that the store package's own tests can use it.
package pgtest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/codumentor/codumentor/sandboxkit/sandboxtest"
)

// Database returns the DSN of a new, empty database in the test
// process's cluster, dropped when the test ends. Without PostgreSQL, or
// as root, it skips the test (fails it under CI=true).
func Database(t testing.TB) string {
	t.Helper()
	c, err := startCluster()
	if err != nil {
		if errors.Is(err, errUnavailable) {
			sandboxtest.SkipOrFail(t, "%v", err)
		}
		t.Fatalf("pgtest: %v", err)
	}
	name := fmt.Sprintf("t%d_%d", os.Getpid(), c.next())
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := c.exec(ctx, "CREATE DATABASE "+name); err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := c.exec(ctx, "DROP DATABASE "+name+" WITH (FORCE)"); err != nil {
			t.Errorf("pgtest: %v", err)
		}
	})
	return c.dsn(name)
}

var errUnavailable = errors.New("PostgreSQL is not available")

type cluster struct {
	dir string // holds data/ and the socket
	mu  sync.Mutex
	n   int
}

func (c *cluster) next() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.n++
	return c.n
}

func (c *cluster) dsn(database string) string {
	return fmt.Sprintf("host=%s user=postgres dbname=%s sslmode=disable", c.dir, database)
}

// exec runs one statement on the cluster's postgres database.
func (c *cluster) exec(ctx context.Context, sql string) error {
	conn, err := pgx.Connect(ctx, c.dsn("postgres"))
	if err != nil {
		return fmt.Errorf("connecting to the test cluster: %w", err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx, sql); err != nil {
		return fmt.Errorf("%s: %w", sql, err)
	}
	return nil
}

var (
	clusterOnce sync.Once
	theCluster  *cluster
	clusterErr  error
)

func startCluster() (*cluster, error) {
	clusterOnce.Do(func() { theCluster, clusterErr = newCluster() })
	return theCluster, clusterErr
}

// Bin finds one of PostgreSQL's programs: on PATH, or in Debian's
// versioned directory (the newest version), which is not on PATH.
func Bin(name string) (string, error) {
	if p, err := exec.LookPath(name); err == nil {
		return p, nil
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	slices.SortFunc(dirs, func(a, b string) int { return version(b) - version(a) })
	for _, d := range dirs {
		p := filepath.Join(d, name)
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
	}
	return "", fmt.Errorf("%w: %s is not installed (Debian: apt-get install postgresql, or scripts/install-prereqs)", errUnavailable, name)
}

func version(dir string) int {
	n, _ := strconv.Atoi(filepath.Base(filepath.Dir(dir)))
	return n
}

func newCluster() (*cluster, error) {
	if os.Geteuid() == 0 {
		return nil, fmt.Errorf("%w as root: PostgreSQL refuses to run as root; run the tests as an unprivileged user (scripts/gotest)", errUnavailable)
	}
	initdb, err := Bin("initdb")
	if err != nil {
		return nil, err
	}
	postgres, err := Bin("postgres")
	if err != nil {
		return nil, err
	}
	base := filepath.Join(os.TempDir(), "codumentor-pgtest-"+strconv.Itoa(os.Geteuid()))
	if err := os.MkdirAll(base, 0o700); err != nil {
		return nil, err
	}
	sweep(base)
	dir, err := os.MkdirTemp(base, strconv.Itoa(os.Getpid())+"-")
	if err != nil {
		return nil, err
	}
	data := filepath.Join(dir, "data")
	out, err := exec.Command(initdb, "-D", data, "-U", "postgres", "--auth=trust", "-N", "-E", "UTF8", "--no-locale").CombinedOutput()
	if err != nil {
		return nil, fmt.Errorf("initdb: %v: %s", err, out)
	}
	logf, err := os.Create(filepath.Join(dir, "postgres.log"))
	if err != nil {
		return nil, err
	}
	defer logf.Close()
	cmd := exec.Command(postgres, "-D", data, "-k", dir, "-c", "listen_addresses=",
		"-c", "fsync=off", "-c", "synchronous_commit=off", "-c", "full_page_writes=off",
		"-c", "max_connections=400", "-c", "shared_buffers=32MB")
	cmd.Stdout, cmd.Stderr = logf, logf
	// SIGQUIT is PostgreSQL's immediate shutdown: nothing in the cluster
	// needs to survive the test process.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGQUIT, Setpgid: true}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting postgres: %w", err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	c := &cluster{dir: dir}
	// The postmaster accepts connections once recovery is done; a
	// minute means it is stuck.
	deadline := time.Now().Add(time.Minute)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		err := c.exec(ctx, "SELECT 1")
		cancel()
		if err == nil {
			return c, nil
		}
		select {
		case werr := <-exited:
			log, _ := os.ReadFile(logf.Name())
			return nil, fmt.Errorf("postgres exited (%v): %s", werr, log)
		default:
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("postgres did not accept connections within a minute: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// sweep removes the cluster directories under base whose test process
// is gone (named <pid>-…).
func sweep(base string) {
	ents, _ := os.ReadDir(base)
	for _, e := range ents {
		pid, err := strconv.Atoi(strings.SplitN(e.Name(), "-", 2)[0])
		if err != nil || pid == os.Getpid() {
			continue
		}
		if syscall.Kill(pid, 0) == syscall.ESRCH {
			os.RemoveAll(filepath.Join(base, e.Name()))
		}
	}
}
