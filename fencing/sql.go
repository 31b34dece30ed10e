package fencing

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"go.opentelemetry.io/otel/trace"

	"github.com/batonhq/baton/internal/telemetry"
)

// Dialect is the SQL flavour a SQLGuard speaks: its placeholders differ.
type Dialect int

// The supported dialects. Both need INSERT … ON CONFLICT … DO UPDATE …
// WHERE … RETURNING: PostgreSQL 9.5 or later, SQLite 3.35 or later.
const (
	// Postgres uses $1, $2 placeholders (drivers such as
	// github.com/jackc/pgx/v5/stdlib and github.com/lib/pq).
	Postgres Dialect = iota + 1
	// SQLite uses ? placeholders (drivers such as modernc.org/sqlite).
	SQLite
)

func (d Dialect) String() string {
	switch d {
	case Postgres:
		return "postgres"
	case SQLite:
		return "sqlite"
	}
	return fmt.Sprintf("Dialect(%d)", int(d))
}

// SQLGuard keeps high-water marks in a table of the database the resource
// lives in, and checks a token inside the caller's transaction, so that
// the check and the caller's write commit together or not at all.
//
// The table, created by Migration:
//
//	CREATE TABLE IF NOT EXISTS baton_fence (
//	    resource TEXT   PRIMARY KEY,
//	    token    BIGINT NOT NULL CHECK (token > 0)
//	);
//
// Admit runs one statement (PostgreSQL placeholders shown):
//
//	INSERT INTO baton_fence (resource, token) VALUES ($1, $2)
//	ON CONFLICT (resource) DO UPDATE SET token = excluded.token
//	WHERE baton_fence.token <= excluded.token
//	RETURNING token
//
// It returns a row when the token is admitted, and then holds the row's
// write lock until the transaction ends: a concurrent writer of the same
// resource waits for the commit, then sees the new mark and, if its token
// is lower, is rejected. No row means a higher token was admitted first.
type SQLGuard struct {
	dialect            Dialect
	table              string
	upsert, selectHigh string
	rej                rejecter
	tr                 trace.Tracer
}

// NewSQLGuard returns a guard for d. It takes WithTable, WithRegisterer,
// WithMetricLabelLimit, WithLogger and WithTracerProvider, and does not
// touch the database.
func NewSQLGuard(d Dialect, opts ...Option) (*SQLGuard, error) {
	const who = "NewSQLGuard"
	if d != Postgres && d != SQLite {
		return nil, fmt.Errorf("%w: %s: dialect %v: want Postgres or SQLite", ErrInvalid, who, d)
	}
	c, err := buildConfig(who, opts, false, true)
	if err != nil {
		return nil, err
	}
	rej, err := newRejecter(who, c)
	if err != nil {
		return nil, err
	}
	p1, p2 := "$1", "$2"
	if d == SQLite {
		p1, p2 = "?", "?"
	}
	t := c.table
	return &SQLGuard{
		dialect: d, table: t, rej: rej, tr: telemetry.Tracer(c.tp),
		upsert: "INSERT INTO " + t + " (resource, token) VALUES (" + p1 + ", " + p2 + ")" +
			" ON CONFLICT (resource) DO UPDATE SET token = excluded.token" +
			" WHERE " + t + ".token <= excluded.token RETURNING token",
		selectHigh: "SELECT token FROM " + t + " WHERE resource = " + p1,
	}, nil
}

// Table is the guard's table name.
func (g *SQLGuard) Table() string { return g.table }

// Migration is the SQL that creates the guard's table; it is idempotent,
// and the same for both dialects.
func (g *SQLGuard) Migration() string {
	return "CREATE TABLE IF NOT EXISTS " + g.table + " (\n" +
		"    resource TEXT   PRIMARY KEY,\n" +
		"    token    BIGINT NOT NULL CHECK (token > 0)\n" +
		")"
}

// Execer is what Migrate needs: a *sql.DB, *sql.Conn or *sql.Tx.
type Execer interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
}

// Migrate runs Migration. Run it once at deploy time, or at start-up: it
// is idempotent.
func (g *SQLGuard) Migrate(ctx context.Context, db Execer) error {
	if _, err := db.ExecContext(ctx, g.Migration()); err != nil {
		return fmt.Errorf("fencing: create table %s: %w", g.table, err)
	}
	return nil
}

// Admit admits t for resource inside tx, raising the mark when t is
// higher, and locks the resource's row until tx ends. Call it in the
// transaction that does the protected write, before the write, and
// commit only if it returns nil. A rejection wraps ErrStale
// (*StaleError), is counted and logged, and leaves the transaction usable
// for a rollback (PostgreSQL aborts it only on a database error).
//
// With SQLite, begin tx as a write transaction (modernc.org/sqlite:
// "_txlock=immediate" in the DSN), or concurrent transactions that read
// first may fail with SQLITE_BUSY; that error is safe, not a stale write.
//
// Inside a trace, the check is a span (docs/telemetry.md).
func (g *SQLGuard) Admit(ctx context.Context, tx *sql.Tx, resource string, t Token) error {
	ctx, f := startCheck(ctx, g.tr, telemetry.SpanAdmit, guardSQL, resource, t)
	err := g.admit(ctx, tx, resource, t)
	endCheck(f, err, t)
	return err
}

func (g *SQLGuard) admit(ctx context.Context, tx *sql.Tx, resource string, t Token) error {
	if t <= 0 {
		return malformed(resource, t)
	}
	var admitted int64
	err := tx.QueryRowContext(ctx, g.upsert, resource, int64(t)).Scan(&admitted)
	if err == nil {
		return nil
	}
	if !errors.Is(err, sql.ErrNoRows) {
		return fmt.Errorf("fencing: admit token %d for %q in %s: %w", t, resource, g.table, err)
	}
	high, err := g.Highest(ctx, tx, resource)
	if err != nil {
		return err
	}
	return g.rej.stale(resource, t, high)
}

// Querier is what Highest needs: a *sql.DB, *sql.Conn or *sql.Tx.
type Querier interface {
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// Highest reads the highest token admitted for resource, zero if none.
func (g *SQLGuard) Highest(ctx context.Context, q Querier, resource string) (Token, error) {
	var high int64
	err := q.QueryRowContext(ctx, g.selectHigh, resource).Scan(&high)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return 0, nil
	case err != nil:
		return 0, fmt.Errorf("fencing: read highest token of %q in %s: %w", resource, g.table, err)
	}
	return Token(high), nil
}
