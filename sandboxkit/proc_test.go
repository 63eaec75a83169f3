package sandboxkit

import (
	"bytes"
	"os"
	"strconv"
	"strings"
)

// procInfo is what the tests read of a host process.
type procInfo struct {
	pid, ppid int
	// nspid is the process's pid in each pid namespace it is in, from
	// the host's down to its own.
	nspid   []int
	pidns   string // the /proc/PID/ns/pid link
	cmdline []byte // NUL-separated arguments
	live    bool   // neither a zombie nor dead
}

// hostProcs lists the processes this test can see in /proc. One that
// exits while it is read is left out or partly filled in.
func hostProcs() []procInfo {
	ents, _ := os.ReadDir("/proc")
	var out []procInfo
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		dir := "/proc/" + e.Name() + "/"
		status, err := os.ReadFile(dir + "status")
		if err != nil {
			continue
		}
		p := procInfo{pid: pid, live: true}
		for line := range strings.Lines(string(status)) {
			k, v, _ := strings.Cut(line, ":")
			switch k {
			case "PPid":
				p.ppid, _ = strconv.Atoi(strings.TrimSpace(v))
			case "NSpid":
				for _, f := range strings.Fields(v) {
					n, _ := strconv.Atoi(f)
					p.nspid = append(p.nspid, n)
				}
			case "State":
				s := strings.TrimSpace(v)
				p.live = !strings.HasPrefix(s, "Z") && !strings.HasPrefix(s, "X")
			}
		}
		p.pidns, _ = os.Readlink(dir + "ns/pid")
		p.cmdline, _ = os.ReadFile(dir + "cmdline")
		out = append(out, p)
	}
	return out
}

// sandboxProcesses returns the host pids whose command line has marker.
func sandboxProcesses(marker string) []int {
	var pids []int
	for _, p := range hostProcs() {
		if bytes.Contains(p.cmdline, []byte(marker)) {
			pids = append(pids, p.pid)
		}
	}
	return pids
}

// alive reports whether pid exists and is not a zombie.
func alive(pid int) bool {
	for _, p := range hostProcs() {
		if p.pid == pid {
			return p.live
		}
	}
	return false
}
