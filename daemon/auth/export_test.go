package auth

import (
	"context"

	"gorm.io/gorm"
)

// Keys is how many user names and addresses table login_attempts
// holds rows of.
func (l *Limiter) Keys() (users, ips int) {
	count := func(kind string) int {
		var n int64
		if err := l.db.Model(&loginAttempt{}).Where("kind = ?", kind).Distinct("key_value").Count(&n).Error; err != nil {
			panic(err)
		}
		return int(n)
	}
	return count(kindName), count(kindAddress)
}

func (l *Limiter) AcquireCheck(ctx context.Context) error { return l.acquireCheck(ctx) }
func (l *Limiter) ReleaseCheck()                          { l.releaseCheck() }

// RecordRefusals writes the refused logins that are due (all if all).
func (l *Limiter) RecordRefusals(ctx context.Context, all bool) error {
	return l.recordRefusals(ctx, all)
}

// DB is the users' database.
func (us *Users) DB() *gorm.DB { return us.db }

// Failures is how many failures of name table login_attempts holds.
func (l *Limiter) Failures(name string) int {
	var n int64
	if err := l.db.Model(&loginAttempt{}).Where("kind = ? AND key_value = ? AND NOT pending", kindName, name).Count(&n).Error; err != nil {
		panic(err)
	}
	return int(n)
}
