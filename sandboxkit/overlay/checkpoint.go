package overlay

import (
	"bytes"
	"encoding/gob"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// A checkpoint is a named copy of a layer's upper directory, kept in the
// layer (<dir>/checkpoints), so that Remove and GC drop it with the layer.
//
// Files are copied with FICLONE where the filesystem can (btrfs, xfs), so
// a checkpoint shares their blocks until either side changes; elsewhere
// they are copied. Never hardlinked: overlayfs writes upper files in place,
// so a link would change the checkpoint with the workspace. Only what
// changed since the layer's last checkpoint or restore is copied: a file
// whose inode, size, mtime and ctime are those recorded then is the same
// file (ctime cannot be set back by its owner), and its copy is reused.
//
// Checkpoint, Restore and Fork read and write the upper directory as it
// is: call them while no sandbox writes to it (between commands), and
// Restore only while none has it mounted (hold Lock). They walk by file
// descriptor and never follow a symlink in the layer, keep whiteouts,
// opaque directories (and every user.overlay.* attribute) and modes, and
// record which checkpoints exist in an index written atomically.

// ErrNoCheckpoint reports a checkpoint that was never taken or that the
// limits have dropped since.
var ErrNoCheckpoint = errors.New("no such checkpoint")

// CheckpointLimits bound a layer's checkpoints: past either limit the
// oldest are dropped. Zero values mean the defaults.
type CheckpointLimits struct {
	MaxCount int   // distinct states kept (default 50)
	MaxBytes int64 // bytes of file copies kept, counting each copy once (default 1 GiB)
}

// Default checkpoint limits.
const (
	DefaultCheckpointCount = 50
	DefaultCheckpointBytes = 1 << 30
)

// CheckpointInfo describes a kept checkpoint.
type CheckpointInfo struct {
	Name    string
	Created time.Time
	// Same is true when nothing changed since the previous checkpoint:
	// the name shares that state and cost nothing.
	Same bool
}

const (
	cpDir      = "checkpoints"
	cpIndex    = "index.json"
	cpBlobs    = "blobs"
	cpStates   = "states"
	headState  = "head"
	maxCPNames = 10000 // names kept in the index, whatever their states
)

// cpEntry is one entry of an upper directory as a checkpoint holds it.
type cpEntry struct {
	Path  string            `json:"p"`
	Type  byte              `json:"t"` // 'd', 'f', 'l', 'w' (whiteout), 'p' (fifo)
	Mode  uint32            `json:"m"` // permission bits (and setuid/setgid/sticky)
	Blob  uint64            `json:"b,omitempty"`
	Size  int64             `json:"s,omitempty"`
	Link  string            `json:"l,omitempty"`
	Xattr map[string][]byte `json:"x,omitempty"` // user.overlay.* attributes
	Mtime int64             `json:"mt,omitempty"`
	// The upper entry's identity when recorded: unchanged identity,
	// unchanged file.
	Ino   uint64 `json:"i,omitempty"`
	Ctime int64  `json:"ct,omitempty"`
}

// cpState is the content of an upper directory: its entries, parents
// before children.
type cpState struct {
	Entries []cpEntry `json:"entries"`
}

type cpName struct {
	Name    string    `json:"name"`
	State   uint64    `json:"state"`
	Created time.Time `json:"created"`
	Same    bool      `json:"same,omitempty"`
}

type cpIndexFile struct {
	Next   uint64           `json:"next"`   // the next blob or state number
	Head   uint64           `json:"head"`   // the state the upper dir had at the last checkpoint or restore (0: empty)
	States []uint64         `json:"states"` // kept states, oldest first
	Names  []cpName         `json:"names"`
	Bytes  map[string]int64 `json:"bytes"` // blob → size
	Refs   map[string]int   `json:"refs"`  // blob → kept states using it
	Total  int64            `json:"total"` // bytes of the blobs in use
	// Gen numbers the names journal (names-<gen>) that extends Names:
	// an unchanged checkpoint appends a line there instead of rewriting
	// the index, and the next rewrite folds the journal in.
	Gen uint64 `json:"gen,omitempty"`

	journal int // lines read from the journal
	// head is state Head once read or written (nil: not yet), cached with
	// the index: a state file is written only together with the index
	// (whose bytes always change then, Gen with them), so an index read
	// back unchanged names the same head. (A writer that crashed between
	// the two left at most other identities in the file, which only make
	// the next checkpoint copy more.)
	head *cpState

	// The bytes of the index file and of the journal idx was decoded
	// from, by which the cache knows it.
	raw, rawJournal []byte
}

// cpCache keeps the decoded indexes of the layers checkpointed last, so
// that a turn's checkpoints do not decode the whole index each time. An
// entry is used only while the index and journal files hold exactly the
// bytes it was decoded from (another process may have written them), and
// is taken out while in use, so a call that fails half way leaves none.
var cpCache struct {
	sync.Mutex
	m     map[string]cpIndexFile // layer dir → index
	order []string               // oldest first
}

const maxCPCache = 16 // layers whose index is kept decoded

// takeCached returns and removes the cached index of dir if it was
// decoded from index and its journal, which read reads.
func takeCached(dir string, index []byte, read func(gen uint64) ([]byte, error)) (cpIndexFile, bool) {
	cpCache.Lock()
	idx, ok := cpCache.m[dir]
	if ok {
		delete(cpCache.m, dir)
		cpCache.order = slices.DeleteFunc(cpCache.order, func(d string) bool { return d == dir })
	}
	cpCache.Unlock()
	if !ok || !bytes.Equal(idx.raw, index) {
		return cpIndexFile{}, false
	}
	j, err := read(idx.Gen)
	if err != nil || !bytes.Equal(j, idx.rawJournal) {
		return cpIndexFile{}, false
	}
	return idx, true
}

// keepCached caches idx, which the files of dir now hold, dropping the
// oldest entry past maxCPCache.
func keepCached(dir string, idx cpIndexFile) {
	cpCache.Lock()
	defer cpCache.Unlock()
	if cpCache.m == nil {
		cpCache.m = map[string]cpIndexFile{}
	}
	if _, ok := cpCache.m[dir]; !ok {
		cpCache.order = append(cpCache.order, dir)
	}
	cpCache.m[dir] = idx
	for len(cpCache.order) > maxCPCache {
		delete(cpCache.m, cpCache.order[0])
		cpCache.order = cpCache.order[1:]
	}
}

// cpJournal names the file of names added since the index was written.
const (
	cpJournal  = "names-"
	maxJournal = 256 // lines before the index is rewritten with them
)

var cpMu sync.Map // layer dir → *sync.Mutex, serialising checkpoint work in this process

func (l *Layer) cpLock() (unlock func(), err error) {
	m, _ := cpMu.LoadOrStore(l.Dir, &sync.Mutex{})
	mu := m.(*sync.Mutex)
	mu.Lock()
	dir := filepath.Join(l.Dir, cpDir)
	// Plain descriptors here and below: an os.File costs five more
	// system calls (its poller registration fails for a regular file),
	// and a turn's checkpoint is mostly such fixed costs.
	open := func() (int, error) {
		return unix.Open(filepath.Join(dir, "lock"), unix.O_RDWR|unix.O_CREAT|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	}
	fd, err := open()
	if errors.Is(err, fs.ErrNotExist) {
		// The first checkpoint: the lock is made after the directories,
		// so where it exists they do.
		for _, d := range []string{dir, filepath.Join(dir, cpBlobs), filepath.Join(dir, cpStates)} {
			if err := os.Mkdir(d, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
				mu.Unlock()
				return nil, fmt.Errorf("overlay: checkpoints of layer %q: %w", l.ID, err)
			}
		}
		fd, err = open()
	}
	if err == nil {
		err = unix.Flock(fd, unix.LOCK_EX)
		if err != nil {
			unix.Close(fd)
		}
	}
	if err != nil {
		mu.Unlock()
		return nil, fmt.Errorf("overlay: lock the checkpoints of layer %q: %w", l.ID, err)
	}
	return func() { unix.Close(fd); mu.Unlock() }, nil
}

// checkCPName refuses names that are not plain file names.
func checkCPName(name string) error {
	if err := checkID(name); err != nil {
		return fmt.Errorf("overlay: invalid checkpoint name %q: use 1 to %d characters of A-Z a-z 0-9 . _ -, not starting with a dot", name, maxIDLen)
	}
	return nil
}

// Checkpoint records the upper directory's present content under name
// (replacing a checkpoint of that name), copying only what changed since
// the last checkpoint or restore, and then drops the oldest checkpoints
// past lim. It reports whether anything had changed.
func (l *Layer) Checkpoint(name string, lim CheckpointLimits) (changed bool, err error) {
	if err := checkCPName(name); err != nil {
		return false, err
	}
	unlock, err := l.cpLock()
	if err != nil {
		return false, err
	}
	defer unlock()
	c := l.cps()
	idx, err := c.readIndex()
	if err != nil {
		return false, err
	}
	head, err := c.headState(&idx)
	if err != nil {
		return false, err
	}
	st, err := c.snapshot(l.Upper, head, &idx)
	if err != nil {
		return false, err
	}
	changed = !sameState(st, head)
	now := time.Now().UTC()
	if !changed && slices.EqualFunc(st.Entries, head.Entries, sameIdentity) &&
		idx.lookupName(name) < 0 && len(idx.Names) < maxCPNames && idx.journal < maxJournal {
		// Nothing to copy, drop or re-record: a line in the journal names
		// the head state.
		idx.head = &st
		return false, c.appendJournal(&idx, cpName{Name: name, State: idx.Head, Created: now, Same: true})
	}
	id := idx.Head
	if changed {
		id = idx.Next
		idx.Next++
		if err := c.writeState(id, st); err != nil {
			return false, err
		}
		if err := c.writeBlobs(id, st); err != nil {
			return false, err
		}
		idx.States = append(idx.States, id)
		idx.addRefs(st)
		idx.Head = id
	} else if err := c.writeState(id, st); err != nil {
		// The same content, with the identities seen now.
		return false, err
	}
	idx.Names = slices.DeleteFunc(idx.Names, func(n cpName) bool { return n.Name == name })
	idx.Names = append(idx.Names, cpName{Name: name, State: id, Created: now, Same: !changed})
	if err := c.trim(&idx, lim); err != nil {
		return false, err
	}
	idx.head = &st
	return changed, c.writeIndex(idx)
}

// Restore makes the upper directory hold what checkpoint name recorded,
// changing only the entries that differ. It fails with an error wrapping
// ErrNoCheckpoint if there is no such checkpoint (any more). Hold the
// upper directory's Lock: no sandbox may have it mounted.
func (l *Layer) Restore(name string) error {
	return l.withCheckpoint(name, func(c checkpoints, idx cpIndexFile, id uint64, target cpState) error {
		head, err := c.headState(&idx)
		if err != nil {
			return err
		}
		if err := RestoreAccess(l.Upper); err != nil {
			return err
		}
		st, err := c.restore(l.Upper, target, head)
		if err != nil {
			return err
		}
		// The restored tree is state id; its files have new identities,
		// which the head records so that the next checkpoint copies none
		// of them.
		if err := c.writeState(id, st); err != nil {
			return err
		}
		idx.Head, idx.head = id, &st
		return c.writeIndex(idx)
	})
}

// Fork fills dst's upper directory, which must be empty, with checkpoint
// name of l. dst starts with no checkpoints of its own.
func (l *Layer) Fork(name string, dst *Layer) error {
	return l.withCheckpoint(name, func(c checkpoints, idx cpIndexFile, _ uint64, target cpState) error {
		if _, err := c.restore(dst.Upper, target, cpState{}); err != nil {
			return err
		}
		keepCached(c.dir, idx) // unchanged
		return nil
	})
}

// withCheckpoint calls f with checkpoint name's state, holding the
// checkpoints' lock.
func (l *Layer) withCheckpoint(name string, f func(c checkpoints, idx cpIndexFile, id uint64, st cpState) error) error {
	if err := checkCPName(name); err != nil {
		return err
	}
	unlock, err := l.cpLock()
	if err != nil {
		return err
	}
	defer unlock()
	c := l.cps()
	idx, err := c.readIndex()
	if err != nil {
		return err
	}
	id, err := idx.lookup(l.ID, name)
	if err != nil {
		return err
	}
	st, err := c.readState(id)
	if err != nil {
		return err
	}
	return f(c, idx, id, st)
}

// Checkpoints lists the layer's kept checkpoints, oldest first.
func (l *Layer) Checkpoints() ([]CheckpointInfo, error) {
	unlock, err := l.cpLock()
	if err != nil {
		return nil, err
	}
	defer unlock()
	c := l.cps()
	idx, err := c.readIndex()
	if err != nil {
		return nil, err
	}
	var out []CheckpointInfo
	for _, n := range idx.Names {
		out = append(out, CheckpointInfo{Name: n.Name, Created: n.Created, Same: n.Same})
	}
	keepCached(c.dir, idx)
	return out, nil
}

func (x *cpIndexFile) lookup(layer, name string) (uint64, error) {
	if i := x.lookupName(name); i >= 0 {
		return x.Names[i].State, nil
	}
	return 0, fmt.Errorf("overlay: layer %q has no checkpoint %q (never taken, or dropped as the oldest): %w", layer, name, ErrNoCheckpoint)
}

// lookupName returns the index of name in x.Names, or -1.
func (x *cpIndexFile) lookupName(name string) int {
	return slices.IndexFunc(x.Names, func(n cpName) bool { return n.Name == name })
}

// sameIdentity reports whether a and b are the same entry, identities
// included.
func sameIdentity(a, b cpEntry) bool {
	return a.Path == b.Path && a.Type == b.Type && a.Mode == b.Mode && a.Blob == b.Blob && a.Size == b.Size &&
		a.Link == b.Link && a.Mtime == b.Mtime && a.Ino == b.Ino && a.Ctime == b.Ctime && xattrsEqual(a.Xattr, b.Xattr)
}

// checkpoints is the checkpoint directory of one layer.
type checkpoints struct{ dir, layer string }

func (l *Layer) cps() checkpoints {
	return checkpoints{dir: filepath.Join(l.Dir, cpDir), layer: l.ID}
}

func (c checkpoints) blob(id uint64) string {
	return filepath.Join(c.dir, cpBlobs, strconv.FormatUint(id, 16))
}

func (c checkpoints) readIndex() (cpIndexFile, error) {
	idx := cpIndexFile{Next: 1, Bytes: map[string]int64{}, Refs: map[string]int{}}
	data, err := readFile(filepath.Join(c.dir, cpIndex), 0)
	if errors.Is(err, fs.ErrNotExist) {
		data, err = nil, nil // no index yet; the journal may name the empty state
	}
	if err == nil {
		if cached, ok := takeCached(c.dir, data, c.readJournalFile); ok {
			return cached, nil
		}
		if data != nil {
			err = json.Unmarshal(data, &idx)
		}
		idx.raw = data
	}
	if err != nil {
		return idx, fmt.Errorf("overlay: checkpoint index of layer %q: %w", c.layer, err)
	}
	if idx.Bytes == nil {
		idx.Bytes = map[string]int64{}
	}
	if idx.Refs == nil {
		idx.Refs = map[string]int{}
	}
	if err := c.readJournal(&idx); err != nil {
		return idx, fmt.Errorf("overlay: checkpoint index of layer %q: %w", c.layer, err)
	}
	return idx, nil
}

func (c checkpoints) journalPath(gen uint64) string {
	return filepath.Join(c.dir, cpJournal+strconv.FormatUint(gen, 16))
}

// readJournal adds to idx the names of its journal: lines of name, state
// and creation time (Unix ns), each an unchanged checkpoint. A last line
// without its newline was cut short by a crash and is ignored.
func (c checkpoints) readJournal(idx *cpIndexFile) error {
	data, err := c.readJournalFile(idx.Gen)
	if err != nil {
		return err
	}
	idx.rawJournal = data
	lines := strings.Split(string(data), "\n")
	for _, line := range lines[:len(lines)-1] {
		f := strings.Split(line, "\t")
		if len(f) != 3 || checkID(f[0]) != nil {
			return fmt.Errorf("bad line %q in the names journal", line)
		}
		state, err1 := strconv.ParseUint(f[1], 16, 64)
		ns, err2 := strconv.ParseInt(f[2], 10, 64)
		if err1 != nil || err2 != nil {
			return fmt.Errorf("bad line %q in the names journal", line)
		}
		idx.Names = slices.DeleteFunc(idx.Names, func(n cpName) bool { return n.Name == f[0] })
		idx.Names = append(idx.Names, cpName{Name: f[0], State: state, Created: time.Unix(0, ns).UTC(), Same: true})
		idx.journal++
	}
	if lines[len(lines)-1] != "" {
		idx.journal = maxJournal // a line appended now would join the cut one: rewrite the index first
	}
	return nil
}

// readJournalFile returns the journal of generation gen (nil if there
// is none).
func (c checkpoints) readJournalFile(gen uint64) ([]byte, error) {
	const max = maxJournal * (maxIDLen + 64)
	data, err := readFile(c.journalPath(gen), max)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err == nil && len(data) > max {
		err = errors.New("the names journal is too large")
	}
	return data, err
}

// appendJournal records n in idx's journal: one write, where rewriting
// the index would encode and rename all of it.
func (c checkpoints) appendJournal(idx *cpIndexFile, n cpName) error {
	line := fmt.Sprintf("%s\t%x\t%d\n", n.Name, n.State, n.Created.UnixNano())
	fd, err := unix.Open(c.journalPath(idx.Gen), unix.O_WRONLY|unix.O_APPEND|unix.O_CREAT|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err == nil {
		var n int
		n, err = unix.Write(fd, []byte(line))
		if err == nil && n < len(line) {
			err = io.ErrShortWrite
		}
		if cerr := unix.Close(fd); err == nil {
			err = cerr
		}
	}
	if err != nil {
		return fmt.Errorf("overlay: write the checkpoint index of layer %q: %w", c.layer, err)
	}
	// The name as readJournal will read it back: Created to the ns.
	n.Created = time.Unix(0, n.Created.UnixNano()).UTC()
	idx.Names = append(idx.Names, n)
	idx.journal++
	idx.rawJournal = append(idx.rawJournal, line...)
	keepCached(c.dir, *idx)
	return nil
}

// readFile returns the content of path, read with plain system calls
// (see cpLock) and without following a symlink there; past limit bytes
// (if limit > 0) it stops and returns what it read, more than limit. The
// caller holds the checkpoints' lock, under which no writer changes the
// file: it ends at its size, without a read to see the end.
func readFile(path string, limit int) ([]byte, error) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: filepath.Base(path), Err: err}
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, &fs.PathError{Op: "stat", Path: filepath.Base(path), Err: err}
	}
	end := int(st.Size)
	size := end
	if limit > 0 {
		size = min(size, limit+1)
	}
	buf := make([]byte, 0, max(size, 512))
	for {
		if len(buf) >= end {
			return buf, nil
		}
		if len(buf) == cap(buf) {
			buf = slices.Grow(buf, cap(buf))
		}
		n, err := unix.Read(fd, buf[len(buf):cap(buf)])
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return nil, &fs.PathError{Op: "read", Path: filepath.Base(path), Err: err}
		}
		if n == 0 || limit > 0 && len(buf)+n > limit {
			return buf[:len(buf)+n], nil
		}
		buf = buf[:len(buf)+n]
	}
}

