package store

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync/atomic"
	"time"

	"gorm.io/gorm"
	"gorm.io/gorm/clause"

	"github.com/codumentor/codumentor/agentcore"
	"github.com/codumentor/codumentor/daemon/audit"
)

// usageRow is one model call's usage. It has no foreign key to its
// conversation: deleting a conversation keeps its accounting (a quota
// would otherwise be undone by deleting the conversations that used it).
type usageRow struct {
	ID               int64  `gorm:"primaryKey"`
	UserID           string `gorm:"not null;index:idx_model_usage_user_time,priority:1"`
	Day              string `gorm:"not null"`                                                  // YYYY-MM-DD, UTC
	Time             string `gorm:"not null;index;index:idx_model_usage_user_time,priority:2"` // usageTimeFormat, UTC
	ConversationID   string `gorm:"not null"`
	Turn             string `gorm:"not null"`
	Agent            string `gorm:"not null;default:''"`
	Model            string `gorm:"not null"`
	Endpoint         string `gorm:"not null"`
	PromptTokens     int64  `gorm:"not null"`
	CompletionTokens int64  `gorm:"not null"`
	// Reported: the endpoint reported the numbers; otherwise they are
	// the engine's estimate.
	Reported bool `gorm:"not null"`
}

func (usageRow) TableName() string { return "model_usage" }

// quotaRow is a user's own daily token quota, replacing the default.
type quotaRow struct {
	UserID      string `gorm:"primaryKey"`
	DailyTokens int64  `gorm:"not null"`
	Updated     time.Time
}

func (quotaRow) TableName() string { return "user_quotas" }

// usageDayRow is a user's tokens of one UTC day, kept with each record so
// that a quota check reads one row, however many calls the day had.
type usageDayRow struct {
	UserID string `gorm:"primaryKey"`
	Day    string `gorm:"primaryKey"`
	Tokens int64  `gorm:"not null"`
}

func (usageDayRow) TableName() string { return "user_usage_days" }

// usageTimeFormat has all nine digits of the nanoseconds, so that the
// text sorts as the time does and since= compares in SQL.
const usageTimeFormat = "2006-01-02T15:04:05.000000000Z"

// dayFormat is a usage row's Day.
const dayFormat = time.DateOnly

// Usage records what model calls use (agentcore.UsageRecorder's Record,
// through the daemon) and keeps the users' daily token quotas.
type Usage struct {
	db *gorm.DB
	// def is the daily token quota of users without their own
	// (quotas.daily_tokens); 0: none.
	def atomic.Int64
}

// NewUsage migrates the usage and quota tables of db.
func NewUsage(db *gorm.DB) (*Usage, error) {
	if err := db.AutoMigrate(&usageRow{}, &quotaRow{}, &usageDayRow{}); err != nil {
		return nil, fmt.Errorf("store: migrating usage: %w", err)
	}
	if err := audit.Migrate(db); err != nil {
		return nil, err
	}
	return &Usage{db: db}, nil
}

// SetDefaultQuota sets the daily token quota of users without their own;
// 0 is none.
func (u *Usage) SetDefaultQuota(tokens int64) { u.def.Store(tokens) }

// Record stores one model call's usage.
func (u *Usage) Record(ctx context.Context, r agentcore.UsageRecord) error {
	at := r.Time.UTC()
	if at.IsZero() {
		at = time.Now().UTC()
	}
	row := usageRow{
		UserID: r.User, Day: at.Format(dayFormat), Time: at.Format(usageTimeFormat),
		ConversationID: r.Conversation, Turn: r.Turn, Agent: r.Agent, Model: r.Model, Endpoint: r.Endpoint,
		PromptTokens: int64(max(r.PromptTokens, 0)), CompletionTokens: int64(max(r.CompletionTokens, 0)), Reported: r.Reported,
	}
	day := usageDayRow{UserID: row.UserID, Day: row.Day, Tokens: row.PromptTokens + row.CompletionTokens}
	err := u.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		if err := tx.Create(&row).Error; err != nil {
			return err
		}
		return tx.Clauses(clause.OnConflict{
			Columns:   []clause.Column{{Name: "user_id"}, {Name: "day"}},
			DoUpdates: clause.Assignments(map[string]any{"tokens": gorm.Expr("user_usage_days.tokens + ?", day.Tokens)}),
		}).Create(&day).Error
	})
	if err != nil {
		return fmt.Errorf("store: recording usage: %w", err)
	}
	return nil
}

