package auth

import "context"

// Keys is how many user names and addresses l tracks.
func (l *Limiter) Keys() (users, ips int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.users), len(l.ips)
}

func (l *Limiter) AcquireCheck(ctx context.Context) error { return l.acquireCheck(ctx) }
func (l *Limiter) ReleaseCheck()                          { l.releaseCheck() }