// writeIndex replaces the index with idx, whose Names include its
// journal's, and starts a new, empty journal.
func (c checkpoints) writeIndex(idx cpIndexFile) error {
	old := idx.Gen
	idx.Gen++
	// A journal of that number left by an older index (written by a
	// version that knew no journal) must not add its names.
	err := os.Remove(c.journalPath(idx.Gen))
	if errors.Is(err, fs.ErrNotExist) {
		err = nil
	}
	var data []byte
	if err == nil {
		data, err = json.Marshal(idx)
	}
	if err == nil {
		err = writeAtomic(filepath.Join(c.dir, cpIndex), data)
	}
	if err != nil {
		return fmt.Errorf("overlay: write the checkpoint index of layer %q: %w", c.layer, err)
	}
	// The new index no longer reads the old journal; a crash here only
	// leaves the file behind.
	_ = os.Remove(c.journalPath(old))
	idx.raw, idx.rawJournal, idx.journal = data, nil, 0
	keepCached(c.dir, idx)
	return nil
}

func (c checkpoints) statePath(id uint64) string {
	return filepath.Join(c.dir, cpStates, strconv.FormatUint(id, 16))
}

// headState returns state idx.Head, from idx if it holds it.
func (c checkpoints) headState(idx *cpIndexFile) (cpState, error) {
	if idx.head != nil {
		return *idx.head, nil
	}
	st, err := c.readState(idx.Head)
	if err == nil {
		idx.head = &st
	}
	return st, err
}

