package postgres_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net/url"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/redrivehq/redrive/store/postgres"
	"github.com/redrivehq/redrive/store/storetest"
)

// TestFairKeyOrderLinguistic runs the conformance subtest FairKeyOrder on
// a database of its own whose collation is linguistic (ICU en-US, which
// orders "a-b" "a_b" "ab" "aB" "B" "e" "é"): fair keys still go round in
// byte order, every key once a round, as on SQLite. The shared test
// database's collation (C.UTF-8) orders by code point, which is byte
// order, and would show nothing.
func TestFairKeyOrderLinguistic(t *testing.T) {
	base := dbURL(t)
	ctx := t.Context()
	conn, err := pgx.Connect(ctx, base)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	defer conn.Close(context.Background())
	var icu bool
	if err := conn.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_collation WHERE collname = 'en-US-x-icu')`).Scan(&icu); err != nil {
		t.Fatalf("look for ICU: %v", err)
	}
	if !icu {
		t.Skip("this PostgreSQL has no ICU collations")
	}
	b := make([]byte, 6)
	rand.Read(b)
	db := "redrive_collate_" + hex.EncodeToString(b)
	if _, err := conn.Exec(ctx, `CREATE DATABASE `+db+` TEMPLATE template0 ENCODING 'UTF8' LOCALE 'C.UTF-8' LOCALE_PROVIDER icu ICU_LOCALE 'en-US'`); err != nil {
		t.Fatalf("create database: %v", err)
	}
	t.Cleanup(func() {
		// A generous bound: dropping a database waits for a checkpoint,
		// slow on a loaded machine.
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		c, err := pgx.Connect(ctx, base)
		if err != nil {
			t.Errorf("drop database %s: %v", db, err)
			return
		}
		defer c.Close(ctx)
		if _, err := c.Exec(ctx, `DROP DATABASE IF EXISTS `+db+` WITH (FORCE)`); err != nil {
			t.Errorf("drop database %s: %v", db, err)
		}
	})
	u, err := url.Parse(base)
	if err != nil {
		t.Fatalf("parse %s: %v", base, err)
	}
	u.Path = "/" + db
	s, err := postgres.Open(ctx, u.String(), postgres.Options{Schema: "redrive", MaxConns: 4, Logger: quiet()})
	if err != nil {
		t.Fatalf("postgres.Open: %v", err)
	}
	defer s.Close()
	var order []string
	rows, err := s.Pool().Query(ctx, `SELECT k FROM unnest(ARRAY['B', 'ab', 'aB']) AS k ORDER BY k`)
	if err == nil {
		order, err = pgx.CollectRows(rows, pgx.RowTo[string])
	}
	if err != nil {
		t.Fatalf("read the database's order: %v", err)
	}
	if order[0] == "B" {
		t.Fatalf("the database orders text by bytes (%q): the test shows nothing", order)
	}
	storetest.FairKeyOrder(t, s)
}
