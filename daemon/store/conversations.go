package store

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
	"unicode"
	"unicode/utf8"

	"golang.org/x/sync/singleflight"
	"gorm.io/gorm"
	"gorm.io/gorm/clause"

	"github.com/codumentor/codumentor/agentcore"
	"github.com/codumentor/codumentor/daemon/audit"
	"github.com/codumentor/codumentor/sandboxkit/randid"
)

// ErrNotFound wraps agentcore.ErrNotFound: a missing conversation, or one
// of another user (the two are the same answer).
var ErrNotFound = fmt.Errorf("store: %w", agentcore.ErrNotFound)

// Conversation is one user's chat with the agent.
type Conversation struct {
	ID      string    `gorm:"primaryKey" json:"id"`
	UserID  string    `gorm:"index:idx_conversations_user_updated,priority:1;not null" json:"user_id"`
	Title   string    `json:"title"`
	Created time.Time `json:"created"`
	Updated time.Time `gorm:"index:idx_conversations_user_updated,priority:2" json:"updated"`
	// ActiveTurn is the turn started and not yet ended; a server that
	// stops mid-turn leaves it set, and Recover ends it.
	ActiveTurn string `json:"active_turn,omitempty"`
	// LastSeq is the sequence number of the conversation's last event.
	LastSeq int64 `json:"last_seq"`
	// Mode is "" for a workspace conversation or ModeHostReadOnly (see
	// mode.go).
	Mode string `json:"mode,omitempty"`
	// Repository and BaseCommit are what the workspace shows: the
	// repository's tree at that commit ("" for an empty workspace).
	Repository string `gorm:"not null;default:''" json:"repository,omitempty"`
	BaseCommit string `gorm:"not null;default:''" json:"base_commit,omitempty"`
	// ModelProfile names the owner's model profile whose endpoint the
	// turns use ("" for the server's own llm); see profile.go.
	ModelProfile string `gorm:"not null;default:''" json:"model_profile,omitempty"`
	// HeadSeq is the last message of the active branch (nil: the last
	// message, as before branches).
	HeadSeq *int64 `json:"-"`
	// Home is the node whose server holds the conversation's workspace
	// and runs its turns, among several on one database ("" on a
	// database with one server; see SetNode).
	Home string `gorm:"index;not null;default:''" json:"home,omitempty"`
}

type messageRow struct {
	ConversationID string `gorm:"primaryKey"`
	Seq            int64  `gorm:"primaryKey;autoIncrement:false"`
	// Parent is the message before this one on its branch (0: none; nil:
	// Seq-1, as before branches).
	Parent       *int64
	Data         []byte       `gorm:"not null"`
	Conversation Conversation `gorm:"constraint:OnDelete:CASCADE"`
}

func (messageRow) TableName() string { return "messages" }

type eventRow struct {
	ConversationID string `gorm:"primaryKey"`
	Seq            int64  `gorm:"primaryKey;autoIncrement:false"`
	Type           string `gorm:"not null"`
	Turn           string
	Time           time.Time
	Data           []byte
	Conversation   Conversation `gorm:"constraint:OnDelete:CASCADE"`
}

func (eventRow) TableName() string { return "events" }

type approvalRow struct {
	ID             string `gorm:"primaryKey"`
	ConversationID string `gorm:"index;not null"`
	Status         string
	Data           []byte       `gorm:"not null"`
	Conversation   Conversation `gorm:"constraint:OnDelete:CASCADE"`
}

func (approvalRow) TableName() string { return "approvals" }

// Conversations stores conversations and implements agentcore.Store.
//
// It keeps the newest events of each active conversation in memory (the
// one cache: see eventCache), so that many subscribers following one
// conversation read new events without a query each. Only this process
// appends events to the database while it serves it.
type Conversations struct {
	db    *gorm.DB
	cache *eventCache
	// fills reads, once for the callers that want it at the same time,
	// the events another server announced (eventCache.fill).
	fills   singleflight.Group
	observe atomic.Pointer[func(agentcore.Event)]
	// origin tells this process's announcements (Listen) from other
	// servers'.
	origin string
	// node is the Home of the conversations this process creates, and
	// the only one whose turns Recover ends.
	node string
}

