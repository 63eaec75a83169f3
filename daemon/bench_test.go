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
)

// BenchmarkListConversations measures authenticated GET
// /api/v1/conversations (token check, user lookup, one query) against
// GET /healthz, the same server's cheapest route, measured in the same
// run: parallel clients on keep-alive connections.
func BenchmarkListConversations(b *testing.B) {
	in := newInstance(b, "")
	in.addUser("alice", pw, false)
	p := in.start()
	c := p.login("alice", pw)
	for i := 0; i < 20; i++ {
		c.newConversation()
	}
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
	// One user follows with every subscriber, from one address: lift
	// the caps that would refuse that.
	in := newInstance(b, fmt.Sprintf("llm:\n  base_url: %s\n  model: test\nserver:\n  max_streams_per_user: %d\n  max_streams: %d\n  max_connections_per_ip: %d\n", srv.URL(), subscribers, subscribers, subscribers+64))
	in.addUser("alice", pw, false)
	p := in.start()
	c := p.login("alice", pw)

	var lat []time.Duration
	var lost, received int
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		conv := c.newConversation()
		ctx, cancel := context.WithCancel(context.Background())
		var mu sync.Mutex
		var wg sync.WaitGroup
		ready := make(chan struct{}, subscribers)
		var sublat [][]time.Duration
		var subSeqs [][]int64
		tr := &http.Transport{MaxIdleConnsPerHost: subscribers, MaxConnsPerHost: subscribers}
		hc := &http.Client{Transport: tr}
		for s := 0; s < subscribers; s++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				req, _ := http.NewRequestWithContext(ctx, "GET", p.URL+"/api/v1/conversations/"+conv+"/events", nil)
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
				sublat = append(sublat, mine)
				subSeqs = append(subSeqs, seqs)
				mu.Unlock()
			}()
		}
		for s := 0; s < subscribers; s++ {
			<-ready
		}
		b.StartTimer()
		c.send(conv, "tell me about foxes")
		wg.Wait()
		b.StopTimer()
		cancel()
		tr.CloseIdleConnections()
		// Every subscriber must have every event, in order: 1..last.
		var want int64
		for _, seqs := range subSeqs {
			want = max(want, int64(len(seqs)))
		}
		for _, seqs := range subSeqs {
			for j, s := range seqs {
				if s != int64(j+1) {
					lost++
					break
				}
			}
			lost += int(want) - len(seqs)
		}
		lost += subscribers - len(subSeqs)
		for _, l := range sublat {
			lat = append(lat, l...)
			received += len(l)
		}
	}
	slices.Sort(lat)
	if len(lat) == 0 {
		b.Fatal("no events received")
	}
	pct := func(q float64) float64 { return float64(lat[int(q*float64(len(lat)-1))].Microseconds()) / 1000 }
	b.ReportMetric(pct(0.50), "p50-ms")
	b.ReportMetric(pct(0.99), "p99-ms")
	b.ReportMetric(float64(lost), "lost")
	b.ReportMetric(float64(received)/float64(b.N*subscribers), "events/sub")
	if lost > 0 {
		b.Errorf("%d events lost", lost)
	}
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
