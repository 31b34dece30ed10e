package apicheck

import (
	"strings"
	"testing"
)

// fixtureAPI is what Features must print for testdata/fixture, in Go's api
// format: package shapes has one feature of each kind (constants of each
// untyped kind, methods on value and pointer receivers, promoted methods,
// generics, interfaces with and without unexported methods, a constraint,
// aliases, deprecations), package other qualifies shapes' types, and the
// module's internal, examples and main packages are left out.
const fixtureAPI = `
pkg example.com/fixture/other, func Use(shapes.Point, *shapes.Set[string, int]) shapes.Kind
pkg example.com/fixture/other, method (Holder) Peek(int) ([]uint8, error)
pkg example.com/fixture/other, method (Holder) Read([]uint8) (int, error)
pkg example.com/fixture/other, type Holder struct
pkg example.com/fixture/other, type Holder struct, P *shapes.Point
pkg example.com/fixture/other, type Holder struct, embedded shapes.Reader
pkg example.com/fixture/shapes, const Big = 1099511627776
pkg example.com/fixture/shapes, const Big ideal-int
pkg example.com/fixture/shapes, const Circle = 0
pkg example.com/fixture/shapes, const Circle Kind
pkg example.com/fixture/shapes, const Letter = 120
pkg example.com/fixture/shapes, const Letter ideal-char
pkg example.com/fixture/shapes, const Name = "shapes"
pkg example.com/fixture/shapes, const Name ideal-string
pkg example.com/fixture/shapes, const Pi = 3.14159  // 314159/100000
pkg example.com/fixture/shapes, const Pi ideal-float
pkg example.com/fixture/shapes, const Square = 1
pkg example.com/fixture/shapes, const Square Kind
pkg example.com/fixture/shapes, const Third = 0.333333  // 1/3
pkg example.com/fixture/shapes, const Third ideal-float
pkg example.com/fixture/shapes, const Timeout = 2000000000
pkg example.com/fixture/shapes, const Timeout time.Duration
pkg example.com/fixture/shapes, const Yes = true
pkg example.com/fixture/shapes, const Yes ideal-bool
pkg example.com/fixture/shapes, func Map[$0 interface{}, $1 interface{}]([]$0, func($0) $1) []$1
pkg example.com/fixture/shapes, func New(...Option) (*Shape, error)
pkg example.com/fixture/shapes, func Old //deprecated
pkg example.com/fixture/shapes, func Old()
pkg example.com/fixture/shapes, func Sum[$0 interface{ ~[]$1 }, $1 Number]($0) $1
pkg example.com/fixture/shapes, method (*Point) Scale(float64)
pkg example.com/fixture/shapes, method (*Set[$0, $1]) Put($0, $1)
pkg example.com/fixture/shapes, method (*Shape) Scale(float64)
pkg example.com/fixture/shapes, method (Point) Norm() float64
pkg example.com/fixture/shapes, method (Set[$0, $1]) Get($0) ($1, bool)
pkg example.com/fixture/shapes, method (Shape) Area() float64
pkg example.com/fixture/shapes, method (Shape) Norm() float64
pkg example.com/fixture/shapes, method (Shape) Outer() (io.ReaderAt, int64, int64)
pkg example.com/fixture/shapes, method (Shape) Read([]uint8) (int, error)
pkg example.com/fixture/shapes, method (Shape) ReadAt([]uint8, int64) (int, error)
pkg example.com/fixture/shapes, method (Shape) Seek(int64, int) (int64, error)
pkg example.com/fixture/shapes, method (Shape) Size() int64
pkg example.com/fixture/shapes, type Alias = Point
pkg example.com/fixture/shapes, type Empty interface {}
pkg example.com/fixture/shapes, type Func func(int) error
pkg example.com/fixture/shapes, type IDs []uint64
pkg example.com/fixture/shapes, type Kind int
pkg example.com/fixture/shapes, type Number interface { ~int | ~int64 | float64 }
pkg example.com/fixture/shapes, type Option func(*Shape)
pkg example.com/fixture/shapes, type Point struct
pkg example.com/fixture/shapes, type Point struct, Ch <-chan struct
pkg example.com/fixture/shapes, type Point struct, Note //deprecated
pkg example.com/fixture/shapes, type Point struct, Note string
pkg example.com/fixture/shapes, type Point struct, Runes [4]int32
pkg example.com/fixture/shapes, type Point struct, Tags map[string][]uint8
pkg example.com/fixture/shapes, type Point struct, X int
pkg example.com/fixture/shapes, type Point struct, Y int
pkg example.com/fixture/shapes, type Reader interface { Peek, Read }
pkg example.com/fixture/shapes, type Reader interface, Peek(int) ([]uint8, error)
pkg example.com/fixture/shapes, type Reader interface, Read([]uint8) (int, error)
pkg example.com/fixture/shapes, type Sealed interface, Name() string
pkg example.com/fixture/shapes, type Sealed interface, unexported methods
pkg example.com/fixture/shapes, type Set[$0 comparable, $1 interface{}] struct
pkg example.com/fixture/shapes, type Set[$0 comparable, $1 interface{}] struct, M map[$0]$1
pkg example.com/fixture/shapes, type Shape struct
pkg example.com/fixture/shapes, type Shape struct, Kind Kind
pkg example.com/fixture/shapes, type Shape struct, embedded *io.SectionReader
pkg example.com/fixture/shapes, type Shape struct, embedded Point
pkg example.com/fixture/shapes, var Default Point
pkg example.com/fixture/shapes, var ErrNope error
pkg example.com/fixture/shapes, var Hook func(context.Context, ...string) (int, error)
`

func TestFeaturesPrintsGoAPIFormat(t *testing.T) {
	got, err := Features("testdata/fixture")
	if err != nil {
		t.Fatal(err)
	}
	want := strings.Split(strings.TrimSpace(fixtureAPI), "\n")
	if strings.Join(got, "\n") == strings.Join(want, "\n") {
		return
	}
	have := map[string]bool{}
	for _, f := range got {
		have[f] = true
	}
	wanted := map[string]bool{}
	for _, f := range want {
		wanted[f] = true
		if !have[f] {
			t.Errorf("missing: %s", f)
		}
	}
	for _, f := range got {
		if !wanted[f] {
			t.Errorf("unexpected: %s", f)
		}
	}
	t.Errorf("Features(testdata/fixture) is not as expected (order: sorted)")
}

func TestFeaturesRefusesPlatformSpecificFiles(t *testing.T) {
	_, err := Features("testdata/platform")
	if err == nil || !strings.Contains(err.Error(), "p_never.go is left out by a build constraint") {
		t.Fatalf("Features(testdata/platform) = %v, want an error naming p_never.go", err)
	}
}

func TestIsPublic(t *testing.T) {
	for _, tc := range []struct {
		path, name string
		want       bool
	}{
		{"m", "m", true},
		{"m/mutex", "mutex", true},
		{"m/a/b", "b", true},
		{"m/internal", "internal", false},
		{"m/internal/core", "core", false},
		{"m/shard/internal/x", "x", false},
		{"m/examples", "examples", false},
		{"m/examples/singleton", "singleton", false},
		{"m/cmd/tool", "main", false},
		{"m/a/testdata/x", "x", false},
		{"m/internals", "internals", true},
	} {
		if got := isPublic("m", tc.path, tc.name); got != tc.want {
			t.Errorf("isPublic(m, %s, %s) = %v, want %v", tc.path, tc.name, got, tc.want)
		}
	}
}