// readState returns state id; state 0 is the empty upper directory.
func (c checkpoints) readState(id uint64) (cpState, error) {
	var st cpState
	if id == 0 {
		return st, nil
	}
	data, err := readFile(c.statePath(id), 0)
	if err == nil {
		err = gob.NewDecoder(bytes.NewReader(data)).Decode(&st)
	}
	if err != nil {
		return st, fmt.Errorf("overlay: checkpoint state of layer %q: %w", c.layer, err)
	}
	return st, nil
}

func (c checkpoints) writeState(id uint64, st cpState) error {
	if id == 0 {
		return nil
	}
	var buf bytes.Buffer
	err := gob.NewEncoder(&buf).Encode(st)
	if err == nil {
		err = writeAtomic(c.statePath(id), buf.Bytes())
	}
	if err != nil {
		return fmt.Errorf("overlay: write a checkpoint state of layer %q: %w", c.layer, err)
	}
	return nil
}

// writeAtomic replaces path with data: a crash leaves the old or the new.
func writeAtomic(path string, data []byte) error {
	tmp := path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC|unix.O_NOFOLLOW, 0o600)
	if err != nil {
		return err
	}
	// No fsync: a checkpoint lost in a crash is one fewer undo, and the
	// rename keeps the old index or the new whole.
	_, err = f.Write(data)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	return err
}

