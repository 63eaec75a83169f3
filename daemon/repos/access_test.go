package repos

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/codumentor/codumentor/daemon/auth"
	"github.com/codumentor/codumentor/integrations/retrieval"
)

// addRepos adds n repositories named r0… with file:// URLs that need
// not exist (nothing is fetched).
func addRepos(t testing.TB, s *Service, n int) []Repository {
	t.Helper()
	var rs []Repository
	for i := range n {
		r, err := s.Add(context.Background(), Add{Name: fmt.Sprintf("r%d", i), URL: "file:///nonexistent/r.git", By: auth.CommandLine})
		if err != nil {
			t.Fatal(err)
		}
		rs = append(rs, r)
	}
	return rs
}

// The level a user has is the highest of the entries for them, their
// groups and all; administrators have admin everywhere; without one the
// repository is not found, as an unknown one.
func TestAccessLevels(t *testing.T) {
	s, _ := service(t, Options{DefaultAccess: DefaultAccessAdmins})
	ctx := context.Background()
	us, err := auth.NewUsers(s.o.DB)
	if err != nil {
		t.Fatal(err)
	}
	add := func(name string, admin bool) auth.User {
		u, err := us.Add(ctx, auth.AddUser{Name: name, Password: "long enough password", Admin: admin, By: auth.CommandLine})
		if err != nil {
			t.Fatal(err)
		}
		return u
	}
	root, alice, bob, carol := add("root", true), add("alice", false), add("bob", false), add("carol", false)
	if _, err := us.AddGroup(ctx, auth.CommandLine, "devs"); err != nil {
		t.Fatal(err)
	}
	if err := us.SetMember(ctx, auth.CommandLine, "devs", "bob", true); err != nil {
		t.Fatal(err)
	}
	if err := us.SetGroups(ctx, carol.ID, auth.GroupSourceLDAP, []string{"Ops"}); err != nil {
		t.Fatal(err)
	}
	rs := addRepos(t, s, 3)
	if es, _ := s.AccessEntries(ctx, rs[0].ID); len(es) != 0 {
		t.Fatalf("default_access admins gave %+v", es)
	}
	set := func(r Repository, es ...AccessEntry) {
		t.Helper()
		if _, err := s.SetAccess(ctx, root.ID, r.ID, es); err != nil {
			t.Fatal(err)
		}
	}
	set(rs[0], AccessEntry{Kind: ForGroup, Name: "devs", Level: LevelRead}, AccessEntry{Kind: ForUser, Name: "bob", Level: LevelPush})
	set(rs[1], AccessEntry{Kind: ForAll, Level: LevelRead}, AccessEntry{Kind: ForGroup, Name: "OPS", Level: LevelAdmin})
	tests := []struct {
		u    auth.User
		repo Repository
		want Level
	}{
		{root, rs[2], LevelAdmin},
		{alice, rs[0], LevelNone},
		{bob, rs[0], LevelPush}, // user push beats group read
		{carol, rs[0], LevelNone},
		{alice, rs[1], LevelRead},
		{carol, rs[1], LevelAdmin}, // through the LDAP group, names without case
		{bob, rs[2], LevelNone},
	}
	for _, tt := range tests {
		_, l, err := s.Access(ctx, tt.u, tt.repo.ID)
		if tt.want == LevelNone {
			if err != ErrNotFound {
				t.Errorf("%s on %s: %v, %v; want ErrNotFound", tt.u.Name, tt.repo.Name, l, err)
			}
			continue
		}
		if err != nil || l != tt.want {
			t.Errorf("%s on %s: %v, %v; want %v", tt.u.Name, tt.repo.Name, l, err, tt.want)
		}
	}
	readable := func(u auth.User) []string {
		ids, all, err := s.Readable(ctx, u.ID)
		if err != nil {
			t.Fatal(err)
		}
		if all != (u.Role == auth.RoleAdmin) {
			t.Errorf("%s reads all: %v", u.Name, all)
		}
		if all {
			ids = nil
			for _, r := range rs {
				ids = append(ids, r.ID)
			}
		}
		slices.Sort(ids)
		list, err := s.ListFor(ctx, u)
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, r := range list {
			names = append(names, r.ID)
		}
		slices.Sort(names)
		if !slices.Equal(ids, names) {
			t.Errorf("%s: Readable %v, ListFor %v", u.Name, ids, names)
		}
		return ids
	}
	sorted := func(rs ...Repository) []string {
		var ids []string
		for _, r := range rs {
			ids = append(ids, r.ID)
		}
		slices.Sort(ids)
		return ids
	}
	for _, tt := range []struct {
		u    auth.User
		want []string
	}{{root, sorted(rs...)}, {alice, sorted(rs[1])}, {bob, sorted(rs[0], rs[1])}, {carol, sorted(rs[1])}} {
		if got := readable(tt.u); !slices.Equal(got, tt.want) && !(len(got) == 0 && len(tt.want) == 0) {
			t.Errorf("%s reads %v, want %v", tt.u.Name, got, tt.want)
		}
	}
	// Leaving the group takes its access.
	if err := us.SetMember(ctx, auth.CommandLine, "devs", "bob", false); err != nil {
		t.Fatal(err)
	}
	set(rs[0], AccessEntry{Kind: ForGroup, Name: "devs", Level: LevelRead})
	if _, _, err := s.Access(ctx, bob, rs[0].ID); err != ErrNotFound {
		t.Errorf("bob out of devs: %v", err)
	}
	for _, bad := range [][]AccessEntry{
		{{Kind: ForUser, Name: "nobody", Level: LevelRead}},
		{{Kind: "team", Name: "x", Level: LevelRead}},
		{{Kind: ForGroup, Name: "devs", Level: LevelNone}},
		{{Kind: ForAll, Name: "x", Level: LevelRead}},
		{{Kind: ForGroup, Name: "devs", Level: LevelRead}, {Kind: ForGroup, Name: "DEVS", Level: LevelPush}},
	} {
		if _, err := s.SetAccess(ctx, root.ID, rs[0].ID, bad); err == nil || !strings.Contains(err.Error(), "invalid") {
			t.Errorf("SetAccess(%+v) = %v, want ErrInvalid", bad, err)
		}
	}
	// Deleting a repository deletes its entries.
	if err := s.Delete(ctx, rs[1].ID, root.ID); err != nil {
		t.Fatal(err)
	}
	var n int64
	s.o.DB.Model(&AccessEntry{}).Where("repository_id = ?", rs[1].ID).Count(&n)
	if n != 0 {
		t.Errorf("%d entries of a deleted repository", n)
	}
}

