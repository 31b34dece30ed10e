// Package docs_test checks that the documentation says what the code
// does: every Go block of README.md and docs/*.md compiles against the
// module, every baton command line of its shell blocks names existing
// commands and flags, the module's imports follow docs/design.md's
// package map, with a library that links no tool (packages_test.go), and
// the README's performance figures are those of the latest run
// docs/performance.md records (figures_test.go).
package docs_test

import (
	"bufio"
	"fmt"
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/spf13/cobra"

	"github.com/batonhq/baton/cmd/baton/cli"
)

// block is one fenced code block of a Markdown file.
type block struct {
	file string
	line int // of the opening fence
	lang string
	text string
}

func (b block) String() string { return fmt.Sprintf("%s:%d", b.file, b.line) }

func moduleRoot(t *testing.T) string {
	t.Helper()
	dir, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "go.mod")); err != nil {
		t.Fatalf("module root not found: %v", err)
	}
	return dir
}

// blocks reads the fenced blocks of README.md and docs/*.md.
func blocks(t *testing.T, root string) []block {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	files = append([]string{filepath.Join(root, "README.md")}, files...)
	var out []block
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		rel, _ := filepath.Rel(root, f)
		var cur *block
		var text strings.Builder
		for i, line := range strings.Split(string(data), "\n") {
			trimmed := strings.TrimSpace(line)
			switch {
			case cur == nil && strings.HasPrefix(trimmed, "```"):
				cur = &block{file: rel, line: i + 1, lang: strings.TrimSpace(strings.TrimPrefix(trimmed, "```"))}
				text.Reset()
			case cur != nil && trimmed == "```":
				cur.text = text.String()
				out = append(out, *cur)
				cur = nil
			case cur != nil:
				text.WriteString(line)
				text.WriteByte('\n')
			}
		}
		if cur != nil {
			t.Errorf("%s: block not closed", cur)
		}
	}
	return out
}

// snippetParams are the names a snippet may use without declaring them:
// what the surrounding prose assumes the reader has.
const snippetParams = `ctx context.Context, cli *clientv3.Client, t *testing.T, lock *mutex.Lock,
	hostname string, scheduleJobs func(context.Context, fencing.Token) error,
	mux *http.ServeMux, reportMutex *mutex.Mutex, schedulerElection *election.Election`

// imports are the packages a snippet may name, by the name it uses.
var imports = map[string]string{
	"context": "context", "errors": "errors", "fmt": "fmt", "time": "time", "strconv": "strconv",
	"http": "net/http", "testing": "testing", "sql": "database/sql",
	"clientv3":  "go.etcd.io/etcd/client/v3",
	"mutex":     "github.com/batonhq/baton/mutex",
	"election":  "github.com/batonhq/baton/election",
	"fencing":   "github.com/batonhq/baton/fencing",
	"semaphore": "github.com/batonhq/baton/semaphore",
	"rwmutex":   "github.com/batonhq/baton/rwmutex",
	"router":    "github.com/batonhq/baton/router",
	"session":   "github.com/batonhq/baton/session",
	"shard":     "github.com/batonhq/baton/shard",
	"rbac":      "github.com/batonhq/baton/rbac",
	"debughttp": "github.com/batonhq/baton/debughttp",
	"etcdtest":  "github.com/batonhq/baton/internal/embedetcd/etcdtest",
}

// alwaysImported are the packages of snippetParams.
var alwaysImported = []string{"context", "clientv3", "testing", "mutex", "fencing", "http", "election"}

// program makes a Go file of a snippet: a complete set of declarations
// as it is, statements as the body of a function whose parameters are
// snippetParams. Only the packages it names are imported, so an unused
// variable or import is the snippet's own error.
func program(b block) string {
	names := slices.Clone(alwaysImported)
	for name := range imports {
		if regexp.MustCompile(`\b` + name + `\.`).MatchString(b.text) {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	names = slices.Compact(names)
	var src strings.Builder
	fmt.Fprintf(&src, "// Code extracted from %s. DO NOT EDIT.\n\npackage snippet\n\nimport (\n", b)
	for _, n := range names {
		fmt.Fprintf(&src, "\t%s %q\n", n, imports[n])
	}
	src.WriteString(")\n\n")
	fmt.Fprintf(&src, "var _ = func(%s) {}\n\n", snippetParams)
	// Errors are reported at the snippet's place in the Markdown file.
	at := fmt.Sprintf("//line %s:%d\n", b.file, b.line+1)
	decl := "package snippet\n" + b.text
	if _, err := parser.ParseFile(token.NewFileSet(), "", decl, 0); err == nil {
		src.WriteString(at + b.text)
		return src.String()
	}
	end := "\treturn nil\n"
	if lines := strings.Split(strings.TrimSpace(b.text), "\n"); strings.HasPrefix(strings.TrimSpace(lines[len(lines)-1]), "return ") {
		end = "" // the snippet returns: another return would be unreachable
	}
	fmt.Fprintf(&src, "func snippet(%s) error {\n\t{\n%s%s\n\t}\n%s}\n", snippetParams, at, b.text, end)
	return src.String()
}

func TestGoBlocksCompile(t *testing.T) {
	root := moduleRoot(t)
	// Inside the module, so that its packages resolve; "_" keeps it out
	// of ./... patterns.
	dir, err := os.MkdirTemp(root, "_docsnippets")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	var pkgs []string
	for _, b := range blocks(t, root) {
		if b.lang != "go" {
			continue
		}
		name := fmt.Sprintf("s%d", len(pkgs))
		if err := os.Mkdir(filepath.Join(dir, name), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name, "snippet.go"), []byte(program(b)), 0o600); err != nil {
			t.Fatal(err)
		}
		pkgs = append(pkgs, "./"+filepath.Base(dir)+"/"+name)
	}
	if len(pkgs) == 0 {
		t.Fatal("no Go blocks found")
	}
	gobin := filepath.Join(runtime.GOROOT(), "bin", "go")
	cmd := exec.Command(gobin, append([]string{"vet"}, pkgs...)...)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "GOPROXY=off")
	out, err := cmd.CombinedOutput()
	if err == nil {
		t.Logf("%d Go blocks compile and pass go vet", len(pkgs))
		return
	}
	t.Fatalf("go vet of the documentation's Go blocks failed (%v); each error names its Markdown file and line:\n%s", err, out)
}

