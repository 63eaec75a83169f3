package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"gorm.io/gorm"

	"github.com/codumentor/codumentor/daemon/approvalrule"
	"github.com/codumentor/codumentor/daemon/audit"
	"github.com/codumentor/codumentor/sandboxkit/randid"
)

// MaxUserRules bounds the approval rules one user keeps.
const MaxUserRules = 100

// ErrTooManyRules is AddRule's refusal beyond MaxUserRules.
var ErrTooManyRules = fmt.Errorf("store: a user keeps at most %d approval rules; delete one first", MaxUserRules)

// UserRule is an approval rule a user added for their own commands.
type UserRule struct {
	ID      string            `json:"id"`
	Rule    approvalrule.Rule `json:"rule"`
	Created time.Time         `json:"created"`
}

type userRuleRow struct {
	ID      string `gorm:"primaryKey"`
	UserID  string `gorm:"not null;index"`
	Data    []byte `gorm:"not null"`
	Created time.Time
}

func (userRuleRow) TableName() string { return "approval_rules" }

// ApprovalRules stores each user's approval rules.
type ApprovalRules struct{ db *gorm.DB }

// NewApprovalRules migrates the approval rule table of db.
func NewApprovalRules(db *gorm.DB) (*ApprovalRules, error) {
	if err := db.AutoMigrate(&userRuleRow{}); err != nil {
		return nil, fmt.Errorf("store: migrating approval rules: %w", err)
	}
	if err := audit.Migrate(db); err != nil {
		return nil, err
	}
	return &ApprovalRules{db: db}, nil
}

// Rules lists user's rules, oldest first.
func (s *ApprovalRules) Rules(ctx context.Context, user string) ([]UserRule, error) {
	var rows []userRuleRow
	if err := s.db.WithContext(ctx).Where("user_id = ?", user).Order("created, id").Find(&rows).Error; err != nil {
		return nil, fmt.Errorf("store: reading approval rules: %w", err)
	}
	out := make([]UserRule, 0, len(rows))
	for _, r := range rows {
		var rule approvalrule.Rule
		if err := json.Unmarshal(r.Data, &rule); err != nil {
			return nil, fmt.Errorf("store: approval rule %s: %w", r.ID, err)
		}
		out = append(out, UserRule{ID: r.ID, Rule: rule, Created: r.Created})
	}
	return out, nil
}

// AddRule stores r for user (the caller checked it is within what the
// operator allows) and records it in the audit log, from the client
// address source. The same rule twice is stored once: the existing one
// is returned.
func (s *ApprovalRules) AddRule(ctx context.Context, user, source string, r approvalrule.Rule) (UserRule, error) {
	b, err := json.Marshal(r)
	if err != nil {
		return UserRule{}, err
	}
	row := userRuleRow{ID: randid.New("rule_"), UserID: user, Data: b, Created: time.Now().UTC()}
	err = s.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		var have []userRuleRow
		if err := tx.Where("user_id = ?", user).Find(&have).Error; err != nil {
			return err
		}
		for _, h := range have {
			if string(h.Data) == string(b) {
				row = h
				return nil
			}
		}
		if len(have) >= MaxUserRules {
			return ErrTooManyRules
		}
		if err := tx.Create(&row).Error; err != nil {
			return err
		}
		_, err := audit.Append(tx, audit.Entry{Kind: audit.KindApprovalRule, User: user, Source: source, Data: map[string]string{"action": "add", "id": row.ID, "rule": r.String()}})
		return err
	})
	if errors.Is(err, ErrTooManyRules) {
		return UserRule{}, err
	}
	if err != nil {
		return UserRule{}, fmt.Errorf("store: adding an approval rule: %w", err)
	}
	return UserRule{ID: row.ID, Rule: r, Created: row.Created}, nil
}

// DeleteRule removes user's rule id, recorded as AddRule does; another
// user's or an unknown one is ErrNotFound.
func (s *ApprovalRules) DeleteRule(ctx context.Context, user, source, id string) error {
	return s.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		var row userRuleRow
		err := tx.Where("id = ? AND user_id = ?", id, user).Take(&row).Error
		if errors.Is(err, gorm.ErrRecordNotFound) {
			return ErrNotFound
		}
		if err != nil {
			return fmt.Errorf("store: deleting approval rule %s: %w", id, err)
		}
		var r approvalrule.Rule
		json.Unmarshal(row.Data, &r)
		if err := tx.Delete(&row).Error; err != nil {
			return fmt.Errorf("store: deleting approval rule %s: %w", id, err)
		}
		_, err = audit.Append(tx, audit.Entry{Kind: audit.KindApprovalRule, User: user, Source: source, Data: map[string]string{"action": "delete", "id": id, "rule": r.String()}})
		return err
	})
}