// An instance from before access entries: its repositories get an entry
// for all at push, so nobody loses access on upgrade; new ones get
// DefaultAccess.
func TestAccessUpgrade(t *testing.T) {
	s, _ := service(t, Options{})
	ctx := context.Background()
	old := addRepos(t, s, 2)
	if err := s.o.DB.Migrator().DropTable(&AccessEntry{}); err != nil {
		t.Fatal(err)
	}
	s2, err := Open(Options{DB: s.o.DB, Secrets: s.o.Secrets, Dir: s.o.Dir, DefaultAccess: DefaultAccessAdmins})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range old {
		es, err := s2.AccessEntries(ctx, r.ID)
		if err != nil || len(es) != 1 || es[0].Kind != ForAll || es[0].Level != LevelPush {
			t.Errorf("%s after the upgrade: %+v, %v", r.Name, es, err)
		}
	}
	us, err := auth.NewUsers(s.o.DB)
	if err != nil {
		t.Fatal(err)
	}
	u, err := us.Add(ctx, auth.AddUser{Name: "alice", Password: "long enough password", By: auth.CommandLine})
	if err != nil {
		t.Fatal(err)
	}
	if ids, all, err := s2.Readable(ctx, u.ID); err != nil || !all || ids != nil {
		t.Errorf("alice before the new repository: %v, %v, %v; want every repository", ids, all, err)
	}
	r, err := s2.Add(ctx, Add{Name: "new", URL: "file:///nonexistent/r.git", By: auth.CommandLine})
	if err != nil {
		t.Fatal(err)
	}
	ids, all, err := s2.Readable(ctx, u.ID)
	slices.Sort(ids)
	want := []string{old[0].ID, old[1].ID}
	slices.Sort(want)
	if err != nil || all || !slices.Equal(ids, want) {
		t.Errorf("alice after it: %v, %v, %v; want %v", ids, all, err, want)
	}
	if es, _ := s2.AccessEntries(ctx, r.ID); len(es) != 0 {
		t.Errorf("a new repository under default_access admins: %+v", es)
	}
	// Opening again migrates nothing more.
	if _, err := Open(Options{DB: s.o.DB, Secrets: s.o.Secrets, Dir: s.o.Dir}); err != nil {
		t.Fatal(err)
	}
	if es, _ := s2.AccessEntries(ctx, r.ID); len(es) != 0 {
		t.Errorf("the new repository after a second start: %+v", es)
	}
	if _, err := Open(Options{DB: s.o.DB, Secrets: s.o.Secrets, Dir: s.o.Dir, DefaultAccess: "everyone"}); err == nil {
		t.Error("DefaultAccess everyone accepted")
	}
}

