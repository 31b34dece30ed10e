package fencing_test

import (
	"context"
	"database/sql"

	"github.com/batonhq/baton/fencing"
)

// The check and the write share one database transaction, so a stale
// writer's write never commits. db is any database/sql handle on
// PostgreSQL (Postgres) or SQLite (SQLite); the library links no driver.
// (integration/fencing runs this against SQLite and PostgreSQL.)
func ExampleSQLGuard() {
	ctx := context.Background()
	var db *sql.DB // sql.Open("pgx", dsn), with the driver of your choice
	if db == nil {
		return
	}
	guard, _ := fencing.NewSQLGuard(fencing.Postgres)
	_ = guard.Migrate(ctx, db) // once: creates the table of high-water marks

	var token fencing.Token // the holder's: lock.Token()
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return
	}
	defer tx.Rollback()
	if err := guard.Admit(ctx, tx, "balances/acme", token); err != nil {
		return // errors.Is(err, fencing.ErrStale): a newer holder has written
	}
	_, _ = tx.ExecContext(ctx, "UPDATE balances SET cents = $1 WHERE account = 'acme'", 1000)
	_ = tx.Commit()
}