// sameState reports whether a and b hold the same content (identities
// aside).
func sameState(a, b cpState) bool {
	return slices.EqualFunc(a.Entries, b.Entries, func(x, y cpEntry) bool {
		return x.Path == y.Path && x.Type == y.Type && x.Mode == y.Mode && x.Blob == y.Blob &&
			x.Link == y.Link && x.Mtime == y.Mtime && xattrsEqual(x.Xattr, y.Xattr)
	})
}

func xattrsEqual(a, b map[string][]byte) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || string(v) != string(w) {
			return false
		}
	}
	return true
}

// trim drops the oldest states past lim, the names of dropped states, and
// the blobs no kept state uses any more.
func (c checkpoints) trim(idx *cpIndexFile, lim CheckpointLimits) error {
	if lim.MaxCount <= 0 {
		lim.MaxCount = DefaultCheckpointCount
	}
	if lim.MaxBytes <= 0 {
		lim.MaxBytes = DefaultCheckpointBytes
	}
	if len(idx.Names) > maxCPNames {
		idx.Names = idx.Names[len(idx.Names)-maxCPNames:]
	}
	named := map[uint64]bool{idx.Head: true}
	for _, n := range idx.Names {
		named[n.State] = true
	}
	var drop []uint64
	for _, s := range idx.States {
		if !named[s] {
			drop = append(drop, s) // replaced under its name
		}
	}
	kept := slices.DeleteFunc(slices.Clone(idx.States), func(s uint64) bool { return !named[s] })
	for len(kept) > 1 && (len(kept) > lim.MaxCount || idx.Total > lim.MaxBytes && idx.Total-c.dropping(idx, drop) > lim.MaxBytes) {
		i := 0
		if kept[0] == idx.Head {
			i = 1 // the head stays: it is the workspace's present content
		}
		drop = append(drop, kept[i])
		kept = slices.Delete(kept, i, i+1)
	}
	for _, s := range drop {
		if err := c.dropState(idx, s); err != nil {
			return err
		}
	}
	idx.States = kept
	keep := map[uint64]bool{0: true}
	for _, s := range kept {
		keep[s] = true
	}
	idx.Names = slices.DeleteFunc(idx.Names, func(n cpName) bool { return !keep[n.State] })
	return nil
}

