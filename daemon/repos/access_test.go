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

// accessService is a service whose new repositories get no access
// entries, and its users.
func accessService(t testing.TB) (*Service, *auth.Users) {
	t.Helper()
	s, _ := service(t, Options{DefaultAccess: DefaultAccessAdmins})
	us, err := auth.NewUsers(s.o.DB)
	if err != nil {
		t.Fatal(err)
	}
	return s, us
}

// addUser adds a user who is not an administrator, a member of groups
// (from the directory).
func addUser(t testing.TB, us *auth.Users, name string, groups ...string) auth.User {
	t.Helper()
	u, err := us.Add(context.Background(), auth.AddUser{Name: name, Password: "long enough password", By: auth.CommandLine})
	if err != nil {
		t.Fatal(err)
	}
	if len(groups) > 0 {
		if err := us.SetGroups(context.Background(), u.ID, auth.GroupSourceLDAP, groups); err != nil {
			t.Fatal(err)
		}
	}
	return u
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

// Readable says "every repository" whenever the user's entries cover
// them all, by one principal (the counts) or by several (the list), and
// lists exactly the covered ones otherwise.
func TestReadableAll(t *testing.T) {
	ctx := context.Background()
	s, us := accessService(t)
	u := addUser(t, us, "alice", "devs", "ops")
	addUser(t, us, "bob", "qa")
	rs := addRepos(t, s, 3)
	user := AccessEntry{Kind: ForUser, Name: "alice", Level: LevelRead}
	other := AccessEntry{Kind: ForUser, Name: "bob", Level: LevelAdmin}
	devs := AccessEntry{Kind: ForGroup, Name: "devs", Level: LevelRead}
	ops := AccessEntry{Kind: ForGroup, Name: "ops", Level: LevelPush}
	qa := AccessEntry{Kind: ForGroup, Name: "qa", Level: LevelAdmin}
	all := AccessEntry{Kind: ForAll, Level: LevelRead}
	for _, tt := range []struct {
		name    string
		entries [3][]AccessEntry
		all     bool
		want    []int // the repositories listed when not all
	}{
		{"user on each", [3][]AccessEntry{{user}, {user}, {user}}, true, nil},
		{"one group on each", [3][]AccessEntry{{devs}, {devs, qa}, {devs}}, true, nil},
		{"all on each", [3][]AccessEntry{{all}, {all}, {all}}, true, nil},
		{"principals together", [3][]AccessEntry{{devs}, {ops}, {user}}, true, nil},
		{"all and a group", [3][]AccessEntry{{all}, {all}, {ops}}, true, nil},
		{"two of three", [3][]AccessEntry{{devs}, {ops, devs}, {qa}}, false, []int{0, 1}},
		{"another group's", [3][]AccessEntry{{qa}, {qa}, {qa}}, false, []int{}},
		{"another user's", [3][]AccessEntry{{other}, {other, user}, {other}}, false, []int{1}},
		{"none", [3][]AccessEntry{}, false, []int{}},
	} {
		for i, r := range rs {
			if _, err := s.SetAccess(ctx, auth.CommandLine, r.ID, tt.entries[i]); err != nil {
				t.Fatal(err)
			}
		}
		ids, all, err := s.Readable(ctx, u.ID)
		if err != nil {
			t.Fatal(err)
		}
		want := []string{}
		for _, i := range tt.want {
			want = append(want, rs[i].ID)
		}
		slices.Sort(ids)
		slices.Sort(want)
		if all != tt.all || (!all && !slices.Equal(ids, want)) || (all && ids != nil) {
			t.Errorf("%s: Readable %v, all %v; want %v, all %v", tt.name, ids, all, want, tt.all)
		}
	}
}

// Readable's kept answers follow every change that can change them, made
// through the services or written to the tables by hand: entries,
// memberships, repositories added and deleted, the user's role.
func TestReadableFollowsChanges(t *testing.T) {
	ctx := context.Background()
	s, us := accessService(t)
	u := addUser(t, us, "alice")
	rs := addRepos(t, s, 2)
	devs := AccessEntry{Kind: ForGroup, Name: "devs", Level: LevelRead}
	if _, err := s.SetAccess(ctx, auth.CommandLine, rs[0].ID, []AccessEntry{devs}); err != nil {
		t.Fatal(err)
	}
	check := func(step string, all bool, want ...*Repository) {
		t.Helper()
		for range 2 { // read, then kept
			ids, every, err := s.Readable(ctx, u.ID)
			if err != nil {
				t.Fatal(err)
			}
			var w []string
			for _, r := range want {
				w = append(w, r.ID)
			}
			slices.Sort(ids)
			slices.Sort(w)
			if every != all || !slices.Equal(ids, w) {
				t.Fatalf("%s: Readable %v, all %v; want %v, all %v", step, ids, every, w, all)
			}
		}
	}
	exec := func(q string, args ...any) {
		t.Helper()
		if err := s.o.DB.Exec(q, args...).Error; err != nil {
			t.Fatal(err)
		}
	}
	check("no groups", false)
	if err := us.SetGroups(ctx, u.ID, auth.GroupSourceLDAP, []string{"devs"}); err != nil {
		t.Fatal(err)
	}
	check("a member of devs", false, &rs[0])
	if _, err := us.AddGroup(ctx, auth.CommandLine, "ops"); err != nil {
		t.Fatal(err)
	}
	exec(`UPDATE group_members SET group_name = 'ops' WHERE user_id = ?`, u.ID)
	check("moved to ops by hand", false)
	exec(`UPDATE group_members SET group_name = 'devs' WHERE user_id = ?`, u.ID)
	check("back in devs by hand", false, &rs[0])
	if _, err := s.SetAccess(ctx, auth.CommandLine, rs[1].ID, []AccessEntry{{Kind: ForUser, Name: "alice", Level: LevelRead}}); err != nil {
		t.Fatal(err)
	}
	check("an entry for her", true)
	third, err := s.Add(ctx, Add{Name: "third", URL: "file:///nonexistent/r.git", By: auth.CommandLine})
	if err != nil {
		t.Fatal(err)
	}
	check("a repository added", false, &rs[0], &rs[1])
	if err := us.SetGroups(ctx, u.ID, auth.GroupSourceLDAP, nil); err != nil {
		t.Fatal(err)
	}
	check("out of devs", false, &rs[1])
	if err := us.SetAdminGroups([]string{"admins"}); err != nil {
		t.Fatal(err)
	}
	if err := us.SetGroups(ctx, u.ID, auth.GroupSourceLDAP, []string{"admins"}); err != nil {
		t.Fatal(err)
	}
	check("an administrator", true)
	exec(`UPDATE users SET role = 'user' WHERE id = ?`, u.ID)
	check("demoted by hand", false, &rs[1])
	exec(`INSERT INTO repository_access (repository_id, kind, principal, level) VALUES (?, 'all', '', ?)`, third.ID, LevelRead)
	check("an entry for all by hand", false, &rs[1], &third)
	exec(`UPDATE repository_access SET principal = 'admins' WHERE repository_id = ? AND kind = 'group'`, rs[0].ID)
	check("devs' entry now admins' by hand", true)
	exec(`DELETE FROM group_members WHERE user_id = ?`, u.ID)
	check("memberships deleted by hand", false, &rs[1], &third)
	if _, err := s.SetAccess(ctx, auth.CommandLine, rs[1].ID, nil); err != nil {
		t.Fatal(err)
	}
	check("her entry removed", false, &third)
	if err := s.Delete(ctx, rs[0].ID, auth.CommandLine); err != nil {
		t.Fatal(err)
	}
	check("a repository deleted", false, &third)
	exec(`DELETE FROM repositories WHERE id = ?`, rs[1].ID) // it has no entries left
	check("the other deleted by hand", true)
}

// BenchmarkSearchAccess measures what the access check adds to a search
// on an instance of 200 repositories (20 of them indexed). Each iteration
// runs the same query through a Searcher whose Readable is the check and
// through one that is given the check's answer (the same filter, the
// same results, no check), in turns, so that both see the same machine
// load; and, for reference, through one with no access control (every
// repository, results the user may not read included). It reports the
// medians, the median of the added time (the target: at most 0.2 ms) and
// the ratio. The user reads every repository through an entry for all on
// each ("all", what default_access all gives) or a group entry on each
// ("group-all"), or every second one through a group entry ("half": 100
// repositories, 10 of them indexed, which the index filters by). The
// check's answer is kept until access changes; "half-changed" changes it
// (outside the timing) before each search, so that each reads it again.
func BenchmarkSearchAccess(b *testing.B) {
	all := AccessEntry{Kind: ForAll, Level: LevelPush}
	group := AccessEntry{Kind: ForGroup, Name: "devs", Level: LevelRead}
	half := func(i int) *AccessEntry {
		if i%2 == 0 {
			return &group
		}
		return nil
	}
	for _, sc := range []struct {
		name string
		// entry: repository i's entry, if any.
		entry   func(i int) *AccessEntry
		changed bool
	}{
		{"all", func(int) *AccessEntry { return &all }, false},
		{"group-all", func(int) *AccessEntry { return &group }, false},
		{"half", half, false},
		{"half-changed", half, true},
	} {
		b.Run(sc.name, func(b *testing.B) { benchSearchAccess(b, sc.entry, sc.changed) })
	}
}

func benchSearchAccess(b *testing.B, entry func(i int) *AccessEntry, changed bool) {
	ctx := context.Background()
	s, us := accessService(b)
	u := addUser(b, us, "bench", "devs", "ops", "qa")
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
	ids, every, err := s.Readable(ctx, u.ID)
	if err != nil {
		b.Fatal(err)
	}
	given := &retrieval.Searcher{Index: ix, Readable: func(context.Context, string) ([]string, bool, error) { return ids, every, nil }}
	checked := &retrieval.Searcher{Index: ix, Readable: s.Readable}
	open := &retrieval.Searcher{Index: ix}
	const query = "parse config settings"
	search := func(sr *retrieval.Searcher) time.Duration {
		t0 := time.Now()
		h, err := sr.SearchIn(ctx, u.ID, "", query, 8)
		d := time.Since(t0)
		if err != nil || len(h) != 8 {
			b.Fatalf("search: %d hits, %v", len(h), err)
		}
		return d
	}
	var tGiven, tChecked, tOpen, added []time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if changed {
			b.StopTimer()
			if err := s.o.DB.Exec(`UPDATE access_generation SET n = n + 1`).Error; err != nil {
				b.Fatal(err)
			}
			b.StartTimer()
		}
		var g, c time.Duration
		if i%2 == 0 {
			g, c = search(given), search(checked)
		} else {
			c, g = search(checked), search(given)
		}
		tGiven, tChecked, added = append(tGiven, g), append(tChecked, c), append(added, c-g)
		tOpen = append(tOpen, search(open))
	}
	b.StopTimer()
	p50 := func(ds []time.Duration) time.Duration {
		ds = slices.Clone(ds)
		sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
		return ds[len(ds)/2]
	}
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	b.ReportMetric(ms(p50(tGiven)), "given-p50-ms")
	b.ReportMetric(ms(p50(tChecked)), "checked-p50-ms")
	b.ReportMetric(ms(p50(added)), "added-p50-ms")
	b.ReportMetric(float64(p50(tChecked))/float64(p50(tGiven)), "ratio")
	b.ReportMetric(ms(p50(tOpen)), "open-p50-ms")
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
