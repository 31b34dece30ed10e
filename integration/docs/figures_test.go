package docs_test

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// The README's performance paragraph quotes the latest `make bench` that
// docs/performance.md records. It is marked by a comment line starting with
// figuresMark; it names the run's commit in a code span, and every number
// in it must be one that run records: in the opening paragraph and the
// first table of the section latestHeading (the run), or in the table of
// workloadsHeading (what each workload does: 8 contenders, 10,000 locks).
// A range (1,008–1,019) must be one range of the record, as written there.
const (
	figuresMark      = "<!-- figures:"
	latestHeading    = "## Latest figures"
	workloadsHeading = "## Workloads"
)

var (
	// numRE is a number as the documents write it: 10,000, 0.635, or a
	// range of two with an en dash.
	numRE  = regexp.MustCompile(`(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?:–(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?)?`)
	codeRE = regexp.MustCompile("`[^`]*`")
	hashRE = regexp.MustCompile("^[0-9a-f]{7,40}$")
)

// figure is a number of a text: where it is, and its value without
// thousands separators.
type figure struct {
	start, end int
	value      string
}

// figures returns the numbers of text outside code spans; a number that is
// part of a word (p50, v1, a hash) is not one.
func figures(text string) []figure {
	masked := codeRE.ReplaceAllStringFunc(text, func(s string) string { return strings.Repeat("x", len(s)) })
	var out []figure
	for _, m := range numRE.FindAllStringIndex(masked, -1) {
		if m[0] > 0 && isWordByte(masked[m[0]-1]) || m[1] < len(masked) && isWordByte(masked[m[1]]) {
			continue
		}
		out = append(out, figure{m[0], m[1], strings.ReplaceAll(text[m[0]:m[1]], ",", "")})
	}
	return out
}

func isWordByte(b byte) bool {
	return b == '_' || b == '.' || b >= '0' && b <= '9' || b >= 'a' && b <= 'z' || b >= 'A' && b <= 'Z'
}

// figuresParagraph returns the README's marked paragraph and where it
// starts.
func figuresParagraph(readme string) (string, int, error) {
	i := strings.Index(readme, "\n"+figuresMark)
	if i < 0 {
		return "", 0, fmt.Errorf("README.md has no line starting with %q before its performance paragraph", figuresMark)
	}
	start := i + 1 + strings.IndexByte(readme[i+1:], '\n') + 1
	end := strings.Index(readme[start:], "\n\n")
	if end < 0 {
		end = len(readme) - start
	}
	p := readme[start : start+end]
	if strings.TrimSpace(p) == "" {
		return "", 0, fmt.Errorf("README.md: the line %q is not followed by a paragraph", figuresMark)
	}
	return p, start, nil
}

// section returns the text of the section under heading, to the next one.
func section(doc, heading string) (string, error) {
	_, sec, ok := strings.Cut(doc, "\n"+heading+"\n")
	if !ok {
		return "", fmt.Errorf("docs/performance.md has no section %q", heading)
	}
	if i := strings.Index(sec, "\n## "); i >= 0 {
		sec = sec[:i]
	}
	return sec, nil
}

// firstTable returns the first table of text.
func firstTable(text string) string {
	var rows []string
	for _, line := range strings.Split(text, "\n") {
		switch {
		case strings.HasPrefix(line, "|"):
			rows = append(rows, line)
		case len(rows) > 0:
			return strings.Join(rows, "\n")
		}
	}
	return strings.Join(rows, "\n")
}

// latestRun returns the commit of the latest run docs/performance.md
// records and the text of that record.
func latestRun(perf string) (commit, text string, err error) {
	latest, err := section(perf, latestHeading)
	if err != nil {
		return "", "", err
	}
	opening, _, _ := strings.Cut(strings.TrimLeft(latest, "\n"), "\n\n")
	for _, c := range codeRE.FindAllString(opening, -1) {
		if c = strings.Trim(c, "`"); hashRE.MatchString(c) {
			commit = c
			break
		}
	}
	if commit == "" {
		return "", "", fmt.Errorf("docs/performance.md: the opening paragraph of %q names no commit in a code span", latestHeading)
	}
	table := firstTable(latest)
	if table == "" {
		return "", "", fmt.Errorf("docs/performance.md: %q has no table", latestHeading)
	}
	workloads, err := section(perf, workloadsHeading)
	if err != nil {
		return "", "", err
	}
	return commit, opening + "\n\n" + table + "\n\n" + firstTable(workloads), nil
}

