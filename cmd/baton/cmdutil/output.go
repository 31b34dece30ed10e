package cmdutil

import (
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
)

// WriteJSON writes v as one indented JSON document, every format
// character escaped (escapeJSON).
func WriteJSON(w io.Writer, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	_, err = w.Write(append(EscapeJSON(b), '\n'))
	return err
}

// WriteJSONLine writes v as one JSON object on one line, for streams.
func WriteJSONLine(w io.Writer, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	_, err = w.Write(append(EscapeJSON(b), '\n'))
	return err
}

// table writes aligned columns.
type table struct{ tw *tabwriter.Writer }

func NewTable(w io.Writer, header ...string) *table {
	t := &table{tw: tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)}
	t.Row(header...)
	return t
}

func (t *table) Row(cells ...string) { fmt.Fprintln(t.tw, strings.Join(cells, "\t")) }

func (t *table) Flush() error { return t.tw.Flush() }

// LeaseHex is a lease ID as etcd's tools print it.
func LeaseHex(id int64) string { return strconv.FormatInt(id, 16) }

// TTLText is a lease's time left: "expired" once the lease is gone.
func TTLText(d time.Duration) string {
	if d < 0 {
		return "expired"
	}
	return d.String()
}

// TTLSeconds is a TTL for JSON: seconds, -1 once the lease is gone.
func TTLSeconds(d time.Duration) int64 {
	if d < 0 {
		return -1
	}
	return int64(d / time.Second)
}

// AgeText is how long ago t was, rounded for people; "unknown" for the
// zero time (no acquisition record).
func AgeText(now, t time.Time) string {
	if t.IsZero() {
		return "unknown"
	}
	d := now.Sub(t)
	if d < 0 {
		d = 0 // clocks of two hosts
	}
	switch {
	case d < time.Minute:
		return d.Round(100 * time.Millisecond).String()
	case d < time.Hour:
		return d.Round(time.Second).String()
	default:
		return d.Round(time.Minute).String()
	}
}

// Since is a time for JSON: nil when unknown.
func Since(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	u := t.UTC()
	return &u
}

// SinceSeconds is an age for JSON: nil when unknown.
func SinceSeconds(now, t time.Time) *float64 {
	if t.IsZero() {
		return nil
	}
	s := max(now.Sub(t), 0).Seconds()
	s = float64(int64(s*10)) / 10
	return &s
}

// Dash shows an empty cell.
func Dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
