package daemon_test

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/codumentor/codumentor/agentcore"
	"github.com/codumentor/codumentor/agentcore/llmtest"
	"github.com/codumentor/codumentor/daemon/store"
	"github.com/codumentor/codumentor/daemon/store/storetest"
)

// BenchmarkListConversations measures authenticated GET
// /api/v1/conversations (token check, user lookup, one query: a page of
// 100 of the user's 200 conversations) against GET /healthz, the same
// server's cheapest route, measured in the same run: parallel clients
// on keep-alive connections. Two servers with the same data, one on
// SQLite and one on PostgreSQL, take turns over three rounds (the
// sub-benchmarks of the later rounds are named sqlite#01, …).
func BenchmarkListConversations(b *testing.B) {
	type server struct {
		p *proc
		c *client
	}
	servers := map[string]server{}
	backends := []string{store.BackendSQLite, store.BackendPostgres}
	for _, backend := range backends {
		db := "store:\n  backend: sqlite\n"
		if backend == store.BackendPostgres {
			db = fmt.Sprintf("store:\n  backend: postgres\n  postgres: {dsn: %q}\n", storetest.Postgres(b).DSN)
		}
		in := newInstance(b, db)
		in.addUser("alice", pw, false)
		p := in.start()
		c := p.login("alice", pw)
		for i := 0; i < 200; i++ {
			c.newConversation()
		}
		servers[backend] = server{p, c}
	}
	for round := range 3 {
		for i := range backends {
			backend := backends[(i+round)%len(backends)]
			b.Run(backend, func(b *testing.B) { listing(b, servers[backend].p, servers[backend].c) })
		}
	}
}

// listing runs the two sub-benchmarks of BenchmarkListConversations on
// the server p, authenticated as c.
func listing(b *testing.B, p *proc, c *client) {
	for _, bc := range []struct{ name, path, token string }{
		{"healthz", "/healthz", ""},
		{"conversations", "/api/v1/conversations", c.token},
	} {
		b.Run(bc.name, func(b *testing.B) {
			tr := &http.Transport{MaxIdleConnsPerHost: 64}
			defer tr.CloseIdleConnections()
			hc := &http.Client{Transport: tr}
			b.SetParallelism(4)
			start := time.Now()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					req, _ := http.NewRequest("GET", p.URL+bc.path, nil)
					if bc.token != "" {
						req.Header.Set("Authorization", "Bearer "+bc.token)
					}
					res, err := hc.Do(req)
					if err != nil {
						b.Error(err)
						return
					}
					var n int
					buf := make([]byte, 4096)
					for {
						k, err := res.Body.Read(buf)
						n += k
						if err != nil {
							break
						}
					}
					res.Body.Close()
					if res.StatusCode != http.StatusOK || n == 0 {
						b.Errorf("%s: %d", bc.path, res.StatusCode)
						return
					}
				}
			})
			b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "req/s")
		})
	}
}

// BenchmarkFanOut has 1,000 clients follow one conversation over SSE
// while a turn streams text (one text_delta event per few characters,
// at a model's pace), and reports the p99 latency from an event's
// creation in the engine to its arrival at each client, and how many
// events were lost (must be 0).
func BenchmarkFanOut(b *testing.B) {
	const subscribers = 1000
	in := newInstance(b, fanOutModel(b)+streamLimits(subscribers))
	in.addUser("alice", pw, false)
	p := in.start()
	c := p.login("alice", pw)

	var lat []time.Duration
	var lost, received int
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		conv := c.newConversation()
		r := fanOut(b, []*client{c}, conv, subscribers, func() {
			b.StartTimer()
			c.send(conv, "tell me about foxes")
		})
		b.StopTimer()
		lost += r.lost
		for _, l := range r.lat {
			lat = append(lat, l...)
			received += len(l)
		}
	}
	if len(lat) == 0 {
		b.Fatal("no events received")
	}
	b.ReportMetric(percentileMs(lat, 0.50), "p50-ms")
	b.ReportMetric(percentileMs(lat, 0.99), "p99-ms")
	b.ReportMetric(float64(lost), "lost")
	b.ReportMetric(float64(received)/float64(b.N*subscribers), "events/sub")
	if lost > 0 {
		b.Errorf("%d events lost", lost)
	}
}