// shellWords splits a command line as sh would for our purposes: quotes
// removed, and the line cut at a comment or a shell operator.
func shellWords(line string) []string {
	var words []string
	var cur strings.Builder
	inWord := false
	var quote rune
	flush := func() {
		if inWord {
			words = append(words, cur.String())
			cur.Reset()
			inWord = false
		}
	}
	rs := []rune(line)
	for i := 0; i < len(rs); i++ {
		r := rs[i]
		switch {
		case quote != 0:
			if r == quote {
				quote = 0
			} else {
				cur.WriteRune(r)
			}
		case r == '\'' || r == '"':
			quote, inWord = r, true
		case r == '\\' && i+1 < len(rs):
			i++
			cur.WriteRune(rs[i])
			inWord = true
		case r == ' ' || r == '\t':
			flush()
		case r == '#' && !inWord, r == '|', r == '&', r == ';', r == '>', r == '<':
			flush()
			return words
		default:
			cur.WriteRune(r)
			inWord = true
		}
	}
	flush()
	return words
}

// batonArgs returns the arguments of a baton command line, or nil.
func batonArgs(line string) []string {
	line = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(line), "$ "))
	w := shellWords(line)
	for len(w) > 0 && strings.Contains(w[0], "=") && !strings.HasPrefix(w[0], "-") {
		w = w[1:] // VAR=value before the command
	}
	switch {
	case len(w) >= 1 && w[0] == "baton":
		return w[1:]
	case len(w) >= 3 && w[0] == "go" && w[1] == "run" && w[2] == "./cmd/baton":
		return w[3:]
	}
	return nil
}

// checkArgs finds the command args name and parses its flags, as cobra
// would, without running it.
func checkArgs(args []string) error {
	root := cli.NewRoot(cli.IO{Out: &strings.Builder{}, Err: &strings.Builder{}})
	cmd, rest, err := root.Find(args)
	if err != nil {
		return err
	}
	if err := cmd.ParseFlags(rest); err != nil {
		return fmt.Errorf("%s: %w", cmd.CommandPath(), err)
	}
	pos := cmd.Flags().Args()
	if len(pos) > 0 && (cmd == root || cmd.HasSubCommands()) && cmd.Flags().ArgsLenAtDash() != 0 {
		return fmt.Errorf("%s has no subcommand %q", cmd.CommandPath(), pos[0])
	}
	return validArgs(cmd, pos)
}

// validArgs applies the command's own argument count check.
func validArgs(cmd *cobra.Command, pos []string) error {
	if cmd.Args == nil || cmd.HasSubCommands() {
		return nil
	}
	return cmd.Args(cmd, pos)
}

func TestShellBlocksUseRealCommandsAndFlags(t *testing.T) {
	root := moduleRoot(t)
	n := 0
	for _, b := range blocks(t, root) {
		switch b.lang {
		case "sh", "bash", "shell", "console", "":
		default:
			continue
		}
		sc := bufio.NewScanner(strings.NewReader(strings.ReplaceAll(b.text, "\\\n", " ")))
		for i := 0; sc.Scan(); i++ {
			args := batonArgs(sc.Text())
			if args == nil {
				continue
			}
			n++
			if err := checkArgs(args); err != nil {
				t.Errorf("%s, line %d of the block: %q: %v", b, i+1, sc.Text(), err)
			}
		}
	}
	if n == 0 {
		t.Fatal("no baton command lines found")
	}
	t.Logf("%d baton command lines checked", n)
}

func TestCheckArgsRefusesWhatCobraRefuses(t *testing.T) {
	for _, bad := range [][]string{
		{"lock", "--no-such-flag", "x"},
		{"certs", "nope"},
		{"nosuchcommand"},
		{"leader"},
	} {
		if err := checkArgs(bad); err == nil {
			t.Errorf("checkArgs(%q) accepted it", bad)
		}
	}
	for _, good := range [][]string{
		{"lock", "nightly", "--", "./report.sh", "--flag-of-the-command"},
		{"-o", "json", "locks"},
		{"certs", "init", "--dir", "pki"},
	} {
		if err := checkArgs(good); err != nil {
			t.Errorf("checkArgs(%q): %v", good, err)
		}
	}
}