// SetNode makes node the Home of the conversations created from now on,
// and the one whose interrupted turns Recover ends: set it, before
// anything else, on a server that shares its database with others.
func (s *Conversations) SetNode(node string) { s.node = node }

// Claim makes node the Home of conversation id if it has none (one
// created before its database was shared), and returns its Home.
func (s *Conversations) Claim(ctx context.Context, id, node string) (string, error) {
	var home string
	err := s.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		if err := tx.Model(&Conversation{}).Where("id = ? AND home = ''", id).Update("home", node).Error; err != nil {
			return err
		}
		return tx.Model(&Conversation{}).Where("id = ?", id).Select("home").Scan(&home).Error
	})
	if err != nil {
		return "", fmt.Errorf("store: claiming conversation %s: %w", id, err)
	}
	return home, nil
}

// Observe calls f with each event once it is stored (for metrics); f
// must not block. Set it before the conversations are used.
func (s *Conversations) Observe(f func(agentcore.Event)) { s.observe.Store(&f) }

var _ agentcore.BranchStore = (*Conversations)(nil)

// NewConversations migrates the conversation tables of db.
func NewConversations(db *gorm.DB) (*Conversations, error) {
	if err := db.AutoMigrate(&Conversation{}, &messageRow{}, &eventRow{}, &approvalRow{}); err != nil {
		return nil, fmt.Errorf("store: migrating conversations: %w", err)
	}
	if err := audit.Migrate(db); err != nil {
		return nil, err
	}
	return &Conversations{db: db, cache: newEventCache(), origin: randid.New("proc_")}, nil
}

// maxTitle bounds a conversation's title, in bytes.
const maxTitle = 200

// ErrBadTitle is wrapped by Create's and Update's error for a title they
// refuse; the error's text says why, in terms of the title only.
var ErrBadTitle = errors.New("bad title")

// checkTitle returns title trimmed, or an error wrapping ErrBadTitle.
func checkTitle(title string) (string, error) {
	title = strings.TrimSpace(title)
	if len(title) > maxTitle {
		return "", fmt.Errorf("%w: title is %d bytes; the limit is %d", ErrBadTitle, len(title), maxTitle)
	}
	// One line of text as it is shown: a control character (NUL, an
	// escape sequence, a newline) or an invisible one (a bidi override,
	// a zero-width space) would reach every page and terminal that shows
	// it, or make two titles look alike.
	if !utf8.ValidString(title) || strings.ContainsFunc(title, hidden) {
		return "", fmt.Errorf("%w: title must be one line of UTF-8 text without control or invisible characters", ErrBadTitle)
	}
	return title, nil
}

func hidden(r rune) bool { return unicode.IsControl(r) || agentcore.Invisible(r) }

// Create starts a conversation of user; an empty title is proposed from
// its first message (see AppendMessages).
func (s *Conversations) Create(ctx context.Context, user, title string) (Conversation, error) {
	return s.CreateWith(ctx, user, New{Title: title}, nil)
}

// New is what a conversation starts with.
type New struct {
	Title        string
	Mode         string // "" or ModeHostReadOnly
	ModelProfile string
	// Repository and BaseCommit: see Conversation.
	Repository, BaseCommit string
}

// CreateWith creates user's conversation n and, in the same
// transaction, what also records with it (its setup row); also's error
// undoes both, and is returned.
func (s *Conversations) CreateWith(ctx context.Context, user string, n New, also func(tx *gorm.DB, c Conversation) error) (Conversation, error) {
	title, err := checkTitle(n.Title)
	if err != nil {
		return Conversation{}, err
	}
	now := time.Now().UTC()
	c := Conversation{ID: randid.New("conv_"), UserID: user, Title: title, Created: now, Updated: now,
		Mode: n.Mode, ModelProfile: n.ModelProfile, Repository: n.Repository, BaseCommit: n.BaseCommit, Home: s.node}
	err = s.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		if err := tx.Create(&c).Error; err != nil {
			return fmt.Errorf("store: creating a conversation: %w", err)
		}
		if also != nil {
			return also(tx, c)
		}
		return nil
	})
	if err != nil {
		return Conversation{}, err
	}
	return c, nil
}

