package postgres

import (
	"context"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
)

// electInterval is how often a candidate tries for the role, and how often
// the holder checks that its connection (and so its lock) is still alive.
const electInterval = 2 * time.Second

// Elect implements store.Elector with a session-level advisory lock held
// on a dedicated connection: if the holder's process dies or its
// connection drops, PostgreSQL releases the lock and another candidate
// takes the role within electInterval.
func (s *Store) Elect(ctx context.Context, role string) (func() bool, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	h := fnv.New64a()
	fmt.Fprintf(h, "redrive-elect:%s:%s", s.schema, role)
	key := int64(h.Sum64())
	var leading atomic.Bool
	go func() {
		defer leading.Store(false)
		ctx, cancel := context.WithCancel(ctx)
		defer cancel()
		stop := context.AfterFunc(s.done, cancel)
		defer stop()
		var conn *pgx.Conn
		defer func() {
			if conn != nil {
				conn.Close(context.Background()) // releases the lock
			}
		}()
		for ctx.Err() == nil {
			if conn == nil {
				c, err := pgx.ConnectConfig(ctx, s.pool.Config().ConnConfig.Copy())
				if err != nil {
					s.log.Warn("postgres: elect: cannot connect", "role", role, "error", err)
				}
				conn = c
			}
			if conn != nil {
				if leading.Load() {
					if err := conn.Ping(ctx); err != nil && ctx.Err() == nil {
						s.log.Warn("postgres: elect: lost the connection holding the role", "role", role, "error", err)
						leading.Store(false)
						conn.Close(context.Background())
						conn = nil
					}
				} else {
					var got bool
					if err := conn.QueryRow(ctx, `SELECT pg_try_advisory_lock($1)`, key).Scan(&got); err != nil {
						if ctx.Err() == nil {
							s.log.Warn("postgres: elect: lock attempt failed", "role", role, "error", err)
						}
						conn.Close(context.Background())
						conn = nil
					} else if got {
						s.log.Info("postgres: elected", "role", role, "schema", s.schema)
						leading.Store(true)
					}
				}
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