// dropping returns how many bytes dropping states would free (an
// estimate that counts the blobs only they use: it reads them).
func (c checkpoints) dropping(idx *cpIndexFile, states []uint64) int64 {
	refs := map[uint64]int{}
	var freed int64
	for _, s := range states {
		blobs, err := c.readBlobs(s)
		if err != nil {
			continue
		}
		for _, b := range blobs {
			refs[b]++
			if refs[b] == idx.Refs[strconv.FormatUint(b, 16)] {
				freed += idx.Bytes[strconv.FormatUint(b, 16)]
			}
		}
	}
	return freed
}

// blobsOf returns the blobs st uses, each once.
func blobsOf(st cpState) []uint64 {
	seen := map[uint64]bool{}
	var out []uint64
	for _, e := range st.Entries {
		if e.Blob != 0 && !seen[e.Blob] {
			seen[e.Blob] = true
			out = append(out, e.Blob)
		}
	}
	return out
}

// addRefs counts st's blobs as used by one more state.
func (idx *cpIndexFile) addRefs(st cpState) {
	for _, b := range blobsOf(st) {
		k := strconv.FormatUint(b, 16)
		if idx.Refs[k] == 0 {
			idx.Total += idx.Bytes[k]
		}
		idx.Refs[k]++
	}
}

// dropState removes state s and the blobs only it used.
func (c checkpoints) dropState(idx *cpIndexFile, s uint64) error {
	blobs, err := c.readBlobs(s)
	if err != nil {
		return err
	}
	for _, b := range blobs {
		k := strconv.FormatUint(b, 16)
		if idx.Refs[k]--; idx.Refs[k] > 0 {
			continue
		}
		if err := os.Remove(c.blob(b)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("overlay: drop a checkpoint copy of layer %q: %w", c.layer, err)
		}
		idx.Total -= idx.Bytes[k]
		delete(idx.Refs, k)
		delete(idx.Bytes, k)
	}
	for _, p := range []string{c.statePath(s), c.statePath(s) + blobsSuffix} {
		if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("overlay: drop a checkpoint of layer %q: %w", c.layer, err)
		}
	}
	return nil
}

// blobsSuffix names the file beside a state that lists its blobs, so
// that dropping the state need not read it whole.
const blobsSuffix = ".blobs"

func (c checkpoints) writeBlobs(id uint64, st cpState) error {
	var b strings.Builder
	for _, blob := range blobsOf(st) {
		b.WriteString(strconv.FormatUint(blob, 16))
		b.WriteByte('\n')
	}
	if err := writeAtomic(c.statePath(id)+blobsSuffix, []byte(b.String())); err != nil {
		return fmt.Errorf("overlay: write a checkpoint state of layer %q: %w", c.layer, err)
	}
	return nil
}

func (c checkpoints) readBlobs(id uint64) ([]uint64, error) {
	data, err := os.ReadFile(c.statePath(id) + blobsSuffix)
	if err != nil {
		return nil, fmt.Errorf("overlay: checkpoint state of layer %q: %w", c.layer, err)
	}
	var out []uint64
	for _, f := range strings.Fields(string(data)) {
		b, err := strconv.ParseUint(f, 16, 64)
		if err != nil {
			return nil, fmt.Errorf("overlay: checkpoint state of layer %q: bad blob %q", c.layer, f)
		}
		out = append(out, b)
	}
	return out, nil
}

// snapshot walks upper and returns its state, copying into new blobs the
// files that head does not already hold.
func (c checkpoints) snapshot(upper string, head cpState, idx *cpIndexFile) (cpState, error) {
	prev := make(map[string]*cpEntry, len(head.Entries))
	for i := range head.Entries {
		prev[head.Entries[i].Path] = &head.Entries[i]
	}
	root, err := openRootDir(upper)
	if errors.Is(err, unix.EACCES) && RestoreAccess(upper) == nil {
		root, err = openRootDir(upper)
	}
	if err != nil {
		return cpState{}, cpErr("open the upper directory", err)
	}
	defer root.close()
	s := snapper{prev: prev, idx: idx, blobsDir: filepath.Join(c.dir, cpBlobs)}
	defer func() {
		if s.blobs != nil {
			s.blobs.close()
		}
	}()
	if err := s.walk(root, ""); err != nil {
		return cpState{}, err
	}
	return cpState{Entries: s.entries}, nil
}