// RepositoryCommits returns every (repository, base commit) pair that a
// conversation uses, each as name gives it (repos.SnapshotName: the
// name the snapshots' GC keeps).
func (s *Conversations) RepositoryCommits(ctx context.Context, name func(repository, commit string) string) (map[string]bool, error) {
	var rows []struct{ Repository, BaseCommit string }
	if err := s.db.WithContext(ctx).Model(&Conversation{}).Distinct("repository", "base_commit").Where("repository != ''").Find(&rows).Error; err != nil {
		return nil, fmt.Errorf("store: listing the conversations' repositories: %w", err)
	}
	m := make(map[string]bool, len(rows))
	for _, r := range rows {
		m[name(r.Repository, r.BaseCommit)] = true
	}
	return m, nil
}

// Get returns user's conversation id. Another user's conversation and an
// unknown ID are the same ErrNotFound, found by the same query.
func (s *Conversations) Get(ctx context.Context, user, id string) (Conversation, error) {
	var c Conversation
	err := s.db.WithContext(ctx).Where("id = ? AND user_id = ?", id, user).Take(&c).Error
	if errors.Is(err, gorm.ErrRecordNotFound) {
		return Conversation{}, ErrNotFound
	}
	if err != nil {
		return Conversation{}, fmt.Errorf("store: reading a conversation: %w", err)
	}
	return c, nil
}

// List returns user's conversations, the most recently updated first.
func (s *Conversations) List(ctx context.Context, user string, limit int) ([]Conversation, error) {
	var cs []Conversation
	if err := s.db.WithContext(ctx).Where("user_id = ?", user).Order("updated DESC, id").Limit(limit).Find(&cs).Error; err != nil {
		return nil, fmt.Errorf("store: listing conversations: %w", err)
	}
	return cs, nil
}

// Delete removes user's conversation with its messages, events and
// approvals.
func (s *Conversations) Delete(ctx context.Context, user, id string) error {
	res := s.db.WithContext(ctx).Where("id = ? AND user_id = ?", id, user).Delete(&Conversation{})
	if res.Error != nil {
		return fmt.Errorf("store: deleting a conversation: %w", res.Error)
	}
	if res.RowsAffected == 0 {
		return ErrNotFound
	}
	s.cache.drop(id)
	return nil
}

// Change is what Update changes of a conversation: each field not nil is
// its new value.
type Change struct {
	Title        *string
	ModelProfile *string
}

// Update changes user's conversation id and returns it. A title must
// not be empty (see checkTitle); once set, no proposal replaces it. The
// model profile does not change while a turn runs (the error wraps
// agentcore.ErrTurnInProgress): the condition is part of the change's
// statement, and a turn chooses its model only after its turn_started
// event set ActiveTurn, so the turn uses either the old profile and the
// change is refused, or the new one.
func (s *Conversations) Update(ctx context.Context, user, id string, ch Change) (Conversation, error) {
	upd := map[string]any{}
	if ch.Title != nil {
		title, err := checkTitle(*ch.Title)
		if err != nil {
			return Conversation{}, err
		}
		if title == "" {
			return Conversation{}, fmt.Errorf("%w: title is empty", ErrBadTitle)
		}
		upd["title"] = title
	}
	q := s.db.WithContext(ctx).Model(&Conversation{}).Where("id = ? AND user_id = ?", id, user)
	if ch.ModelProfile != nil {
		upd["model_profile"] = *ch.ModelProfile
		q = q.Where("(active_turn = '' OR model_profile = ?)", *ch.ModelProfile)
	}
	if len(upd) > 0 {
		res := q.Updates(upd)
		if res.Error != nil {
			return Conversation{}, fmt.Errorf("store: changing a conversation: %w", res.Error)
		}
		if res.RowsAffected == 0 {
			if _, err := s.Get(ctx, user, id); err != nil {
				return Conversation{}, err
			}
			return Conversation{}, fmt.Errorf("store: changing the model profile of conversation %s: %w", id, agentcore.ErrTurnInProgress)
		}
	}
	return s.Get(ctx, user, id)
}

// maxProposedTitle bounds a title proposed from a message, in bytes:
// short enough for a list of conversations.
const maxProposedTitle = 80

