package cmdutil

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
)

// The password of --user comes, in this order, from NAME:PASSWORD,
// --password-stdin, --password-file, BATON_PASSWORD, or a prompt. It is
// handed to etcd's client and nowhere else: not to a child's environment
// (childEnviron), not to a log, not to an audit record.

// secretEnv is the environment that carries secrets, removed from every
// child's environment.
var secretEnv = []string{"BATON_PASSWORD"}

// userEnv sets --user, and may carry NAME:PASSWORD.
var userEnv = EnvName("user")

// ChildEnviron is os.Environ without secretEnv, and with only the name of
// a BATON_USER=NAME:PASSWORD.
func ChildEnviron() []string {
	env := os.Environ()
	out := env[:0:0]
	for _, kv := range env {
		name, value, _ := strings.Cut(kv, "=")
		secret := false
		for _, s := range secretEnv {
			secret = secret || name == s
		}
		if name == userEnv {
			if user, _, inline := strings.Cut(value, ":"); inline {
				kv = name + "=" + user
			}
		}
		if !secret {
			out = append(out, kv)
		}
	}
	return out
}

// validateSecrets checks the credential flags and refuses to send a
// secret over plaintext, before anything connects.
func (g *Env) validateSecrets() error {
	name, password, inline := strings.Cut(g.User, ":")
	switch {
	case g.User != "" && name == "":
		return UsageErrorf("--user %s: the user name before ':' is empty", SafeQ(g.User))
	case inline && password == "":
		return UsageErrorf("--user %s: the password after ':' is empty; give --user %s alone to be prompted, or --password-stdin", SafeQ(g.User), SafeQ(name))
	case g.PasswordStdin && g.PasswordFile != "":
		return UsageErrorf("--password-stdin and --password-file exclude each other")
	case (g.PasswordStdin || g.PasswordFile != "") && g.User == "":
		return UsageErrorf("--password-stdin and --password-file need --user NAME")
	case (g.PasswordStdin || g.PasswordFile != "") && inline:
		return UsageErrorf("--user %s already has a password: give the name alone with --password-stdin or --password-file", SafeQ(name+":…"))
	}
	if inline {
		fmt.Fprintf(g.IO.Err, "baton: warning: the password in --user is visible to every user of this host (process list); use --password-stdin, --password-file or BATON_PASSWORD\n")
	}
	if g.insecure {
		return nil
	}
	tlsFlags := g.cacert != "" || g.cert != ""
	for _, ep := range g.Endpoints {
		scheme, _, hasScheme := strings.Cut(ep, "://")
		plaintext := scheme == "http" || !hasScheme && !tlsFlags
		if !plaintext {
			continue
		}
		switch {
		case g.User != "":
			return UsageErrorf("--user: the password would cross the network in plaintext to %s; use https:// endpoints with --cacert, or pass --insecure-transport", SafeQ(ep))
		case g.key != "":
			return UsageErrorf("--key: TLS flags do nothing for the plaintext endpoint %s, and the client certificate would not be used; use https://, or pass --insecure-transport", SafeQ(ep))
		case tlsFlags:
			return UsageErrorf("--cacert: TLS flags do nothing for the plaintext endpoint %s; use https://, or pass --insecure-transport", SafeQ(ep))
		}
	}
	return nil
}

// Credentials splits --user and finds the password.
func (g *Env) Credentials() (user, password string, err error) {
	defer func() {
		if password != "" {
			hideMemory()
		}
	}()
	if g.User == "" {
		return "", "", nil
	}
	user, password, found := strings.Cut(g.User, ":")
	switch {
	case found:
		return user, password, nil
	case g.PasswordStdin:
		password, err = readLine(g.IO.In)
		if err != nil || password == "" {
			return "", "", UsageErrorf("--password-stdin: no password on the first line of standard input")
		}
		return user, password, nil
	case g.PasswordFile != "":
		f, err := os.Open(g.PasswordFile)
		if err != nil {
			return "", "", WithCode(ExitUsage, fmt.Errorf("--password-file: %w", err))
		}
		defer f.Close()
		password, err = readLine(f)
		if err != nil || password == "" {
			return "", "", UsageErrorf("--password-file %s: no password on its first line", g.PasswordFile)
		}
		return user, password, nil
	}
	if p := g.IO.Getenv("BATON_PASSWORD"); p != "" {
		return user, p, nil
	}
	password, err = g.prompt(fmt.Sprintf("Password for %s: ", Safe(user)))
	if err != nil {
		return "", "", WithCode(ExitUsage, fmt.Errorf("--user %s: no password given (--password-stdin, --password-file, BATON_PASSWORD) and none read: %w", Safe(user), err))
	}
	return user, password, nil
}

// readLine reads one line a byte at a time, so that nothing after it is
// taken from a stdin a child will read.
func readLine(r io.Reader) (string, error) {
	var b strings.Builder
	var c [1]byte
	for {
		n, err := r.Read(c[:])
		if n == 1 {
			if c[0] == '\n' {
				break
			}
			b.WriteByte(c[0])
			continue
		}
		if errors.Is(err, io.EOF) && b.Len() > 0 {
			break
		}
		if err != nil {
			return "", err
		}
	}
	return strings.TrimRight(b.String(), "\r"), nil
}

// prompt reads one line from the input, without echo on a terminal.
func (g *Env) prompt(text string) (string, error) {
	fmt.Fprint(g.IO.Err, text)
	if f, ok := g.IO.In.(*os.File); ok {
		if restore, err := noEcho(int(f.Fd())); err == nil {
			defer func() {
				restore()
				fmt.Fprintln(g.IO.Err)
			}()
		}
	}
	return readLine(g.IO.In)
}