// UsageRecord is one stored model call's usage.
type UsageRecord struct {
	User             string    `json:"user"`
	Conversation     string    `json:"conversation"`
	Turn             string    `json:"turn"`
	Agent            string    `json:"agent,omitempty"`
	Model            string    `json:"model"`
	Endpoint         string    `json:"endpoint"`
	PromptTokens     int64     `json:"prompt_tokens"`
	CompletionTokens int64     `json:"completion_tokens"`
	Reported         bool      `json:"reported"`
	Time             time.Time `json:"time"`
}

// UsageRecords returns user's stored usage records, oldest first (for
// codumentorctl and tests; the API answers totals).
func (u *Usage) UsageRecords(ctx context.Context, user string) ([]UsageRecord, error) {
	var rows []usageRow
	if err := u.db.WithContext(ctx).Where("user_id = ?", user).Order("id").Find(&rows).Error; err != nil {
		return nil, fmt.Errorf("store: reading usage: %w", err)
	}
	out := make([]UsageRecord, len(rows))
	for i, r := range rows {
		t, _ := time.Parse(usageTimeFormat, r.Time)
		out[i] = UsageRecord{User: r.UserID, Conversation: r.ConversationID, Turn: r.Turn, Agent: r.Agent, Model: r.Model, Endpoint: r.Endpoint,
			PromptTokens: r.PromptTokens, CompletionTokens: r.CompletionTokens, Reported: r.Reported, Time: t}
	}
	return out, nil
}

// Ways to group usage totals (UsageFilter.GroupBy).
const (
	GroupByModel = "model"
	GroupByDay   = "day"
	GroupByUser  = "user"
)

// UsageFilter selects and groups usage records.
type UsageFilter struct {
	// User selects one user's records (an ID); empty: everyone's.
	User string
	// Since selects the records of calls that ended at or after it.
	Since time.Time
	// GroupBy is GroupByModel, GroupByDay or GroupByUser.
	GroupBy string
}

// UsageTotals are the sums over some model calls.
type UsageTotals struct {
	Calls            int64 `json:"calls"`
	PromptTokens     int64 `json:"prompt_tokens"`
	CompletionTokens int64 `json:"completion_tokens"`
	TotalTokens      int64 `json:"total_tokens"`
	// Estimated is how many of the calls have estimated numbers.
	Estimated int64 `json:"estimated"`
}

// UsageGroup is the totals of one model, day (YYYY-MM-DD, UTC) or user
// (an ID).
type UsageGroup struct {
	Key string `json:"key"`
	UsageTotals
}

// Totals sums the records f selects by f.GroupBy, ordered by key.
func (u *Usage) Totals(ctx context.Context, f UsageFilter) ([]UsageGroup, error) {
	col := map[string]string{GroupByModel: "model", GroupByDay: "day", GroupByUser: "user_id"}[f.GroupBy]
	if col == "" {
		return nil, fmt.Errorf("store: usage cannot be grouped by %q", f.GroupBy)
	}
	q := u.db.WithContext(ctx).Model(&usageRow{}).
		Select(col + " AS grp, COUNT(*) AS calls, SUM(prompt_tokens) AS prompt_tokens, SUM(completion_tokens) AS completion_tokens, " +
			"SUM(CASE WHEN reported THEN 0 ELSE 1 END) AS estimated").
		Group(col).Order(col)
	if f.User != "" {
		q = q.Where("user_id = ?", f.User)
	}
	if !f.Since.IsZero() {
		q = q.Where("time >= ?", f.Since.UTC().Format(usageTimeFormat))
	}
	var rows []struct {
		Grp                                              string
		Calls, PromptTokens, CompletionTokens, Estimated int64
	}
	if err := q.Scan(&rows).Error; err != nil {
		return nil, fmt.Errorf("store: summing usage: %w", err)
	}
	out := make([]UsageGroup, len(rows))
	for i, r := range rows {
		out[i] = UsageGroup{Key: r.Grp, UsageTotals: UsageTotals{Calls: r.Calls, PromptTokens: r.PromptTokens, CompletionTokens: r.CompletionTokens,
			TotalTokens: r.PromptTokens + r.CompletionTokens, Estimated: r.Estimated}}
	}
	return out, nil
}