// proposeTitle is the title proposed from a conversation's first
// message: its first line that has text, without control or invisible
// characters (invalid UTF-8 too), spaces collapsed, cut on a word boundary to
// maxProposedTitle bytes ("" if nothing is left).
func proposeTitle(content string) string {
	var line string
	for l := range strings.Lines(content) {
		l = strings.Join(strings.Fields(strings.Map(func(r rune) rune {
			switch {
			case r == '\t':
				return ' '
			case hidden(r):
				return -1
			}
			return r
		}, l)), " ")
		if l != "" {
			line = l
			break
		}
	}
	if len(line) <= maxProposedTitle {
		return line
	}
	const ellipsis = "…"
	cut := line[:maxProposedTitle-len(ellipsis)+1]
	if i := strings.LastIndexByte(cut, ' '); i > len(cut)/2 {
		cut = cut[:i]
	} else {
		// A word longer than half the bound: cut inside it, on a rune.
		cut = cut[:len(cut)-1]
		for len(cut) > 0 && !utf8.ValidString(cut) {
			cut = cut[:len(cut)-1]
		}
	}
	return cut + ellipsis
}

// AppendMessages implements agentcore.Store: msgs continue the active
// branch.
func (s *Conversations) AppendMessages(ctx context.Context, conversation string, msgs ...agentcore.Message) error {
	if len(msgs) == 0 {
		return nil
	}
	return s.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		var last int64
		if err := tx.Model(&messageRow{}).Where("conversation_id = ?", conversation).Select("COALESCE(MAX(seq), 0)").Scan(&last).Error; err != nil {
			return err
		}
		var conv Conversation
		if err := tx.Select("head_seq").Where("id = ?", conversation).Take(&conv).Error; err != nil && !errors.Is(err, gorm.ErrRecordNotFound) {
			return err
		}
		parent := last
		if conv.HeadSeq != nil {
			parent = *conv.HeadSeq
		}
		rows := make([]messageRow, len(msgs))
		for i, m := range msgs {
			m.ID, m.Parent = "", "" // the row's columns say them
			b, err := json.Marshal(m)
			if err != nil {
				return err
			}
			p := parent
			rows[i] = messageRow{ConversationID: conversation, Seq: last + int64(i) + 1, Parent: &p, Data: b}
			parent = rows[i].Seq
		}
		if err := tx.Omit(clause.Associations).Create(&rows).Error; err != nil {
			return fmt.Errorf("store: appending messages: %w", err)
		}
		// The first user message names a conversation created without a
		// title; a title its owner set stays.
		for _, m := range msgs {
			if m.Role != agentcore.RoleUser {
				continue
			}
			if title := proposeTitle(m.Content); title != "" {
				if err := tx.Model(&Conversation{}).Where("id = ? AND title = ''", conversation).Update("title", title).Error; err != nil {
					return fmt.Errorf("store: proposing a title: %w", err)
				}
			}
			break
		}
		return tx.Model(&Conversation{}).Where("id = ?", conversation).Updates(map[string]any{"updated": time.Now().UTC(), "head_seq": parent}).Error
	})
}

// allMessages returns every message of the conversation in Seq order with
// ID and Parent set, and the active branch's last Seq.
func (s *Conversations) allMessages(tx *gorm.DB, conversation string) ([]agentcore.Message, []int64, int64, error) {
	var rows []messageRow
	if err := tx.Where("conversation_id = ?", conversation).Order("seq").Find(&rows).Error; err != nil {
		return nil, nil, 0, fmt.Errorf("store: reading messages: %w", err)
	}
	var conv Conversation
	if err := tx.Select("head_seq").Where("id = ?", conversation).Take(&conv).Error; err != nil && !errors.Is(err, gorm.ErrRecordNotFound) {
		return nil, nil, 0, fmt.Errorf("store: reading messages: %w", err)
	}
	msgs := make([]agentcore.Message, len(rows))
	parents := make([]int64, len(rows))
	for i, r := range rows {
		if err := json.Unmarshal(r.Data, &msgs[i]); err != nil {
			return nil, nil, 0, fmt.Errorf("store: message %d of %s: %w", r.Seq, conversation, err)
		}
		parents[i] = r.Seq - 1
		if r.Parent != nil {
			parents[i] = *r.Parent
		}
		msgs[i].ID = strconv.FormatInt(r.Seq, 10)
		if parents[i] > 0 {
			msgs[i].Parent = strconv.FormatInt(parents[i], 10)
		}
	}
	head := int64(0)
	if len(rows) > 0 {
		head = rows[len(rows)-1].Seq
	}
	if conv.HeadSeq != nil {
		head = *conv.HeadSeq
	}
	return msgs, parents, head, nil
}

