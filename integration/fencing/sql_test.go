package fencing_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // registers the "pgx" driver
	"github.com/prometheus/client_golang/prometheus"
	_ "modernc.org/sqlite" // registers the "sqlite" driver

	"github.com/batonhq/baton/fencing"
)

// postgresDSNEnv names the variable holding a PostgreSQL DSN for the SQL
// guard's tests; .ci/postgres.sh starts a server and prints it.
const postgresDSNEnv = "BATON_TEST_POSTGRES_DSN"

// sqlBackend is a database to run the SQL guard's tests against.
type sqlBackend struct {
	name    string
	dialect fencing.Dialect
	open    func(t *testing.T) *sql.DB
}

func sqlBackends() []sqlBackend {
	return []sqlBackend{
		{"sqlite", fencing.SQLite, openSQLite},
		{"postgres", fencing.Postgres, openPostgres},
	}
}

// openSQLite opens a new SQLite file. Transactions begin as writers
// (_txlock=immediate) and wait up to 10 s for each other (busy_timeout),
// as the SQLGuard's docs ask.
func openSQLite(t *testing.T) *sql.DB {
	t.Helper()
	path := filepath.Join(t.TempDir(), "fence.db")
	db, err := sql.Open("sqlite", "file:"+path+"?_txlock=immediate&_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	return db
}

func openPostgres(t *testing.T) *sql.DB {
	t.Helper()
	dsn := os.Getenv(postgresDSNEnv)
	if dsn == "" {
		t.Skipf("%s is not set: run `eval \"$(bash .ci/postgres.sh)\"` to start a PostgreSQL server on 127.0.0.1", postgresDSNEnv)
	}
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	ctx := ctxTimeout(t, 10*time.Second)
	if err := db.PingContext(ctx); err != nil {
		t.Fatalf("%s is set but the server does not answer: %v", postgresDSNEnv, err)
	}
	return db
}

// newSQLGuard returns a guard on a fresh table of db, migrated, and drops
// the table at the end.
func newSQLGuard(t *testing.T, b sqlBackend, db *sql.DB, opts ...fencing.Option) *fencing.SQLGuard {
	t.Helper()
	table := fmt.Sprintf("fence_%x", rand.Uint32())
	g, err := fencing.NewSQLGuard(b.dialect, append([]fencing.Option{fencing.WithTable(table)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	ctx := ctxTimeout(t, 10*time.Second)
	for range 2 { // the migration is idempotent
		if err := g.Migrate(ctx, db); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() { _, _ = db.ExecContext(context.Background(), "DROP TABLE "+table) })
	return g
}

// admitTx runs Admit in a transaction of its own and commits on success.
func admitTx(ctx context.Context, db *sql.DB, g *fencing.SQLGuard, resource string, tok fencing.Token) error {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	if err := g.Admit(ctx, tx, resource, tok); err != nil {
		_ = tx.Rollback()
		return err
	}
	return tx.Commit()
}

func TestSQLGuardAdmitsEqualAndHigherRejectsLower(t *testing.T) {
	for _, b := range sqlBackends() {
		t.Run(b.name, func(t *testing.T) {
			db := b.open(t)
			reg := prometheus.NewRegistry()
			g := newSQLGuard(t, b, db, fencing.WithRegisterer(reg))
			ctx := ctxTimeout(t, 20*time.Second)
			steps := []struct {
				token   fencing.Token
				stale   bool
				highest fencing.Token
			}{
				{10, false, 10}, {10, false, 10}, {12, false, 12}, {11, true, 12}, {1, true, 12}, {1 << 40, false, 1 << 40},
			}
			for i, s := range steps {
				err := admitTx(ctx, db, g, "ledger", s.token)
				var se *fencing.StaleError
				switch {
				case s.stale && (!errors.As(err, &se) || se.Highest != s.highest || se.Token != s.token || se.Resource != "ledger"):
					t.Fatalf("step %d: Admit(%d) = %v, want stale with highest %d", i, s.token, err, s.highest)
				case !s.stale && err != nil:
					t.Fatalf("step %d: Admit(%d) = %v", i, s.token, err)
				}
				if h, err := g.Highest(ctx, db, "ledger"); err != nil || h != s.highest {
					t.Fatalf("step %d: Highest = %d, %v; want %d", i, h, err, s.highest)
				}
			}
			if h, err := g.Highest(ctx, db, "never-written"); err != nil || h != 0 {
				t.Fatalf("Highest of an unknown resource = %d, %v; want 0", h, err)
			}
			tx, err := db.BeginTx(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer tx.Rollback()
			if err := g.Admit(ctx, tx, "ledger", 0); !errors.Is(err, fencing.ErrMalformed) {
				t.Fatalf("Admit(0) = %v, want ErrMalformed", err)
			}
			wantRejections(t, reg, "ledger", 2)
		})
	}
}

// TestSQLGuardStaleWriteNeverCommits: writers with rising tokens and a
// stale writer write rows to a ledger, each in one transaction with the
// guard's check. In commit order (the ledger's serial id, given while the
// resource's row is locked) the tokens never go down, and no row of a
// rejected writer exists.
func TestSQLGuardStaleWriteNeverCommits(t *testing.T) {
	for _, b := range sqlBackends() {
		t.Run(b.name, func(t *testing.T) {
			db := b.open(t)
			g := newSQLGuard(t, b, db)
			ctx := ctxTimeout(t, 60*time.Second)
			ledger := g.Table() + "_ledger"
			create := "CREATE TABLE " + ledger + " (id INTEGER PRIMARY KEY AUTOINCREMENT, token BIGINT NOT NULL, writer TEXT NOT NULL)"
			insert := "INSERT INTO " + ledger + " (token, writer) VALUES (?, ?)"
			if b.dialect == fencing.Postgres {
				create = "CREATE TABLE " + ledger + " (id BIGSERIAL PRIMARY KEY, token BIGINT NOT NULL, writer TEXT NOT NULL)"
				insert = "INSERT INTO " + ledger + " (token, writer) VALUES ($1, $2)"
			}
			if _, err := db.ExecContext(ctx, create); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _, _ = db.ExecContext(context.Background(), "DROP TABLE "+ledger) })

			write := func(tok fencing.Token, writer string) error {
				tx, err := db.BeginTx(ctx, nil)
				if err != nil {
					return err
				}
				defer tx.Rollback()
				if err := g.Admit(ctx, tx, "account-7", tok); err != nil {
					return err
				}
				if _, err := tx.ExecContext(ctx, insert, int64(tok), writer); err != nil {
					return err
				}
				return tx.Commit()
			}

			// A stale writer blocked behind a newer one's open transaction.
			newer, err := db.BeginTx(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			if err := g.Admit(ctx, newer, "account-7", 100); err != nil {
				t.Fatal(err)
			}
			// The stale writer waits: on PostgreSQL for the row lock the
			// newer one's Admit holds, on SQLite at BEGIN for the database's
			// write lock. Either way it must be rejected once it proceeds.
			staleStarted := make(chan struct{})
			staleDone := make(chan error, 1)
			go func() { close(staleStarted); staleDone <- write(50, "stale-blocked") }()
			<-staleStarted
			if _, err := newer.ExecContext(ctx, insert, 100, "newer"); err != nil {
				t.Fatal(err)
			}
			if err := newer.Commit(); err != nil {
				t.Fatal(err)
			}
			if err := <-staleDone; !errors.Is(err, fencing.ErrStale) {
				t.Fatalf("stale writer behind a newer one: %v, want ErrStale", err)
			}

			// Concurrent writers with interleaved rising tokens and
			// occasional stale ones.
			const writers, perWriter = 4, 15
			var wg sync.WaitGroup
			errc := make(chan error, writers)
			var mu sync.Mutex
			rejected := map[string]bool{}
			for w := range writers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := range perWriter {
						tok := fencing.Token(200 + i*writers + w)
						if rand.IntN(4) == 0 {
							tok -= fencing.Token(1 + rand.IntN(3*writers))
						}
						id := fmt.Sprintf("w%d-%d", w, i)
						err := write(tok, id)
						switch {
						case err == nil:
						case errors.Is(err, fencing.ErrStale):
							mu.Lock()
							rejected[id] = true
							mu.Unlock()
						default:
							errc <- fmt.Errorf("writer %s token %d: %w", id, tok, err)
							return
						}
					}
				}()
			}
			wg.Wait()
			close(errc)
			for err := range errc {
				t.Fatal(err)
			}
			// The stale writer, late and alone.
			if err := write(150, "stale-late"); !errors.Is(err, fencing.ErrStale) {
				t.Fatalf("late stale writer: %v, want ErrStale", err)
			}

			rows, err := db.QueryContext(ctx, "SELECT token, writer FROM "+ledger+" ORDER BY id")
			if err != nil {
				t.Fatal(err)
			}
			defer rows.Close()
			var prev int64
			n := 0
			for rows.Next() {
				var tok int64
				var writer string
				if err := rows.Scan(&tok, &writer); err != nil {
					t.Fatal(err)
				}
				if tok < prev {
					t.Fatalf("row %d: token %d committed after token %d", n, tok, prev)
				}
				if rejected[writer] || writer == "stale-blocked" || writer == "stale-late" {
					t.Fatalf("row %d: rejected writer %s committed", n, writer)
				}
				prev = tok
				n++
			}
			if err := rows.Err(); err != nil {
				t.Fatal(err)
			}
			if n < 2 || len(rejected) == 0 {
				t.Fatalf("%d rows, %d rejections: the test exercised nothing", n, len(rejected))
			}
			if h, _ := g.Highest(ctx, db, "account-7"); int64(h) != prev {
				t.Fatalf("Highest = %d, want the last committed token %d", h, prev)
			}
			t.Logf("%d rows committed, %d stale writers rejected", n, len(rejected))
		})
	}
}