func cpErr(what string, err error) error {
	return fmt.Errorf("overlay: checkpoint: %s: %w", what, err)
}

type snapper struct {
	prev     map[string]*cpEntry
	idx      *cpIndexFile
	blobsDir string
	blobs    *dirFD // opened at the first copy
	entries  []cpEntry
}

func (s *snapper) walk(d *dirFD, rel string) error {
	names, err := d.names()
	if err != nil {
		return err
	}
	slices.Sort(names)
	for _, name := range names {
		p := joinRel(rel, name)
		st, ok, err := d.lstat(name)
		if err != nil {
			return err
		}
		if !ok {
			continue // removed meanwhile
		}
		e := cpEntry{Path: p, Mode: st.Mode &^ unix.S_IFMT, Mtime: st.Mtim.Nano(), Ino: st.Ino, Ctime: st.Ctim.Nano()}
		switch st.Mode & unix.S_IFMT {
		case unix.S_IFDIR:
			e.Type, e.Mtime = 'd', 0
			sub, err := openDirAccess(d, name, st.Mode)
			if err != nil {
				return err
			}
			e.Xattr, err = overlayXattrs(sub.fd)
			if err == nil {
				s.entries = append(s.entries, e)
				err = s.walk(sub, p)
			}
			if rerr := restoreDirMode(d, name, st.Mode); err == nil {
				err = rerr
			}
			sub.close()
			if err != nil {
				return err
			}
			continue
		case unix.S_IFREG:
			e.Type, e.Size = 'f', st.Size
			if old := s.prev[p]; old != nil && old.Type == 'f' && old.Blob != 0 && old.Ino == e.Ino &&
				old.Ctime == e.Ctime && old.Size == e.Size && old.Mtime == e.Mtime && old.Mode == e.Mode {
				e.Blob, e.Xattr = old.Blob, old.Xattr
			} else if err := s.copyFile(d, name, &e); err != nil {
				return err
			}
		case unix.S_IFLNK:
			e.Type, e.Mode = 'l', 0
			if e.Link, err = readlinkAt(d, name); err != nil {
				return err
			}
		case unix.S_IFCHR:
			if !isWhiteout(&st) {
				continue // no sandbox can make a device; nothing to keep
			}
			e.Type, e.Mtime = 'w', 0
		case unix.S_IFIFO:
			e.Type = 'p'
		default:
			continue // sockets live only while their process does
		}
		s.entries = append(s.entries, e)
	}
	return nil
}

// openDirAccess opens directory name of d, giving its owner search and
// read permission first if the sandbox took them away.
func openDirAccess(d *dirFD, name string, mode uint32) (*dirFD, error) {
	if mode&0o500 != 0o500 {
		if err := unix.Fchmodat(d.fd, name, (mode&0o7777)|0o700, 0); err != nil {
			return nil, cpErr("give the owner access to "+d.path(name), err)
		}
	}
	return d.open(name)
}

func restoreDirMode(d *dirFD, name string, mode uint32) error {
	if mode&0o500 == 0o500 {
		return nil
	}
	if err := unix.Fchmodat(d.fd, name, mode&0o7777, 0); err != nil {
		return cpErr("restore the mode of "+d.path(name), err)
	}
	return nil
}

// overlayXattrs returns the user.overlay.* attributes of fd (opaque,
// origin, impure, ...), which say how overlayfs merges the entry.
func overlayXattrs(fd int) (map[string][]byte, error) {
	buf := make([]byte, 1024)
	n, err := unix.Flistxattr(fd, buf)
	if errors.Is(err, unix.ERANGE) {
		if n, err = unix.Flistxattr(fd, nil); err == nil {
			buf = make([]byte, n)
			n, err = unix.Flistxattr(fd, buf)
		}
	}
	if errors.Is(err, unix.ENOTSUP) {
		return nil, nil
	}
	if err != nil {
		return nil, cpErr("list extended attributes", err)
	}
	var out map[string][]byte
	for _, name := range strings.Split(string(buf[:n]), "\x00") {
		if !strings.HasPrefix(name, "user.overlay.") {
			continue
		}
		val := make([]byte, 256)
		m, err := unix.Fgetxattr(fd, name, val)
		if errors.Is(err, unix.ERANGE) {
			if m, err = unix.Fgetxattr(fd, name, nil); err == nil {
				val = make([]byte, m)
				m, err = unix.Fgetxattr(fd, name, val)
			}
		}
		if err != nil {
			return nil, cpErr("read attribute "+name, err)
		}
		if out == nil {
			out = map[string][]byte{}
		}
		out[name] = val[:m]
	}
	return out, nil
}