// branch returns the messages of the branch that ends at head, oldest first.
func branch(msgs []agentcore.Message, parents []int64, head int64) []agentcore.Message {
	at := make(map[int64]int, len(msgs))
	for i, m := range msgs {
		seq, _ := strconv.ParseInt(m.ID, 10, 64)
		at[seq] = i
	}
	var out []agentcore.Message
	for seq := head; seq > 0 && len(out) < len(msgs); {
		i, ok := at[seq]
		if !ok {
			break
		}
		out = append(out, msgs[i])
		seq = parents[i]
	}
	slices.Reverse(out)
	return out
}

// Messages implements agentcore.Store: the active branch.
func (s *Conversations) Messages(ctx context.Context, conversation string) ([]agentcore.Message, error) {
	msgs, parents, head, err := s.allMessages(s.db.WithContext(ctx), conversation)
	if err != nil {
		return nil, err
	}
	return branch(msgs, parents, head), nil
}

// AllMessages implements agentcore.BranchStore.
func (s *Conversations) AllMessages(ctx context.Context, conversation string) ([]agentcore.Message, error) {
	msgs, _, _, err := s.allMessages(s.db.WithContext(ctx), conversation)
	return msgs, err
}

// Rewind implements agentcore.BranchStore.
func (s *Conversations) Rewind(ctx context.Context, conversation, id string) error {
	return s.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		msgs, parents, head, err := s.allMessages(tx, conversation)
		if err != nil {
			return err
		}
		for _, m := range branch(msgs, parents, head) {
			if m.ID != id {
				continue
			}
			parent, _ := strconv.ParseInt(m.Parent, 10, 64) // "" is 0: none
			return tx.Model(&Conversation{}).Where("id = ?", conversation).Update("head_seq", parent).Error
		}
		return fmt.Errorf("store: message %q is not in the active history of %s: %w", id, conversation, ErrNotFound)
	})
}

// turnEnds are the event types that end a turn.
var turnEnds = map[string]bool{
	agentcore.EventTurnFinished:  true,
	agentcore.EventTurnFailed:    true,
	agentcore.EventTurnCancelled: true,
}

// AppendEvent implements agentcore.Store. The conversation's LastSeq is
// the counter: incrementing it and inserting the event are one
// transaction, so concurrent appends never share or skip a number.
func (s *Conversations) AppendEvent(ctx context.Context, e agentcore.Event) (agentcore.Event, error) {
	if len(e.Data) == 0 {
		e.Data = json.RawMessage(`{}`)
	}
	// As the database keeps it, so that the cache and every server
	// serve the same event.
	e.Time = Time(e.Time)
	err := s.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		var c Conversation
		if err := tx.Select("last_seq").Where("id = ?", e.Conversation).Take(&c).Error; err != nil {
			if errors.Is(err, gorm.ErrRecordNotFound) {
				return fmt.Errorf("store: event for conversation %q: %w", e.Conversation, ErrNotFound)
			}
			return err
		}
		e.Seq = c.LastSeq + 1
		upd := map[string]any{"last_seq": e.Seq, "updated": time.Now().UTC()}
		switch {
		case e.Type == agentcore.EventTurnStarted:
			upd["active_turn"] = e.Turn
		case turnEnds[e.Type]:
			upd["active_turn"] = ""
		}
		if err := tx.Model(&Conversation{}).Where("id = ?", e.Conversation).Updates(upd).Error; err != nil {
			return err
		}
		if err := tx.Omit(clause.Associations).Create(&eventRow{ConversationID: e.Conversation, Seq: e.Seq, Type: e.Type, Turn: e.Turn, Time: e.Time, Data: e.Data}).Error; err != nil {
			return err
		}
		return s.announce(tx, e)
	})
	if err != nil {
		return agentcore.Event{}, fmt.Errorf("store: appending an event: %w", err)
	}
	s.cache.add(e)
	if f := s.observe.Load(); f != nil {
		(*f)(e)
	}
	return e, nil
}

