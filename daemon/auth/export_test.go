package auth

import (
	"context"

	"gorm.io/gorm"
)

// Keys is how many user names and addresses l tracks.
func (l *Limiter) Keys() (users, ips int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.users), len(l.ips)
}

func (l *Limiter) AcquireCheck(ctx context.Context) error { return l.acquireCheck(ctx) }
func (l *Limiter) ReleaseCheck()                          { l.releaseCheck() }

// RecordRefusals writes the refused logins that are due (all if all).
func (l *Limiter) RecordRefusals(ctx context.Context, all bool) error {
	return l.recordRefusals(ctx, all)
}

// DB is the users' database.
func (us *Users) DB() *gorm.DB { return us.db }