// fanOutModel starts a scripted model whose every answer streams 900
// characters at a model's pace (a piece every 20 ms), and returns the
// YAML that points a server at it.
func fanOutModel(b *testing.B) string {
	text := strings.Repeat("The quick brown fox jumps over the lazy dog. ", 20)
	var steps []llmtest.Step
	for i := 0; i < 50; i++ {
		steps = append(steps, llmtest.Step{Text: text})
	}
	srv, err := llmtest.StartServer(&llmtest.Script{Steps: steps}, llmtest.Options{ChunkDelay: 20 * time.Millisecond})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(srv.Close)
	return fmt.Sprintf("llm:\n  base_url: %s\n  model: test\n", srv.URL())
}

// streamLimits lifts the caps that would refuse n streams of one user
// from one address.
func streamLimits(n int) string {
	return fmt.Sprintf("server:\n  max_streams_per_user: %d\n  max_streams: %d\n  max_connections_per_ip: %d\n", n, n, n+64)
}

// fanOutResult is what the subscribers of one fan-out saw.
type fanOutResult struct {
	// lat holds, for each server followed (in the order given), the
	// delays from the time of each text_delta event to its arrival at
	// each subscriber there.
	lat [][]time.Duration
	// lost counts the subscribers' missing or out-of-order events.
	lost int
}

// fanOut has n subscribers follow conv, spread in turn over the servers
// of via, runs start once every one of them follows, and waits until
// each has read the turn's turn_finished.
func fanOut(b *testing.B, via []*client, conv string, n int, start func()) fanOutResult {
	b.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	var mu sync.Mutex
	var wg sync.WaitGroup
	ready := make(chan struct{}, n)
	r := fanOutResult{lat: make([][]time.Duration, len(via))}
	var subSeqs [][]int64
	tr := &http.Transport{MaxIdleConnsPerHost: n, MaxConnsPerHost: n}
	defer tr.CloseIdleConnections()
	hc := &http.Client{Transport: tr}
	for s := 0; s < n; s++ {
		c := via[s%len(via)]
		wg.Add(1)
		go func() {
			defer wg.Done()
			req, _ := http.NewRequestWithContext(ctx, "GET", c.base+"/api/v1/conversations/"+conv+"/events", nil)
			req.Header.Set("Authorization", "Bearer "+c.token)
			res, err := hc.Do(req)
			if err != nil {
				ready <- struct{}{}
				if ctx.Err() == nil {
					b.Error(err)
				}
				return
			}
			defer res.Body.Close()
			ready <- struct{}{}
			if res.StatusCode != http.StatusOK {
				b.Errorf("events through %s: %d", c.base, res.StatusCode)
				return
			}
			var mine []time.Duration
			var seqs []int64
			sc := bufio.NewScanner(res.Body)
			for sc.Scan() {
				line := sc.Text()
				data, ok := strings.CutPrefix(line, "data: ")
				if !ok {
					continue
				}
				now := time.Now()
				// Only seq, type and time are needed; a full decode per
				// event and client would make the load generator, which
				// shares the machine, the bottleneck.
				seq, typ, at, err := eventHead(data)
				if err != nil {
					b.Error(err)
					return
				}
				seqs = append(seqs, seq)
				if typ == agentcore.EventTextDelta {
					mine = append(mine, now.Sub(at))
				}
				if typ == agentcore.EventTurnFinished {
					break
				}
			}
			mu.Lock()
			r.lat[s%len(via)] = append(r.lat[s%len(via)], mine...)
			subSeqs = append(subSeqs, seqs)
			mu.Unlock()
		}()
	}
	for s := 0; s < n; s++ {
		<-ready
	}
	start()
	wg.Wait()
	// Every subscriber must have every event, in order: 1..last.
	var want int64
	for _, seqs := range subSeqs {
		want = max(want, int64(len(seqs)))
	}
	for _, seqs := range subSeqs {
		for j, s := range seqs {
			if s != int64(j+1) {
				r.lost++
				break
			}
		}
		r.lost += int(want) - len(seqs)
	}
	r.lost += n - len(subSeqs)
	return r
}

// percentileMs is the q quantile of lat in milliseconds; it sorts lat.
func percentileMs(lat []time.Duration, q float64) float64 {
	slices.Sort(lat)
	return float64(lat[int(q*float64(len(lat)-1))].Microseconds()) / 1000
}

// BenchmarkIdleRSS reports the server's resident memory once it has
// started, served a login and readyz, and sat idle for a second.
func BenchmarkIdleRSS(b *testing.B) {
	for i := 0; i < b.N; i++ {
		in := newInstance(b, "")
		in.addUser("alice", pw, false)
		p := in.start()
		p.login("alice", pw)
		p.anon().do("GET", "/readyz", nil)
		time.Sleep(time.Second)
		b.ReportMetric(procStatusMB(b, p.cmd.Process.Pid, "VmRSS"), "RSS-MB")
		p.stop()
	}
}