// copyFile copies regular file name of d into a new blob and sets e's
// Blob, Xattr and identity. A file that changed while it was copied (a
// background job writing) is copied again, up to three times.
func (s *snapper) copyFile(d *dirFD, name string, e *cpEntry) error {
	if s.blobs == nil {
		blobs, err := openRootDir(s.blobsDir)
		if err != nil {
			return cpErr("open the checkpoint copies", err)
		}
		s.blobs = blobs
	}
	for try := 0; ; try++ {
		f, err := openFileAt(d, name)
		if errors.Is(err, unix.EACCES) {
			// A file the sandbox made unreadable: read it anyway, as its owner.
			if err = unix.Fchmodat(d.fd, name, e.Mode|0o400, 0); err == nil {
				f, err = openFileAt(d, name)
				_ = unix.Fchmodat(d.fd, name, e.Mode, 0)
			}
		}
		if err != nil {
			return cpErr("open "+d.path(name), err)
		}
		var before, after unix.Stat_t
		err = unix.Fstat(int(f.Fd()), &before)
		if err == nil && before.Mode&unix.S_IFMT != unix.S_IFREG {
			err = fmt.Errorf("not a regular file any more")
		}
		var id uint64
		if err == nil {
			id = s.idx.Next
			s.idx.Next++
			err = cloneInto(s.blobs, strconv.FormatUint(id, 16), f, before.Size)
		}
		if err == nil {
			e.Xattr, err = overlayXattrs(int(f.Fd()))
		}
		if err == nil {
			err = unix.Fstat(int(f.Fd()), &after)
		}
		f.Close()
		if err != nil {
			return cpErr("copy "+d.path(name), err)
		}
		if after.Ctim == before.Ctim && after.Size == before.Size && after.Mtim == before.Mtim {
			e.Blob, e.Size, e.Ino, e.Ctime, e.Mtime, e.Mode = id, before.Size, before.Ino, before.Ctim.Nano(), before.Mtim.Nano(), before.Mode&^unix.S_IFMT
			s.idx.Bytes[strconv.FormatUint(id, 16)] = before.Size
			return nil
		}
		_ = unix.Unlinkat(s.blobs.fd, strconv.FormatUint(id, 16), 0)
		if try == 2 {
			return cpErr(d.path(name), errors.New("the file kept changing while it was copied; stop what writes it and try again"))
		}
	}
}

// cloneInto creates file name in dir holding src's content: a reflink
// where the filesystem can, else a copy (copy_file_range).
func cloneInto(dir *dirFD, name string, src *os.File, size int64) error {
	fd, err := unix.Openat(dir.fd, name, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return err
	}
	dst := os.NewFile(uintptr(fd), name)
	defer dst.Close()
	if size > 0 {
		if err := unix.IoctlFileClone(fd, int(src.Fd())); err != nil {
			if _, err := src.Seek(0, io.SeekStart); err != nil {
				return err
			}
			if _, err := io.Copy(dst, src); err != nil {
				_ = unix.Unlinkat(dir.fd, name, 0)
				return err
			}
		}
	}
	return nil
}

// restore makes upper hold target, whose blobs are in c. cur describes
// what upper held at the last checkpoint or restore: an entry whose
// identity is still the one recorded there, with the content target
// wants, is kept. It returns target with the identities of upper's
// entries now.
func (c checkpoints) restore(upper string, target, cur cpState) (cpState, error) {
	want := make(map[string]*cpEntry, len(target.Entries))
	for i := range target.Entries {
		want[target.Entries[i].Path] = &target.Entries[i]
	}
	was := make(map[string]*cpEntry, len(cur.Entries))
	for i := range cur.Entries {
		was[cur.Entries[i].Path] = &cur.Entries[i]
	}
	root, err := openRootDir(upper)
	if err != nil {
		return cpState{}, rsErr("open the upper directory", err)
	}
	defer root.close()
	blobs, err := openRootDir(filepath.Join(c.dir, cpBlobs))
	if err != nil {
		return cpState{}, rsErr("open the checkpoint copies", err)
	}
	defer blobs.close()
	r := restorer{want: want, was: was, blobs: blobs, have: map[string]bool{}}
	if err := r.prune(root, ""); err != nil {
		return cpState{}, err
	}
	out := cpState{Entries: slices.Clone(target.Entries)}
	dirs := map[string]*dirFD{"": root}
	defer func() {
		for p, d := range dirs {
			if p != "" {
				d.close()
			}
		}
	}()
	var dirModes []*cpEntry
	for i := range out.Entries {
		e := &out.Entries[i]
		parent, name := splitRel(e.Path)
		pd := dirs[parent]
		if pd == nil {
			return cpState{}, rsErr(e.Path, errors.New("the checkpoint lists an entry before its directory"))
		}
		if !r.have[e.Path] {
			if err := r.create(pd, name, e); err != nil {
				return cpState{}, err
			}
		} else if e.Type != 'd' && e.Type != 'f' {
			continue // a kept symlink, whiteout or fifo: nothing to set
		}
		if e.Type == 'd' {
			if err := unix.Fchmodat(pd.fd, name, 0o700, 0); err != nil {
				return cpState{}, rsErr("chmod "+e.Path, err)
			}
			sub, err := pd.open(name)
			if err != nil {
				return cpState{}, rsErr("open "+e.Path, err)
			}
			dirs[e.Path] = sub
			if err := syncXattrs(sub.fd, e.Xattr); err != nil {
				return cpState{}, rsErr(e.Path, err)
			}
			dirModes = append(dirModes, e)
			continue
		}
		var st unix.Stat_t
		if err := unix.Fstatat(pd.fd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			return cpState{}, rsErr("stat "+e.Path, err)
		}
		e.Ino, e.Ctime = st.Ino, st.Ctim.Nano()
	}
	// Modes last, deepest first: a directory restored read-only must not
	// stop what is made inside it.
	for i := len(dirModes) - 1; i >= 0; i-- {
		e := dirModes[i]
		parent, name := splitRel(e.Path)
		if err := unix.Fchmodat(dirs[parent].fd, name, e.Mode&0o7777, 0); err != nil {
			return cpState{}, rsErr("chmod "+e.Path, err)
		}
	}
	return out, nil
}

func rsErr(what string, err error) error {
	return fmt.Errorf("overlay: restore a checkpoint: %s: %w", what, err)
}

func splitRel(p string) (dir, name string) {
	if i := strings.LastIndexByte(p, '/'); i >= 0 {
		return p[:i], p[i+1:]
	}
	return "", p
}

type restorer struct {
	want, was map[string]*cpEntry
	blobs     *dirFD
	have      map[string]bool // paths kept as they are
}