// Events implements agentcore.Store.
func (s *Conversations) Events(ctx context.Context, conversation string, after int64, limit int) ([]agentcore.Event, error) {
	if evs, ok := s.cache.after(conversation, after, limit); ok {
		return evs, nil
	}
	if from, ok := s.cache.behind(conversation, after); ok {
		// Another server stored events that this one's subscribers,
		// woken together, all want: one read for all of them.
		s.fills.Do(conversation, func() (any, error) {
			evs, err := s.readEvents(ctx, conversation, from, cachePerConversation)
			if err == nil {
				s.cache.fill(conversation, from, evs)
			}
			return nil, err
		})
		if evs, ok := s.cache.after(conversation, after, limit); ok {
			return evs, nil
		}
	}
	return s.readEvents(ctx, conversation, after, limit)
}

// readEvents reads conversation's events with Seq > after from the
// database, at most limit.
func (s *Conversations) readEvents(ctx context.Context, conversation string, after int64, limit int) ([]agentcore.Event, error) {
	var rows []eventRow
	if err := s.db.WithContext(ctx).Where("conversation_id = ? AND seq > ?", conversation, after).Order("seq").Limit(limit).Find(&rows).Error; err != nil {
		return nil, fmt.Errorf("store: reading events: %w", err)
	}
	evs := make([]agentcore.Event, len(rows))
	for i, r := range rows {
		evs[i] = agentcore.Event{Seq: r.Seq, Type: r.Type, Conversation: r.ConversationID, Turn: r.Turn, Time: r.Time, Data: r.Data}
	}
	return evs, nil
}

// SaveApproval implements agentcore.Store. An approval no longer
// pending (decided, expired, withdrawn) is recorded in the audit log in
// the same transaction, with the exact command and working directory.
func (s *Conversations) SaveApproval(ctx context.Context, a agentcore.Approval) error {
	b, err := json.Marshal(a)
	if err != nil {
		return err
	}
	row := approvalRow{ID: a.ID, ConversationID: a.Conversation, Status: string(a.Status), Data: b}
	err = s.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		err := tx.Omit(clause.Associations).Clauses(clause.OnConflict{
			Columns:   []clause.Column{{Name: "id"}},
			DoUpdates: clause.AssignmentColumns([]string{"status", "data"}),
		}).Create(&row).Error
		if err != nil || a.Status == agentcore.ApprovalPending {
			return err
		}
		data := map[string]any{
			"id": a.ID, "conversation": a.Conversation, "tool": a.Tool, "command": a.Command, "cwd": a.Cwd, "background": a.Background,
			"status": a.Status, "decision": a.Decision, "decided_by": a.DecidedBy,
		}
		if a.Rule != "" {
			data["rule"] = a.Rule
		}
		_, err = audit.Append(tx, audit.Entry{Kind: audit.KindApproval, User: a.User, Data: data})
		return err
	})
	if err != nil {
		return fmt.Errorf("store: saving approval %s: %w", a.ID, err)
	}
	return nil
}

// Approval implements agentcore.Store.
func (s *Conversations) Approval(ctx context.Context, id string) (agentcore.Approval, error) {
	var row approvalRow
	err := s.db.WithContext(ctx).Where("id = ?", id).Take(&row).Error
	if errors.Is(err, gorm.ErrRecordNotFound) {
		return agentcore.Approval{}, fmt.Errorf("store: approval %q: %w", id, ErrNotFound)
	}
	if err != nil {
		return agentcore.Approval{}, fmt.Errorf("store: reading approval %q: %w", id, err)
	}
	return decodeApproval(row.Data)
}

// decodeApproval reads a stored approval. Rows written before
// command_shown was always set have it only when the command has
// invisible characters: for the others it is the command itself.
func decodeApproval(data []byte) (agentcore.Approval, error) {
	var a agentcore.Approval
	if err := json.Unmarshal(data, &a); err != nil {
		return a, fmt.Errorf("store: decoding an approval: %w", err)
	}
	if a.CommandShown == "" {
		a.CommandShown = a.Command
	}
	return a, nil
}