// BenchmarkHostileModel has the model endpoint send one endless stream
// line (200 MB without a newline) and one endless reply (300 MB of text
// in 64 KiB deltas) and reports how far the server's resident memory
// peaked above what it held before the turn: the client's line and reply
// limits end the turn instead (target: under 150 MB for each).
func BenchmarkHostileModel(b *testing.B) {
	srv, err := llmtest.StartServer(&llmtest.Script{Steps: []llmtest.Step{{Text: "the model's own text"}}}, llmtest.Options{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(srv.Close)
	in := newInstance(b, fmt.Sprintf("llm:\n  base_url: %s\n  model: test\n", srv.URL()))
	in.addUser("alice", pw, false)
	p := in.start()
	defer p.stop()
	c := p.login("alice", pw)
	pid := p.cmd.Process.Pid
	for _, bc := range []struct {
		name  string
		fault llmtest.Fault
	}{
		{"line-200MB", llmtest.Fault{LineBytes: 200 << 20}},
		{"reply-300MB", llmtest.Fault{ReplyBytes: 300 << 20}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			var worst float64
			for i := 0; i < b.N; i++ {
				conv := c.newConversation()
				before := procStatusMB(b, pid, "VmRSS")
				// Peak RSS from here on: writing 5 to clear_refs resets VmHWM.
				if err := os.WriteFile(fmt.Sprintf("/proc/%d/clear_refs", pid), []byte("5"), 0); err != nil {
					b.Fatal(err)
				}
				srv.Inject(bc.fault)
				ev := turnEnd(b, c, conv, func() { c.send(conv, "answer at length") })
				if !strings.Contains(ev, "turn_failed") || !strings.Contains(ev, "longer than") {
					b.Errorf("the turn ended with %.300s, want turn_failed naming the limit", ev)
				}
				worst = max(worst, procStatusMB(b, pid, "VmHWM")-before)
			}
			b.ReportMetric(worst, "RSS-delta-MB")
			if worst > 150 {
				b.Errorf("resident memory peaked %.0f MB above its level before the turn, want under 150 MB", worst)
			}
		})
	}
}

// procStatusMB reads a kB field of /proc/<pid>/status in MB.
func procStatusMB(b *testing.B, pid int, field string) float64 {
	return float64(procStatus(b, pid, field)) / (1 << 20)
}

// turnEnd follows conv's events, runs start, and returns the "event:"
// and "data:" lines of the event that ended the turn. Lines are read
// without a length limit: the events of a hostile reply can be long.
func turnEnd(b *testing.B, c *client, conv string, start func()) string {
	b.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", c.base+"/api/v1/conversations/"+conv+"/events", nil)
	req.Header.Set("Authorization", "Bearer "+c.token)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		b.Fatal(err)
	}
	defer res.Body.Close()
	start()
	r := bufio.NewReader(res.Body)
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			b.Fatalf("events of %s: %v", conv, err)
		}
		typ, ok := strings.CutPrefix(strings.TrimSpace(line), "event: ")
		if !ok || (typ != agentcore.EventTurnFinished && typ != agentcore.EventTurnFailed && typ != agentcore.EventTurnCancelled) {
			continue
		}
		data, _ := r.ReadString('\n')
		return line + data
	}
}

// eventHead reads seq, type and time from the start of an event's JSON
// as the server writes it: {"seq":N,"type":"T","conversation":…,"time":"…",…}.
func eventHead(data string) (int64, string, time.Time, error) {
	field := func(name string) (string, error) {
		i := strings.Index(data, `"`+name+`":`)
		if i < 0 {
			return "", fmt.Errorf("no %s in %s", name, data)
		}
		v := data[i+len(name)+3:]
		if strings.HasPrefix(v, `"`) {
			return v[1 : 1+strings.IndexByte(v[1:], '"')], nil
		}
		return v[:strings.IndexAny(v, ",}")], nil
	}
	seqS, err := field("seq")
	if err != nil {
		return 0, "", time.Time{}, err
	}
	seq, err := strconv.ParseInt(seqS, 10, 64)
	if err != nil {
		return 0, "", time.Time{}, err
	}
	typ, err := field("type")
	if err != nil {
		return 0, "", time.Time{}, err
	}
	ts, err := field("time")
	if err != nil {
		return 0, "", time.Time{}, err
	}
	at, err := time.Parse(time.RFC3339Nano, ts)
	return seq, typ, at, err
}
