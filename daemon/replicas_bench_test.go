package daemon_test

import (
	"io"
	"net/http"
	"slices"
	"testing"
	"time"
)

// nodeIDs returns the node id of each server of ps: the home of a
// conversation created through it (a node takes its own among equals).
func nodeIDs(b *testing.B, cs []*client) []string {
	b.Helper()
	var ids []string
	for _, c := range cs {
		var conv struct{ Home string }
		c.must(http.StatusCreated, "POST", "/api/v1/conversations", map[string]string{"title": "probe"}, &conv)
		if conv.Home == "" || slices.Contains(ids, conv.Home) {
			b.Fatalf("node ids %v, then %q: each replica should be its own idle conversations' home", ids, conv.Home)
		}
		ids = append(ids, conv.Home)
	}
	return ids
}

// BenchmarkReplicaFanOut is BenchmarkFanOut across replicas: 1,000 SSE
// subscribers of one conversation, spread evenly over three replicas on
// one PostgreSQL database, while a turn at home on the first streams its
// text. Each event reaches the other two through the database (the row,
// pg_notify, the follower's read). The baseline is the same 1,000 on one
// server on SQLite, measured in the same run, the two taking turns at
// going first. Delay: from the event's time (set by the engine of the
// home node as it creates it; one clock) to its arrival at a subscriber.
func BenchmarkReplicaFanOut(b *testing.B) {
	const subscribers = 1000
	single := newInstance(b, fanOutModel(b)+streamLimits(subscribers)+"store:\n  backend: sqlite\n")
	single.addUser("root", pw, true)
	one := single.start().login("root", pw)
	_, ps := replicas(b, 3, fanOutModel(b)+streamLimits(subscribers))
	var cs []*client
	for _, p := range ps {
		cs = append(cs, p.login("root", pw))
	}
	nodes := nodeIDs(b, cs)

	var oneLat, homeLat, remoteLat []time.Duration
	var lost int
	for i := 0; i < b.N; i++ {
		for k := range 2 {
			if (i+k)%2 == 0 {
				conv := one.newConversation()
				r := fanOut(b, []*client{one}, conv, subscribers, func() { one.send(conv, "tell me about foxes") })
				oneLat = append(oneLat, r.lat[0]...)
				lost += r.lost
				continue
			}
			var conv struct{ ID, Home string }
			cs[0].must(http.StatusCreated, "POST", "/api/v1/conversations", map[string]string{"title": "fan-out", "node": nodes[0]}, &conv)
			if conv.Home != nodes[0] {
				b.Fatalf("placed on %s, want %s", conv.Home, nodes[0])
			}
			r := fanOut(b, cs, conv.ID, subscribers, func() { cs[0].send(conv.ID, "tell me about foxes") })
			homeLat = append(homeLat, r.lat[0]...)
			remoteLat = append(remoteLat, r.lat[1]...)
			remoteLat = append(remoteLat, r.lat[2]...)
			lost += r.lost
		}
	}
	if len(oneLat) == 0 || len(homeLat) == 0 || len(remoteLat) == 0 {
		b.Fatalf("events received: one node %d, home %d, other replicas %d", len(oneLat), len(homeLat), len(remoteLat))
	}
	all := append(slices.Clone(homeLat), remoteLat...)
	p99, base := percentileMs(all, 0.99), percentileMs(oneLat, 0.99)
	b.ReportMetric(percentileMs(all, 0.50), "p50-ms")
	b.ReportMetric(p99, "p99-ms")
	b.ReportMetric(percentileMs(remoteLat, 0.50), "remote-p50-ms")
	b.ReportMetric(percentileMs(remoteLat, 0.99), "remote-p99-ms")
	b.ReportMetric(percentileMs(homeLat, 0.99), "home-p99-ms")
	b.ReportMetric(percentileMs(oneLat, 0.50), "one-p50-ms")
	b.ReportMetric(base, "one-p99-ms")
	b.ReportMetric(p99/base, "ratio")
	b.ReportMetric(float64(lost), "lost")
	if lost > 0 {
		b.Errorf("%d events lost", lost)
	}
}

// BenchmarkReplicaForward measures what forwarding to a conversation's
// home node adds: GET …/workspace/diff (a route served at home; an
// untouched workspace, an empty patch) sent to the home node itself and
// to another replica that forwards it, in turns, one keep-alive client
// for each.
func BenchmarkReplicaForward(b *testing.B) {
	_, ps := replicas(b, 2, "")
	var cs []*client
	for _, p := range ps {
		cs = append(cs, p.login("root", pw))
	}
	nodes := nodeIDs(b, cs)
	var conv struct{ ID, Home string }
	cs[0].must(http.StatusCreated, "POST", "/api/v1/conversations", map[string]string{"title": "forwarded", "node": nodes[0]}, &conv)
	path := "/api/v1/conversations/" + conv.ID + "/workspace/diff"
	get := func(hc *http.Client, c *client) time.Duration {
		req, _ := http.NewRequest("GET", c.base+path, nil)
		req.Header.Set("Authorization", "Bearer "+c.token)
		t0 := time.Now()
		res, err := hc.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		_, err = io.Copy(io.Discard, res.Body)
		res.Body.Close()
		d := time.Since(t0)
		if err != nil || res.StatusCode != http.StatusOK {
			b.Fatalf("GET %s through %s: %d %v", path, c.base, res.StatusCode, err)
		}
		return d
	}
	direct, forwarded := &http.Client{Transport: &http.Transport{}}, &http.Client{Transport: &http.Transport{}}
	// Warm: connections, the forwarding node's connection to the home.
	for range 20 {
		get(direct, cs[0])
		get(forwarded, cs[1])
	}
	var d, f []time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if i%2 == 0 {
			d = append(d, get(direct, cs[0]))
			f = append(f, get(forwarded, cs[1]))
		} else {
			f = append(f, get(forwarded, cs[1]))
			d = append(d, get(direct, cs[0]))
		}
	}
	b.StopTimer()
	dp, fp := percentileMs(d, 0.50), percentileMs(f, 0.50)
	b.ReportMetric(dp, "direct-p50-ms")
	b.ReportMetric(fp, "forwarded-p50-ms")
	b.ReportMetric(fp-dp, "added-p50-ms")
	b.ReportMetric(percentileMs(f, 0.99)-percentileMs(d, 0.99), "added-p99-ms")
}