// BenchmarkSearchAccess measures what the access check adds to a search
// on an instance of 200 repositories (20 of them indexed): each
// iteration runs the same query through a Searcher without the check and
// one whose Readable is the check, alternately, so that both see the
// same machine load. It reports both medians, the median of the added
// time (the target: at most 0.2 ms) and their ratio. The user reads
// every repository through an entry for all on each ("all", what
// default_access all gives) or a group entry on each ("group-all"), or
// only the 20 indexed ones ("subset": the index then filters by them).
func BenchmarkSearchAccess(b *testing.B) {
	all := AccessEntry{Kind: ForAll, Level: LevelPush}
	group := AccessEntry{Kind: ForGroup, Name: "devs", Level: LevelRead}
	for _, sc := range []struct {
		name string
		// entry: repository i's entry, if any.
		entry func(i int) *AccessEntry
	}{
		{"all", func(int) *AccessEntry { return &all }},
		{"group-all", func(int) *AccessEntry { return &group }},
		{"subset", func(i int) *AccessEntry {
			if i < 20 {
				return &group
			}
			return nil
		}},
	} {
		b.Run(sc.name, func(b *testing.B) { benchSearchAccess(b, sc.entry) })
	}
}

func benchSearchAccess(b *testing.B, entry func(i int) *AccessEntry) {
	ctx := context.Background()
	s, _ := service(b, Options{DefaultAccess: DefaultAccessAdmins})
	us, err := auth.NewUsers(s.o.DB)
	if err != nil {
		b.Fatal(err)
	}
	u, err := us.Add(ctx, auth.AddUser{Name: "bench", Password: "long enough password", By: auth.CommandLine})
	if err != nil {
		b.Fatal(err)
	}
	if err := us.SetGroups(ctx, u.ID, auth.GroupSourceLDAP, []string{"devs", "ops", "qa"}); err != nil {
		b.Fatal(err)
	}
	shard, err := retrieval.OpenShard(ctx, filepath.Join(b.TempDir(), retrieval.ShardFile(0)))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { shard.Close() })
	be, err := retrieval.NewSQLite(ctx, shard)
	if err != nil {
		b.Fatal(err)
	}
	ix, err := retrieval.New(retrieval.Options{Backend: be})
	if err != nil {
		b.Fatal(err)
	}
	dir, head := benchRepo(b)
	rs := addRepos(b, s, 200)
	for i, r := range rs {
		if e := entry(i); e != nil {
			if _, err := s.SetAccess(ctx, auth.CommandLine, r.ID, []AccessEntry{*e}); err != nil {
				b.Fatal(err)
			}
		}
		if i < 20 {
			if err := ix.Ingest(ctx, r.ID, dir, "", head, nil); err != nil {
				b.Fatal(err)
			}
		}
	}
	open := &retrieval.Searcher{Index: ix}
	checked := &retrieval.Searcher{Index: ix, Readable: s.Readable}
	const query = "parse config settings"
	var tOpen, tChecked []time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		t0 := time.Now()
		h1, err := open.SearchIn(ctx, u.ID, "", query, 8)
		t1 := time.Now()
		h2, err2 := checked.SearchIn(ctx, u.ID, "", query, 8)
		t2 := time.Now()
		if err != nil || err2 != nil || len(h1) != 8 || len(h2) != 8 {
			b.Fatalf("searches: %d %v, %d %v", len(h1), err, len(h2), err2)
		}
		tOpen, tChecked = append(tOpen, t1.Sub(t0)), append(tChecked, t2.Sub(t1))
	}
	b.StopTimer()
	added := make([]time.Duration, len(tOpen))
	for i := range tOpen {
		added[i] = tChecked[i] - tOpen[i]
	}
	p50 := func(ds []time.Duration) time.Duration {
		ds = slices.Clone(ds)
		sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
		return ds[len(ds)/2]
	}
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	b.ReportMetric(ms(p50(tOpen)), "open-p50-ms")
	b.ReportMetric(ms(p50(tChecked)), "checked-p50-ms")
	b.ReportMetric(ms(p50(added)), "added-p50-ms")
	b.ReportMetric(float64(p50(tChecked))/float64(p50(tOpen)), "ratio")
}

// benchRepo is a bare repository of 40 small Go files; its head.
func benchRepo(b *testing.B) (string, string) {
	dir := filepath.Join(b.TempDir(), "r.git")
	var stream strings.Builder
	stream.WriteString("commit refs/heads/main\ncommitter t <t@example.org> 1700000000 +0000\ndata 2\nr\n")
	for i := range 40 {
		body := fmt.Sprintf("package p\n\n// parseConfig%d reads the config settings of part %d.\nfunc parseConfig%d() map[string]string { return nil }\n", i, i, i)
		fmt.Fprintf(&stream, "M 100644 inline p/f%d.go\ndata %d\n%s\n", i, len(body), body)
	}
	for _, args := range [][]string{{"init", "-q", "--bare", dir}, {"--git-dir", dir, "fast-import", "--quiet"}} {
		cmd := exec.Command("git", args...)
		cmd.Stdin = strings.NewReader(stream.String())
		if out, err := cmd.CombinedOutput(); err != nil {
			b.Fatalf("git %v: %v: %s", args, err, out)
		}
	}
	out, err := exec.Command("git", "--git-dir", dir, "rev-parse", "main").Output()
	if err != nil {
		b.Fatal(err)
	}
	return dir, strings.TrimSpace(string(out))
}
