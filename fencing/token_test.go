package fencing_test

import (
	"errors"
	"strconv"
	"testing"

	"github.com/batonhq/baton/fencing"
)

func TestParseToken(t *testing.T) {
	tests := []struct {
		in   string
		want fencing.Token
		ok   bool
	}{
		{"1", 1, true},
		{"4217", 4217, true},
		{" 42\n", 42, true},
		{"9223372036854775807", 9223372036854775807, true},
		{"", 0, false},
		{"0", 0, false},
		{"-3", 0, false},
		{"+3", 0, false},
		{"3.0", 0, false},
		{"0x10", 0, false},
		{"9223372036854775808", 0, false},
		{"12abc", 0, false},
	}
	for _, tt := range tests {
		got, err := fencing.ParseToken(tt.in)
		if tt.ok {
			if err != nil || got != tt.want {
				t.Errorf("ParseToken(%q) = %d, %v; want %d", tt.in, got, err, tt.want)
			}
			continue
		}
		if !errors.Is(err, fencing.ErrMalformed) {
			t.Errorf("ParseToken(%q) = %d, %v; want ErrMalformed", tt.in, got, err)
		}
	}
	if s := fencing.Token(4217).String(); s != "4217" {
		t.Errorf("String() = %q", s)
	}
	if !fencing.Token(0).IsZero() || fencing.Token(1).IsZero() {
		t.Error("IsZero wrong")
	}
}

func FuzzParseToken(f *testing.F) {
	for _, s := range []string{"1", "0", "-1", "+1", " 7 ", "9223372036854775807", "1e3", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		tok, err := fencing.ParseToken(s)
		if err != nil {
			if !errors.Is(err, fencing.ErrMalformed) {
				t.Fatalf("ParseToken(%q) error %v does not wrap ErrMalformed", s, err)
			}
			return
		}
		if tok <= 0 {
			t.Fatalf("ParseToken(%q) = %d, want positive", s, tok)
		}
		back, err := fencing.ParseToken(tok.String())
		if err != nil || back != tok {
			t.Fatalf("round trip of %d: %d, %v", tok, back, err)
		}
		if n, _ := strconv.ParseInt(tok.String(), 10, 64); n != int64(tok) {
			t.Fatalf("String() = %q for %d", tok.String(), tok)
		}
	})
}
