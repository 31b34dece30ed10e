package compat

import (
	"bufio"
	"fmt"
	"os"
	"regexp"
	"strings"
)

// StepKind says how the suite runs a Step of docs/security.md.
type StepKind int

// The kinds of step the suite knows how to run; a shell line of any other
// kind makes SecuritySteps fail.
const (
	// StepEtcd starts etcd members with the line's flags.
	StepEtcd StepKind = iota + 1
	// StepBaton runs a baton command to its end.
	StepBaton
	// StepBatonServe runs `baton dev`, which serves until stopped.
	StepBatonServe
	// StepEtcdctl runs the version's etcdctl to its end.
	StepEtcdctl
	// StepExport sets an environment variable for the steps after it.
	StepExport
	// StepFile writes a YAML block whose first line is `# <file name>`.
	StepFile
)

func (k StepKind) String() string {
	switch k {
	case StepEtcd:
		return "etcd"
	case StepBaton:
		return "baton"
	case StepBatonServe:
		return "baton dev"
	case StepEtcdctl:
		return "etcdctl"
	case StepExport:
		return "export"
	case StepFile:
		return "file"
	}
	return fmt.Sprintf("StepKind(%d)", int(k))
}

// Step is one command of a shell block of docs/security.md (continuation
// lines joined), or one file a YAML block writes.
type Step struct {
	Kind StepKind
	// Line is the line of the doc the command or block starts on.
	Line int
	// Args is the command line split on blanks, the command first; for
	// StepExport, [NAME, VALUE].
	Args []string
	// File and Content are a StepFile's name and text.
	File, Content string
}

func (s Step) String() string {
	if s.Kind == StepFile {
		return fmt.Sprintf("line %d: write %s", s.Line, s.File)
	}
	return fmt.Sprintf("line %d: %s", s.Line, strings.Join(s.Args, " "))
}

// ExportedVars are the variables a StepExport may set.
var ExportedVars = []string{"BATON_ENDPOINTS"}

var (
	fence     = regexp.MustCompile("^(\\s*)```(\\w*)\\s*$")
	fileName  = regexp.MustCompile(`^#\s*([A-Za-z0-9._-]+\.ya?ml)\s*$`)
	shellMeta = regexp.MustCompile("['\"`|;&<>(){}*?~\\[\\]]")
	varRef    = regexp.MustCompile(`\$[A-Z_]+|\$\{[A-Z_]+\}`)
)

// SecuritySteps reads the sh and yaml blocks of the Markdown file at path
// (docs/security.md) in order and returns their steps. A YAML block without
// a `# <name>.yaml` first line is an excerpt and is not a step; Go blocks
// are left to integration/docs. A shell line the suite does not know how
// to run (another command, shell syntax beyond words and $VAR) is an error
// naming the line.
func SecuritySteps(path string) ([]Step, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var (
		steps   []Step
		errs    []string
		inBlock bool
		lang    string
		indent  string
		start   int
		body    []string
	)
	sc := bufio.NewScanner(f)
	n := 0
	for sc.Scan() {
		n++
		line := sc.Text()
		m := fence.FindStringSubmatch(line)
		if !inBlock {
			if m != nil && m[2] != "" {
				inBlock, lang, indent, start, body = true, m[2], m[1], n, nil
			}
			continue
		}
		if m != nil && m[2] == "" {
			inBlock = false
			switch lang {
			case "sh", "bash", "shell":
				s, e := shellSteps(start, body)
				steps, errs = append(steps, s...), append(errs, e...)
			case "yaml", "yml":
				if len(body) > 0 {
					if fm := fileName.FindStringSubmatch(strings.TrimSpace(body[0])); fm != nil {
						steps = append(steps, Step{Kind: StepFile, Line: start + 1, File: fm[1], Content: strings.Join(body[1:], "\n") + "\n"})
					}
				}
			}
			continue
		}
		body = append(body, strings.TrimPrefix(line, indent))
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if inBlock {
		errs = append(errs, fmt.Sprintf("%s:%d: block not closed", path, start))
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("%s: the compatibility suite cannot run:\n  %s", path, strings.Join(errs, "\n  "))
	}
	return steps, nil
}

// shellSteps turns a shell block's lines (the fence on line start) into
// steps.
func shellSteps(start int, body []string) ([]Step, []string) {
	var steps []Step
	var errs []string
	cur, curLine := "", 0
	for i, l := range body {
		t := strings.TrimSpace(l)
		if cur == "" {
			if t == "" || strings.HasPrefix(t, "#") {
				continue
			}
			curLine = start + 1 + i
		}
		if strings.HasSuffix(t, "\\") {
			cur += strings.TrimSuffix(t, "\\") + " "
			continue
		}
		cur += t
		s, err := parseShell(curLine, cur)
		if err != "" {
			errs = append(errs, err)
		} else {
			steps = append(steps, s)
		}
		cur = ""
	}
	if cur != "" {
		errs = append(errs, fmt.Sprintf("line %d: continuation at the end of the block", curLine))
	}
	return steps, errs
}

func parseShell(line int, cmd string) (Step, string) {
	bad := func(why string) (Step, string) {
		return Step{}, fmt.Sprintf("line %d: %s: %s", line, why, cmd)
	}
	if shellMeta.MatchString(cmd) {
		return bad("shell syntax beyond words and $VAR")
	}
	args := strings.Fields(cmd)
	s := Step{Line: line, Args: args}
	switch args[0] {
	case "etcd":
		s.Kind = StepEtcd
	case "etcdctl":
		s.Kind = StepEtcdctl
	case "baton":
		s.Kind = StepBaton
		if len(args) > 1 && args[1] == "dev" {
			s.Kind = StepBatonServe
		}
	case "export":
		name, value, ok := strings.Cut(strings.Join(args[1:], " "), "=")
		if len(args) != 2 || !ok {
			return bad("export takes one NAME=VALUE")
		}
		known := false
		for _, v := range ExportedVars {
			known = known || v == name
		}
		if !known {
			return bad(fmt.Sprintf("export of %s, not one of %v", name, ExportedVars))
		}
		s.Kind, s.Args = StepExport, []string{name, value}
	default:
		return bad(fmt.Sprintf("unknown command %q (known: etcd, etcdctl, baton, export)", args[0]))
	}
	if s.Kind != StepExport {
		for _, a := range args {
			for _, ref := range varRef.FindAllString(a, -1) {
				name := strings.Trim(ref, "${}")
				known := false
				for _, v := range ExportedVars {
					known = known || v == name
				}
				if !known {
					return bad(fmt.Sprintf("variable %s is not one a step exports", ref))
				}
			}
			if strings.Contains(varRef.ReplaceAllString(a, ""), "$") {
				return bad("a $ that is not $NAME")
			}
		}
	}
	return s, ""
}

// ExpandVars replaces $NAME and ${NAME} in arg with env's values.
func ExpandVars(arg string, env map[string]string) string {
	return varRef.ReplaceAllStringFunc(arg, func(ref string) string { return env[strings.Trim(ref, "${}")] })
}
