package postgres

import (
	"context"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"os"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// electInterval is how often a candidate tries for the role, and how often
// the holder checks that its connection (and so its lock) is still alive.
const electInterval = 2 * time.Second

// electTimeout bounds the holder's check, and a candidate's lock attempt:
// a holder whose connection does not answer within it cannot tell whether
// the server still holds its lock (a failover or a network cut may have
// ended its session, releasing the lock to another candidate, while its
// own end of the connection stays silent), so it steps down. It is
// shorter than electInterval, so that a holder cut off stops leading
// within about electInterval + electTimeout of its last answer, instead
// of when TCP gives up (~15 minutes on Linux).
const electTimeout = electInterval / 2

// electConnectTimeout bounds a candidate's connection attempt, in
// nanoseconds (atomic: tests shorten it).
var electConnectTimeout atomic.Int64

func init() { electConnectTimeout.Store(int64(10 * time.Second)) }

// electIdleTimeout is how long the server keeps an election session that
// sends nothing (idle_session_timeout, PostgreSQL 14 and later). A holder
// and a candidate query every electInterval at most, so only a session
// whose process stopped or whose network is partitioned idles this long.
// Without it, after a partition the server keeps the session, and the
// lock, until TCP keepalives give up (over two hours by default): the
// holder steps down, and no other candidate can take the lock. The TCP
// keepalives of the session are shortened too, for older servers.
const electIdleTimeout = 5 * electInterval

// electSessionSQL sets up an election session (see electIdleTimeout).
var electSessionSQL = fmt.Sprintf(`SELECT set_config('tcp_keepalives_idle', '5', false),
	set_config('tcp_keepalives_interval', '2', false), set_config('tcp_keepalives_count', '3', false),
	CASE WHEN current_setting('server_version_num')::int >= 140000
		THEN set_config('idle_session_timeout', '%d', false) END`, electIdleTimeout.Milliseconds())

// electConfig returns the configuration of an election connection.
func (s *Store) electConfig() *pgx.ConnConfig {
	cfg := s.pool.Config().ConnConfig.Copy()
	after := cfg.AfterConnect
	cfg.AfterConnect = func(ctx context.Context, c *pgconn.PgConn) error {
		if after != nil {
			if err := after(ctx, c); err != nil {
				return err
			}
		}
		return c.Exec(ctx, electSessionSQL).Close()
	}
	return cfg
}

// Elect implements store.Elector with a session-level advisory lock held
// on a dedicated connection: if the holder's process dies or its
// connection drops, PostgreSQL releases the lock and another candidate
// takes the role within electInterval. The holder checks its connection
// every electInterval or so and steps down when the check fails, does
// not answer within electTimeout, or is answered by another server
// session than the one that took the lock (a pooler in transaction mode):
// it cannot then tell whether it still holds the lock. The candidate that
// takes the lock marks the server session as its own (a session setting
// named for the role); a candidate that finds another's mark on its
// session, and a holder that finds its mark replaced, are sharing the
// session with another client through such a pooler (and would take the
// lock the session holds again), so they do not lead.
func (s *Store) Elect(ctx context.Context, role string) (func() bool, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	h := fnv.New64a()
	fmt.Fprintf(h, "redrive-elect:%s:%s", s.schema, role)
	key := int64(h.Sum64())
	// The session setting marking the session holding the lock, and this
	// candidate's mark.
	mark := fmt.Sprintf("redrive.elect_%016x", uint64(key))
	token := fmt.Sprintf("%d-%016x", os.Getpid(), rand.Uint64())
	var leading atomic.Bool
	go func() {
		defer leading.Store(false)
		ctx, cancel := context.WithCancel(ctx)
		defer cancel()
		stop := context.AfterFunc(s.done, cancel)
		defer stop()
		var conn *pgx.Conn
		var holder int32 // the server session (backend pid) holding the lock
		defer func() {
			if conn != nil {
				closeConn(conn) // releases the lock
			}
		}()
		for ctx.Err() == nil {
			if conn == nil {
				cctx, cancel := context.WithTimeout(ctx, time.Duration(electConnectTimeout.Load()))
				c, err := pgx.ConnectConfig(cctx, s.electConfig())
				cancel()
				if err != nil {
					s.log.Warn("postgres: elect: cannot connect", "role", role, "error", err)
				}
				conn = c
			}
			if conn != nil {
				qctx, cancel := context.WithTimeout(ctx, electTimeout)
				if leading.Load() {
					// The simple protocol: no statement prepared on one
					// server session is needed on another.
					var pid int32
					var marked string
					err := conn.QueryRow(qctx, `SELECT pg_backend_pid(), coalesce(current_setting($1, true), '')`,
						pgx.QueryExecModeSimpleProtocol, mark).Scan(&pid, &marked)
					if err == nil && (pid != holder || marked != token) {
						// Another server session answers on the same
						// connection, or another client used this one: a
						// pooler in transaction mode, which does not keep
						// the session holding the lock to one client.
						if pid != holder {
							err = fmt.Errorf("backend %d answers on the connection of backend %d, which took the lock", pid, holder)
						} else {
							err = fmt.Errorf("backend %d, which took the lock, was marked by another client (%q)", pid, marked)
						}
						s.log.Error("postgres: elect: the connection holding the role reached another server session, or another client reached its session (a pooler in transaction mode?); redrive needs a direct connection or session pooling; stepping down",
							"role", role, "error", err)
					} else if err != nil && ctx.Err() == nil {
						// No answer in time, or an error: the lock may be
						// gone with the session.
						s.log.Warn("postgres: elect: cannot confirm the connection holding the role, stepping down", "role", role, "error", err)
					}
					if err != nil {
						// Step down at once, and close the connection so
						// that the server releases the lock if it still
						// holds it.
						leading.Store(false)
						closeConn(conn)
						conn = nil
					}
				} else {
					// The lock is tried only on a session that no other
					// client marked, and marked when taken.
					var got string
					if err := conn.QueryRow(qctx, `SELECT CASE
							WHEN coalesce(current_setting($2, true), '') NOT IN ('', $3) THEN 'shared'
							WHEN pg_try_advisory_lock($1) THEN set_config($2, $3, false)
							ELSE '' END, pg_backend_pid()`, key, mark, token).Scan(&got, &holder); err != nil {
						if ctx.Err() == nil {
							s.log.Warn("postgres: elect: lock attempt failed", "role", role, "error", err)
						}
						// The attempt may have taken the lock without the
						// answer arriving: closing the session releases it.
						closeConn(conn)
						conn = nil
					} else if got == token {
						s.log.Info("postgres: elected", "role", role, "schema", s.schema)
						leading.Store(true)
					} else if got == "shared" {
						s.log.Error("postgres: elect: the server session of this connection holds the role for another client (a pooler in transaction mode?); redrive needs a direct connection or session pooling; not leading",
							"role", role, "backend", holder)
						closeConn(conn)
						conn = nil
					}
				}
				cancel()
			}
			if s.electRound != nil {
				s.electRound(role, leading.Load())
			}
			wait := electInterval/2 + rand.N(electInterval/2)
			t := time.NewTimer(wait)
			select {
			case <-ctx.Done():
				t.Stop()
			case <-t.C:
			}
		}
	}()
	return leading.Load, nil
}

// closeConn closes an election connection, waiting at most electTimeout
// for the server to hear of it.
func closeConn(conn *pgx.Conn) {
	ctx, cancel := context.WithTimeout(context.Background(), electTimeout)
	defer cancel()
	conn.Close(ctx)
}