// checkFigures returns every way the README's performance paragraph
// differs from the latest run docs/performance.md records.
func checkFigures(readme, perf string) []error {
	para, _, err := figuresParagraph(readme)
	if err != nil {
		return []error{err}
	}
	commit, run, err := latestRun(perf)
	if err != nil {
		return []error{err}
	}
	var errs []error
	var named []string
	for _, c := range codeRE.FindAllString(para, -1) {
		if c = strings.Trim(c, "`"); hashRE.MatchString(c) {
			named = append(named, c)
		}
	}
	if len(named) != 1 || named[0] != commit {
		errs = append(errs, fmt.Errorf("README.md's performance paragraph names commit(s) %q; the latest run docs/performance.md records (%q) is at %s: quote that run, or record the one quoted", named, latestHeading, commit))
	}
	recorded := map[string]bool{}
	for _, f := range figures(run) {
		recorded[f.value] = true
	}
	quoted := figures(para)
	if len(quoted) == 0 {
		errs = append(errs, fmt.Errorf("README.md's performance paragraph quotes no figure"))
	}
	for _, f := range quoted {
		if !recorded[f.value] {
			errs = append(errs, fmt.Errorf("README.md's performance paragraph quotes %s (%q), which the run at %s in docs/performance.md (%q and the workloads) does not record: update the two together",
				para[f.start:f.end], around(para, f), commit, latestHeading))
		}
	}
	return errs
}

// around is the words around f in text, for an error.
func around(text string, f figure) string {
	from, to := max(f.start-30, 0), min(f.end+30, len(text))
	for from > 0 && text[from]&0xC0 == 0x80 {
		from--
	}
	for to < len(text) && text[to]&0xC0 == 0x80 {
		to++
	}
	return strings.Join(strings.Fields(text[from:to]), " ")
}

func readDocs(t *testing.T) (readme, perf string) {
	t.Helper()
	root := moduleRoot(t)
	r, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	p, err := os.ReadFile(filepath.Join(root, "docs", "performance.md"))
	if err != nil {
		t.Fatal(err)
	}
	return string(r), string(p)
}

func TestREADMEFiguresAreTheLatestRecordedRun(t *testing.T) {
	readme, perf := readDocs(t)
	for _, err := range checkFigures(readme, perf) {
		t.Error(err)
	}
	para, _, _ := figuresParagraph(readme)
	commit, _, _ := latestRun(perf)
	var quoted []string
	for _, f := range figures(para) {
		quoted = append(quoted, para[f.start:f.end])
	}
	t.Logf("the README's performance paragraph quotes the run at %s: %s", commit, strings.Join(quoted, ", "))
}

// mutant returns a value like v (the last digit changed) that the record
// does not have.
func mutant(v string, recorded map[string]bool) string {
	for d := byte(1); d < 10; d++ {
		b := []byte(v)
		last := len(b) - 1
		b[last] = '0' + (b[last]-'0'+d)%10
		if m := string(b); !recorded[m] {
			return m
		}
	}
	return v + "1"
}

// replaceFigures replaces, in text from offset from on (to its end, or for
// limit bytes when limit > 0), every figure of value v with w.
func replaceFigures(text string, from, limit int, v, w string) string {
	part := text[from:]
	if limit > 0 {
		part = part[:limit]
	}
	var b strings.Builder
	last := 0
	for _, f := range figures(part) {
		if f.value == v {
			b.WriteString(part[last:f.start])
			b.WriteString(w)
			last = f.end
		}
	}
	b.WriteString(part[last:])
	return text[:from] + b.String() + text[from+len(part):]
}

// TestFiguresCheckFails: an edit of any one figure, on either side, or a
// newer run recorded without the README following, fails the check.
func TestFiguresCheckFails(t *testing.T) {
	readme, perf := readDocs(t)
	if errs := checkFigures(readme, perf); len(errs) > 0 {
		t.Fatalf("the check fails on the documents as they are: %v", errs)
	}
	para, start, _ := figuresParagraph(readme)
	commit, run, _ := latestRun(perf)
	recorded := map[string]bool{}
	for _, f := range figures(run) {
		recorded[f.value] = true
	}
	var values []string
	for _, f := range figures(para) {
		values = append(values, f.value)
	}
	slices.Sort(values)
	for _, v := range slices.Compact(values) {
		m := mutant(v, recorded)
		if errs := checkFigures(replaceFigures(readme, start, len(para), v, m), perf); len(errs) == 0 {
			t.Errorf("README's %s edited to %s: the check passed", v, m)
		}
		if errs := checkFigures(readme, replaceFigures(perf, 0, 0, v, m)); len(errs) == 0 {
			t.Errorf("docs/performance.md's %s edited to %s: the check passed", v, m)
		}
	}
	newer := strings.Replace(perf, "`"+commit+"`", "`0123abc`", 1)
	if errs := checkFigures(readme, newer); len(errs) == 0 {
		t.Errorf("a newer run recorded (commit %s replaced): the check passed", commit)
	}
	for name, bad := range map[string][2]string{
		"no mark":            {strings.Replace(readme, figuresMark, "<!-- ", 1), perf},
		"no latest run":      {readme, strings.Replace(perf, latestHeading, "## Figures", 1)},
		"no workloads":       {readme, strings.Replace(perf, workloadsHeading, "## Loads", 1)},
		"README's commit":    {strings.Replace(readme, "`"+commit+"`", "`0123abc`", 1), perf},
		"an unrecorded fact": {replaceFigures(readme, start, len(para), values[0], values[0]+" and 987.6"), perf},
	} {
		if errs := checkFigures(bad[0], bad[1]); len(errs) == 0 {
			t.Errorf("%s: the check passed", name)
		}
	}
}
