package browser

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"runtime"
	"runtime/metrics"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/codumentor/codumentor/sandboxkit/cgroup"
	"github.com/codumentor/codumentor/sandboxkit/sandboxtest"
)

// needCgroup skips (fails under CI) where no cgroup subtree is delegated
// to this user: scripts/install-prereqs delegates one to the test user.
func needCgroup(t *testing.T) {
	t.Helper()
	if _, err := cgroup.Open(cgroup.Options{Parent: sandboxtest.CgroupParent(t)}); err != nil {
		sandboxtest.SkipOrFail(t, "%v", err)
	}
}

// TestMemoryLimit: a page that allocates 1.5 GiB in a browser bounded to
// 512 MiB ends its request with ErrMemory's message; the browser's cgroup
// never held more than the limit, and the next request works in a
// browser started anew, in a group of its own.
func TestMemoryLimit(t *testing.T) {
	needCgroup(t)
	const limit = 512 << 20
	mux := http.NewServeMux()
	mux.HandleFunc("/hog", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, `<!doctype html><html><head><title>hog</title></head><body><script>
const keep = [];
for (let i = 0; i < 24; i++) { const a = new Uint8Array(64 << 20); a.fill(i + 1); keep.push(a); }
document.title = 'survived ' + keep.length;
</script></body></html>`)
	})
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, `<!doctype html><html><head><title>Local page</title></head><body><main>fine</main></body></html>`)
	})
	srv := httptest.NewServer(mux)
	defer srv.Close()
	b, logs := newBrowser(t, Options{Memory: limit, RequireLimits: true, Policy: Policy{AllowPrivate: true}})

	pages, err := b.FetchURLs(context.Background(), []string{srv.URL + "/hog"})
	if err != nil {
		t.Fatal(err)
	}
	if p := pages[0]; !strings.Contains(p.Error, ErrMemory.Error()) || !strings.Contains(p.Error, "512 MiB") {
		t.Fatalf("page = %+v, want ErrMemory's message naming the limit\n%s", p, logs)
	}
	b.mu.Lock()
	peak, stopped := b.peak, b.group == nil
	b.mu.Unlock()
	if peak <= 0 || peak > limit || !stopped {
		t.Errorf("cgroup peak %d MiB (limit %d MiB), browser stopped %v", peak>>20, limit>>20, stopped)
	}

	pages, err = b.FetchURLs(context.Background(), []string{srv.URL + "/"})
	if err != nil || pages[0].Title != "Local page" {
		t.Fatalf("next fetch: %v %+v", err, pages)
	}
	b.mu.Lock()
	g := b.group
	b.mu.Unlock()
	if g == nil {
		t.Fatal("the restarted browser has no cgroup")
	}
	// Every process of the browser is in the group.
	pids, _ := g.Pids()
	for _, p := range processTree(chromeRoot(t, b)) {
		if !slicesContains(pids, p) && !processGone(p) {
			t.Errorf("browser process %d is outside its cgroup %v", p, pids)
		}
	}
}

func chromeRoot(t *testing.T, b *Browser) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.ctx == nil {
		t.Fatal("browser not running")
	}
	return browserPid(b.ctx)
}

func slicesContains(s []int, v int) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

// heapBytes is the Go heap's object bytes (live and not yet swept).
func heapBytes() uint64 {
	s := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}

// TestFetchInflightBound: a page of 40 images of 2 MiB on 8 host names
// (all on 127.0.0.1) loads whole, while the responses this process holds
// for the browser stay within MaxInflight (4 MiB here): the heap grows
// by a bounded amount, not by the 80 MiB of images (times their encoding
// for the browser) that holding them all at once would take.
func TestFetchInflightBound(t *testing.T) {
	const n, size, names = 40, 2 << 20, 8
	img := make([]byte, size)
	for i := range img {
		img[i] = byte(i * 7)
	}
	var served atomic.Int64
	hosts := map[string]string{}
	var tags strings.Builder
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/img" {
			served.Add(1)
			w.Header().Set("Content-Type", "application/octet-stream")
			w.Header().Set("Content-Length", fmt.Sprint(size))
			w.Write(img)
			return
		}
		if r.URL.Path == "/many" {
			fmt.Fprintf(w, `<!doctype html><html><head><title>images</title></head><body><main>many images</main>%s</body></html>`, tags.String())
			return
		}
		fmt.Fprint(w, `<!doctype html><html><head><title>warm</title></head><body>warm</body></html>`)
	}))
	defer srv.Close()
	port := srv.Listener.Addr().String()
	port = port[strings.LastIndexByte(port, ':')+1:]
	for i := range names {
		hosts[fmt.Sprintf("img%d.test", i)] = "127.0.0.1"
	}
	for i := range n {
		fmt.Fprintf(&tags, `<img src="http://img%d.test:%s/img?%d">`, i%names, port, i)
	}
	b, _ := newBrowser(t, Options{Policy: Policy{AllowPrivate: true}, MaxInflight: 4 << 20, hosts: hosts})
	// The browser starts first: its start is not the measure.
	if pages, err := b.FetchURLs(context.Background(), []string{srv.URL + "/warm"}); err != nil || pages[0].Error != "" {
		t.Fatal(err, pages)
	}
	served.Store(0)
	runtime.GC()
	base := heapBytes()
	var peak atomic.Uint64
	stop := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		tick := time.NewTicker(2 * time.Millisecond)
		defer tick.Stop()
		for {
			if h := heapBytes(); h > peak.Load() {
				peak.Store(h)
			}
			select {
			case <-stop:
				return
			case <-tick.C:
			}
		}
	}()
	start := time.Now()
	pages, err := b.FetchURLs(context.Background(), []string{srv.URL + "/many"})
	took := time.Since(start)
	close(stop)
	<-sampled
	if err != nil || pages[0].Error != "" || len(pages[0].Refused) > 0 {
		t.Fatalf("fetch: %v %+v", err, pages)
	}
	if got := served.Load(); got != n {
		t.Errorf("%d images served, want %d", got, n)
	}
	growth := int64(peak.Load()) - int64(base)
	t.Logf("heap grew by %d MiB at most, in %v", growth>>20, took)
	if growth > 80<<20 {
		t.Errorf("the heap grew by %d MiB while the page loaded; want it bounded by what is in flight (4 MiB, and its encoding)", growth>>20)
	}
}