// prune removes from d every entry that target does not have as it is,
// and marks the ones kept.
func (r *restorer) prune(d *dirFD, rel string) error {
	names, err := d.names()
	if err != nil {
		return err
	}
	for _, name := range names {
		p := joinRel(rel, name)
		st, ok, err := d.lstat(name)
		if err != nil || !ok {
			if err != nil {
				return err
			}
			continue
		}
		w := r.want[p]
		if st.Mode&unix.S_IFMT == unix.S_IFDIR {
			if w != nil && w.Type == 'd' {
				sub, err := openDirAccess(d, name, st.Mode)
				if err != nil {
					return err
				}
				err = r.prune(sub, p)
				sub.close()
				if err != nil {
					return err
				}
				r.have[p] = true
				continue
			}
			if err := removeAt(d, name); err != nil {
				return rsErr("remove "+p, err)
			}
			continue
		}
		if w != nil && r.same(p, w, &st, d, name) {
			r.have[p] = true
			continue
		}
		if err := unix.Unlinkat(d.fd, name, 0); err != nil {
			return rsErr("remove "+p, err)
		}
	}
	return nil
}

// same reports whether entry name of d, with stat st, is w already.
func (r *restorer) same(p string, w *cpEntry, st *unix.Stat_t, d *dirFD, name string) bool {
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFREG:
		old := r.was[p]
		return w.Type == 'f' && old != nil && old.Type == 'f' && old.Blob == w.Blob && old.Ino == st.Ino &&
			old.Ctime == st.Ctim.Nano() && old.Size == st.Size && old.Mtime == st.Mtim.Nano() && old.Mode == st.Mode&^unix.S_IFMT
	case unix.S_IFLNK:
		target, err := readlinkAt(d, name)
		return w.Type == 'l' && err == nil && target == w.Link
	case unix.S_IFCHR:
		return w.Type == 'w' && isWhiteout(st)
	case unix.S_IFIFO:
		return w.Type == 'p' && w.Mode == st.Mode&^unix.S_IFMT
	}
	return false
}

// removeAt removes entry name of d and, for a directory, everything in it,
// by descriptor.
func removeAt(d *dirFD, name string) error {
	err := unix.Unlinkat(d.fd, name, 0)
	if err == nil || !errors.Is(err, unix.EISDIR) && !errors.Is(err, unix.EPERM) {
		return err
	}
	_ = unix.Fchmodat(d.fd, name, 0o700, 0)
	sub, err := d.open(name)
	if err != nil {
		return err
	}
	names, err := sub.names()
	for _, n := range names {
		if err == nil {
			err = removeAt(sub, n)
		}
	}
	sub.close()
	if err != nil {
		return err
	}
	return unix.Unlinkat(d.fd, name, unix.AT_REMOVEDIR)
}

// create makes entry name of d as e describes.
func (r *restorer) create(d *dirFD, name string, e *cpEntry) error {
	var err error
	switch e.Type {
	case 'd':
		err = unix.Mkdirat(d.fd, name, 0o700)
	case 'l':
		err = unix.Symlinkat(e.Link, d.fd, name)
	case 'w':
		// Since Linux 5.8 anyone may make a 0/0 device: it is a whiteout.
		err = unix.Mknodat(d.fd, name, unix.S_IFCHR|0o600, 0)
		if errors.Is(err, unix.EPERM) {
			err = fmt.Errorf("%w (this kernel lets only privileged users make overlayfs whiteouts; Linux 5.8 or later is needed)", err)
		}
		if err == nil {
			err = unix.Fchmodat(d.fd, name, e.Mode&0o7777, 0) // overlayfs makes them 0000
		}
	case 'p':
		if err = unix.Mkfifoat(d.fd, name, 0o600); err == nil {
			err = unix.Fchmodat(d.fd, name, e.Mode&0o7777, 0)
		}
	case 'f':
		err = r.createFile(d, name, e)
	default:
		err = fmt.Errorf("unknown entry type %q", e.Type)
	}
	if err != nil {
		return rsErr("create "+d.path(name), err)
	}
	if e.Type == 'l' || e.Type == 'p' {
		ts := []unix.Timespec{unix.NsecToTimespec(e.Mtime), unix.NsecToTimespec(e.Mtime)}
		_ = unix.UtimesNanoAt(d.fd, name, ts, unix.AT_SYMLINK_NOFOLLOW)
	}
	return nil
}

func (r *restorer) createFile(d *dirFD, name string, e *cpEntry) error {
	src, err := openFileAt(r.blobs, strconv.FormatUint(e.Blob, 16))
	if err != nil {
		return fmt.Errorf("the checkpoint's copy is missing: %w", err)
	}
	defer src.Close()
	if err := cloneInto(d, name, src, e.Size); err != nil {
		return err
	}
	fd, err := unix.Openat(d.fd, name, unix.O_WRONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	if err := setXattrs(fd, e.Xattr); err != nil {
		return err
	}
	ts := []unix.Timespec{unix.NsecToTimespec(e.Mtime), unix.NsecToTimespec(e.Mtime)}
	if err := unix.UtimesNanoAt(d.fd, name, ts, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return err
	}
	return unix.Fchmod(fd, e.Mode&0o7777)
}

// syncXattrs makes fd's user.overlay.* attributes attrs: a directory
// kept by a restore may have become opaque since.
func syncXattrs(fd int, attrs map[string][]byte) error {
	have, err := overlayXattrs(fd)
	if err != nil {
		return err
	}
	for k := range have {
		if _, ok := attrs[k]; !ok {
			if err := unix.Fremovexattr(fd, k); err != nil {
				return fmt.Errorf("remove attribute %s: %w", k, err)
			}
		}
	}
	return setXattrs(fd, attrs)
}

func setXattrs(fd int, attrs map[string][]byte) error {
	for k, v := range attrs {
		if err := unix.Fsetxattr(fd, k, v, 0); err != nil {
			return fmt.Errorf("set attribute %s: %w", k, err)
		}
	}
	return nil
}