// Quota is a user's daily token quota and what they used of it today.
type Quota struct {
	// DailyTokens is the quota: prompt and completion tokens, reported
	// or estimated, per UTC day; 0 is none.
	DailyTokens int64 `json:"daily_tokens"`
	// Source is "user" (the user's own, set by an admin) or "default"
	// (quotas.daily_tokens).
	Source string `json:"source"`
	// UsedToday is the tokens of the user's calls since Day began.
	UsedToday int64 `json:"used_today"`
	// Day is today (UTC), Resets when it ends: the next midnight UTC.
	Day    string    `json:"day"`
	Resets time.Time `json:"resets"`
}

// Quota sources.
const (
	QuotaDefault = "default"
	QuotaUser    = "user"
)

// QuotaError refuses a user past their daily token quota; it wraps
// agentcore.ErrQuotaExceeded.
type QuotaError struct{ Quota Quota }

func (e *QuotaError) Error() string {
	return fmt.Sprintf("the daily token quota is used up: %d of %d tokens used today (UTC); it resets at %s", e.Quota.UsedToday, e.Quota.DailyTokens, e.Quota.Resets.Format(time.RFC3339))
}

func (e *QuotaError) Unwrap() error { return agentcore.ErrQuotaExceeded }

// Quota returns user's quota and what they used of it on now's day.
func (u *Usage) Quota(ctx context.Context, user string, now time.Time) (Quota, error) {
	return u.quota(ctx, user, now, true)
}

// quota is Quota; without used, UsedToday is read only if there is a
// quota.
func (u *Usage) quota(ctx context.Context, user string, now time.Time, used bool) (Quota, error) {
	now = now.UTC()
	day := now.Truncate(24 * time.Hour)
	q := Quota{DailyTokens: u.def.Load(), Source: QuotaDefault, Day: day.Format(dayFormat), Resets: day.Add(24 * time.Hour)}
	var row quotaRow
	err := u.db.WithContext(ctx).Where("user_id = ?", user).Take(&row).Error
	switch {
	case err == nil:
		q.DailyTokens, q.Source = row.DailyTokens, QuotaUser
	case !errors.Is(err, gorm.ErrRecordNotFound):
		return Quota{}, fmt.Errorf("store: reading a quota: %w", err)
	}
	if !used && q.DailyTokens == 0 {
		return q, nil
	}
	var today usageDayRow
	err = u.db.WithContext(ctx).Where("user_id = ? AND day = ?", user, q.Day).Take(&today).Error
	if err != nil && !errors.Is(err, gorm.ErrRecordNotFound) {
		return Quota{}, fmt.Errorf("store: reading today's usage: %w", err)
	}
	q.UsedToday = today.Tokens
	return q, nil
}

// Allow returns a *QuotaError if user has used up their daily quota by
// now, nil if they have not or have none. Without a quota it reads only
// the user's own quota row.
func (u *Usage) Allow(ctx context.Context, user string, now time.Time) error {
	q, err := u.quota(ctx, user, now, false)
	if err != nil {
		return err
	}
	if q.DailyTokens > 0 && q.UsedToday >= q.DailyTokens {
		return &QuotaError{Quota: q}
	}
	return nil
}

// ErrBadQuota is wrapped by SetQuota's error for a negative quota.
var ErrBadQuota = errors.New("bad quota")

// SetQuota sets user's own daily token quota (0: none, whatever the
// default), or with nil removes it (the default applies again), and
// records who did it (by: a user ID or auth.CommandLine) in the audit
// log, in one transaction. The caller checks that user exists.
func (u *Usage) SetQuota(ctx context.Context, by, user string, dailyTokens *int64) error {
	if dailyTokens != nil && (*dailyTokens < 0 || *dailyTokens > math.MaxInt64/2) {
		return fmt.Errorf("%w: daily_tokens must be 0 (no quota) or a positive number of tokens, not %d", ErrBadQuota, *dailyTokens)
	}
	data := map[string]any{"action": "user_quota", "user": user, "daily_tokens": dailyTokens}
	return u.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		var err error
		if dailyTokens == nil {
			err = tx.Where("user_id = ?", user).Delete(&quotaRow{}).Error
		} else {
			err = tx.Clauses(clause.OnConflict{Columns: []clause.Column{{Name: "user_id"}}, DoUpdates: clause.AssignmentColumns([]string{"daily_tokens", "updated"})}).
				Create(&quotaRow{UserID: user, DailyTokens: *dailyTokens, Updated: time.Now().UTC()}).Error
		}
		if err != nil {
			return fmt.Errorf("store: setting a quota: %w", err)
		}
		_, err = audit.Append(tx, audit.Entry{Kind: audit.KindAdmin, User: by, Data: data})
		return err
	})
}
