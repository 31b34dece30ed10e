package fencing_test

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"path/filepath"

	"github.com/batonhq/baton/fencing"
)

// The SQL guard's example runs here, where the module may require a SQL
// driver (modernc.org/sqlite, registered by sql_test.go); the library's
// module requires none.

// The check and the write share one database transaction, so a stale
// writer's write never commits.
func ExampleSQLGuard() {
	ctx := context.Background()
	dir, _ := os.MkdirTemp("", "fence-example")
	defer os.RemoveAll(dir)
	db, _ := sql.Open("sqlite", "file:"+filepath.Join(dir, "app.db")+"?_txlock=immediate&_pragma=busy_timeout(5000)")
	defer db.Close()

	guard, _ := fencing.NewSQLGuard(fencing.SQLite)
	if err := guard.Migrate(ctx, db); err != nil {
		fmt.Println(err)
		return
	}
	_, _ = db.ExecContext(ctx, "CREATE TABLE balances (account TEXT PRIMARY KEY, cents BIGINT)")

	pay := func(token fencing.Token, cents int) error {
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		defer tx.Rollback()
		if err := guard.Admit(ctx, tx, "balances/acme", token); err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, "INSERT INTO balances VALUES ('acme', ?) ON CONFLICT (account) DO UPDATE SET cents = excluded.cents", cents); err != nil {
			return err
		}
		return tx.Commit()
	}
	fmt.Println(pay(42, 1000))
	fmt.Println(pay(41, 5)) // a paused former holder wakes up
	var cents int
	_ = db.QueryRowContext(ctx, "SELECT cents FROM balances WHERE account = 'acme'").Scan(&cents)
	fmt.Println("cents:", cents)
	// Output:
	// <nil>
	// fencing: stale token 41 for resource "balances/acme": highest admitted is 42
	// cents: 1000
}