// Approvals implements agentcore.Store.
func (s *Conversations) Approvals(ctx context.Context, conversation string) ([]agentcore.Approval, error) {
	var rows []approvalRow
	if err := s.db.WithContext(ctx).Where("conversation_id = ?", conversation).Find(&rows).Error; err != nil {
		return nil, fmt.Errorf("store: reading approvals: %w", err)
	}
	as := make([]agentcore.Approval, len(rows))
	for i, r := range rows {
		a, err := decodeApproval(r.Data)
		if err != nil {
			return nil, err
		}
		as[i] = a
	}
	// In the order they were asked for; neither backend keeps an
	// insertion order of its own that the other shares.
	slices.SortFunc(as, func(a, b agentcore.Approval) int {
		return cmp.Or(a.Created.Compare(b.Created), strings.Compare(a.ID, b.ID))
	})
	return as, nil
}

// Recover ends what a server that stopped abruptly left running: each
// turn still active fails with reason, its tool calls without an answer
// get one (the model's history must answer every call), and its pending
// approvals are withdrawn. It returns the IDs of the conversations it
// touched. Call it before the engine starts.
func (s *Conversations) Recover(ctx context.Context, reason string) ([]string, error) {
	var cs []Conversation
	// Another server's turns are its own to end (they may be running);
	// those of conversations nobody has claimed ran nowhere since.
	q := s.db.WithContext(ctx).Where("active_turn <> ''")
	if s.node != "" {
		q = q.Where("home IN (?, '')", s.node)
	}
	if err := q.Find(&cs).Error; err != nil {
		return nil, fmt.Errorf("store: finding interrupted turns: %w", err)
	}
	var ids []string
	for _, c := range cs {
		if err := s.answerDangling(ctx, c.ID, reason); err != nil {
			return ids, err
		}
		as, err := s.Approvals(ctx, c.ID)
		if err != nil {
			return ids, err
		}
		now := time.Now().UTC()
		for _, a := range as {
			if a.Status != agentcore.ApprovalPending {
				continue
			}
			a.Status, a.DecidedBy, a.Decided = agentcore.ApprovalCancelled, "server", now
			if err := s.SaveApproval(ctx, a); err != nil {
				return ids, err
			}
			data, _ := json.Marshal(a)
			if _, err := s.AppendEvent(ctx, agentcore.Event{Type: agentcore.EventApprovalDecided, Conversation: c.ID, Turn: a.Turn, Time: now, Data: data}); err != nil {
				return ids, err
			}
		}
		data, _ := json.Marshal(agentcore.TurnFailed{Error: reason})
		if _, err := s.AppendEvent(ctx, agentcore.Event{Type: agentcore.EventTurnFailed, Conversation: c.ID, Turn: c.ActiveTurn, Time: now, Data: data}); err != nil {
			return ids, err
		}
		ids = append(ids, c.ID)
	}
	return ids, nil
}

// answerDangling answers the tool calls of the conversation's last
// assistant message that have no tool result.
func (s *Conversations) answerDangling(ctx context.Context, conversation, reason string) error {
	msgs, err := s.Messages(ctx, conversation)
	if err != nil {
		return err
	}
	last := -1
	for i := len(msgs) - 1; i >= 0; i-- {
		if msgs[i].Role == agentcore.RoleAssistant {
			last = i
			break
		}
	}
	if last < 0 {
		return nil
	}
	answered := map[string]bool{}
	for _, m := range msgs[last+1:] {
		if m.Role == agentcore.RoleTool {
			answered[m.ToolCallID] = true
		}
	}
	var answers []agentcore.Message
	for _, tc := range msgs[last].ToolCalls {
		if !answered[tc.ID] {
			answers = append(answers, agentcore.Message{Role: agentcore.RoleTool, ToolCallID: tc.ID, Content: "error: " + reason})
		}
	}
	return s.AppendMessages(ctx, conversation, answers...)
}

// Running counts the conversations at home on node with a turn running:
// the node's load, as new conversations are placed by it.
func (s *Conversations) Running(ctx context.Context, node string) (int, error) {
	var n int64
	if err := s.db.WithContext(ctx).Model(&Conversation{}).Where("home = ? AND active_turn <> ''", node).Count(&n).Error; err != nil {
		return 0, fmt.Errorf("store: counting running turns: %w", err)
	}
	return int(n), nil
}
