package store

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/stdlib"
	"gorm.io/gorm"

	"github.com/codumentor/codumentor/agentcore"
)

// eventsChannel is the PostgreSQL notification channel on which every
// stored event is announced, for the servers that share the database.
const eventsChannel = "codumentor_events"

// announce notifies the other servers on a PostgreSQL database of e, in
// e's transaction: PostgreSQL delivers it at commit, in commit order, and
// never for a transaction rolled back. On SQLite there is no other
// server.
func (s *Conversations) announce(tx *gorm.DB, e agentcore.Event) error {
	if Backend(tx) != BackendPostgres {
		return nil
	}
	payload := s.origin + " " + strconv.FormatInt(e.Seq, 10) + " " + e.Conversation
	return tx.Exec("SELECT pg_notify(?, ?)", eventsChannel, payload).Error
}

// Listen follows the events other servers store in a shared PostgreSQL
// database until ctx ends: for each, it calls stored with the
// conversation, once this process reads the event too. When the
// notifications' connection is lost, announcements may be missed until
// it is back: then Listen forgets the events it keeps in memory and
// calls resync with the reason it was lost, for the caller to wake
// everyone who waits for events. On SQLite it returns at once: the
// database has one server.
func (s *Conversations) Listen(ctx context.Context, stored func(conversation string), resync func(lost error)) error {
	if Backend(s.db) != BackendPostgres {
		return nil
	}
	sqlDB, err := s.db.DB()
	if err != nil {
		return err
	}
	wait := 100 * time.Millisecond
	var lost error
	for ctx.Err() == nil {
		err := s.listenOnce(ctx, sqlDB, stored, func() {
			wait = 100 * time.Millisecond
			if lost != nil {
				s.cache.clear()
				resync(lost)
			}
		})
		if ctx.Err() != nil {
			break
		}
		lost = err
		select {
		case <-time.After(wait):
		case <-ctx.Done():
		}
		wait = min(2*wait, 5*time.Second)
	}
	return nil
}

// listenOnce holds one of the pool's connections, LISTENs on it and
// hands on what arrives until the connection fails or ctx ends; it
// calls listening once it listens.
func (s *Conversations) listenOnce(ctx context.Context, sqlDB *sql.DB, stored func(string), listening func()) error {
	conn, err := sqlDB.Conn(ctx)
	if err != nil {
		return err
	}
	defer func() {
		// A connection that LISTENed must not go back to the pool.
		conn.Raw(func(any) error { return driver.ErrBadConn })
		conn.Close()
	}()
	return conn.Raw(func(dc any) error {
		pc := dc.(*stdlib.Conn).Conn()
		if _, err := pc.Exec(ctx, "LISTEN "+eventsChannel); err != nil {
			return err
		}
		listening()
		for {
			n, err := pc.WaitForNotification(ctx)
			if err != nil {
				return err
			}
			origin, rest, _ := strings.Cut(n.Payload, " ")
			seqText, conversation, ok := strings.Cut(rest, " ")
			seq, err := strconv.ParseInt(seqText, 10, 64)
			if origin == s.origin || !ok || err != nil {
				continue
			}
			s.cache.stored(conversation, seq)
			stored(conversation)
		}
	})
}
