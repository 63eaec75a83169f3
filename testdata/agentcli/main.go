// Command agentcli is a tiny stand-in for an external coding-agent CLI,
// for the tests of integrations/externalagent: it takes its task as its
// last argument, edits files in its working directory, tries what an
// agent must not do where it is sandboxed (the network, ~/.ssh, a host
// file), and prints a report, one "key: value" line each.
//
//	agentcli [-sleep DURATION] TASK
//
// AGENTCLI_DIAL (host:port) is the address it tries to reach directly;
// AGENTCLI_CONNECT (host:port) one it asks $HTTPS_PROXY to connect to;
// AGENTCLI_HOST_FILE a host file it tries to read; AGENTCLI_HOST_HOME
// the host home whose .ssh it lists (besides $HOME/.ssh); AGENTCLI_MARKER
// a file it creates (to prove where it ran).
package main

import (
	"bufio"
	"flag"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"time"
)

func main() {
	sleep := flag.Duration("sleep", 0, "sleep this long after the report (for time-limit tests)")
	flag.Parse()
	if flag.NArg() == 0 {
		fmt.Fprintln(os.Stderr, "usage: agentcli [-sleep D] TASK")
		os.Exit(2)
	}
	task := flag.Arg(flag.NArg() - 1)
	wd, _ := os.Getwd()
	fmt.Printf("task: %s\n", task)
	fmt.Printf("cwd: %s\n", wd)

	// Edit: a new file, and a line added to README.md if there is one.
	if err := os.WriteFile("AGENT_DONE.txt", []byte("task: "+task+"\n"), 0o644); err != nil {
		fmt.Printf("edit: failed: %v\n", err)
	} else {
		fmt.Println("edit: wrote AGENT_DONE.txt")
	}
	if b, err := os.ReadFile("README.md"); err == nil {
		os.WriteFile("README.md", append(b, "edited by agentcli\n"...), 0o644)
		fmt.Println("edit: appended to README.md")
	}

	if addr := os.Getenv("AGENTCLI_DIAL"); addr != "" {
		c, err := net.DialTimeout("tcp", addr, 3*time.Second)
		if err != nil {
			fmt.Printf("network: blocked (%v)\n", err)
		} else {
			c.Close()
			fmt.Println("network: reached " + addr)
		}
	}
	if addr, proxy := os.Getenv("AGENTCLI_CONNECT"), os.Getenv("HTTPS_PROXY"); addr != "" && proxy != "" {
		fmt.Println("proxy: " + connect(proxy, addr))
	}
	for _, home := range []string{os.Getenv("HOME"), os.Getenv("AGENTCLI_HOST_HOME")} {
		if home == "" {
			continue
		}
		d := filepath.Join(home, ".ssh")
		if ents, err := os.ReadDir(d); err != nil {
			fmt.Printf("ssh %s: unreadable (%v)\n", d, err)
		} else {
			fmt.Printf("ssh %s: READABLE, %d entries\n", d, len(ents))
		}
	}
	if f := os.Getenv("AGENTCLI_HOST_FILE"); f != "" {
		if b, err := os.ReadFile(f); err != nil {
			fmt.Printf("host file: unreadable (%v)\n", err)
		} else {
			fmt.Printf("host file: READ %q\n", b)
		}
	}
	if m := os.Getenv("AGENTCLI_MARKER"); m != "" {
		if err := os.WriteFile(m, []byte("agentcli ran here\n"), 0o644); err != nil {
			fmt.Printf("marker: not written (%v)\n", err)
		} else {
			fmt.Println("marker: wrote " + m)
		}
	}
	fmt.Println("report: done")
	time.Sleep(*sleep)
}

// connect asks the HTTP proxy at proxyURL for a tunnel to addr and says
// how that went.
func connect(proxyURL, addr string) string {
	u, err := url.Parse(proxyURL)
	if err != nil {
		return "bad proxy URL"
	}
	c, err := net.DialTimeout("tcp", u.Host, 3*time.Second)
	if err != nil {
		return fmt.Sprintf("unreachable (%v)", err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", addr, addr)
	resp, err := http.ReadResponse(bufio.NewReader(c), &http.Request{Method: http.MethodConnect})
	if err != nil {
		return fmt.Sprintf("no answer (%v)", err)
	}
	if resp.StatusCode != http.StatusOK {
		return "refused " + resp.Status
	}
	return "reached " + addr
}
