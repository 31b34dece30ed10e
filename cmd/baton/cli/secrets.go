package cli

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
var userEnv = envName("user")

// childEnviron is os.Environ without secretEnv, and with only the name of
// a BATON_USER=NAME:PASSWORD.
func childEnviron() []string {
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
func (g *globals) validateSecrets() error {
	name, password, inline := strings.Cut(g.user, ":")
	switch {
	case g.user != "" && name == "":
		return usageErrorf("--user %s: the user name before ':' is empty", safeQ(g.user))
	case inline && password == "":
		return usageErrorf("--user %s: the password after ':' is empty; give --user %s alone to be prompted, or --password-stdin", safeQ(g.user), safeQ(name))
	case g.passwordStdin && g.passwordFile != "":
		return usageErrorf("--password-stdin and --password-file exclude each other")
	case (g.passwordStdin || g.passwordFile != "") && g.user == "":
		return usageErrorf("--password-stdin and --password-file need --user NAME")
	case (g.passwordStdin || g.passwordFile != "") && inline:
		return usageErrorf("--user %s already has a password: give the name alone with --password-stdin or --password-file", safeQ(name+":…"))
	}
	if inline {
		fmt.Fprintf(g.io.Err, "baton: warning: the password in --user is visible to every user of this host (process list); use --password-stdin, --password-file or BATON_PASSWORD\n")
	}
	if g.insecure {
		return nil
	}
	tlsFlags := g.cacert != "" || g.cert != ""
	for _, ep := range g.endpoints {
		scheme, _, hasScheme := strings.Cut(ep, "://")
		plaintext := scheme == "http" || !hasScheme && !tlsFlags
		if !plaintext {
			continue
		}
		switch {
		case g.user != "":
			return usageErrorf("--user: the password would cross the network in plaintext to %s; use https:// endpoints with --cacert, or pass --insecure-transport", safeQ(ep))
		case g.key != "":
			return usageErrorf("--key: TLS flags do nothing for the plaintext endpoint %s, and the client certificate would not be used; use https://, or pass --insecure-transport", safeQ(ep))
		case tlsFlags:
			return usageErrorf("--cacert: TLS flags do nothing for the plaintext endpoint %s; use https://, or pass --insecure-transport", safeQ(ep))
		}
	}
	return nil
}

// credentials splits --user and finds the password.
func (g *globals) credentials() (user, password string, err error) {
	defer func() {
		if password != "" {
			hideMemory()
		}
	}()
	if g.user == "" {
		return "", "", nil
	}
	user, password, found := strings.Cut(g.user, ":")
	switch {
	case found:
		return user, password, nil
	case g.passwordStdin:
		password, err = readLine(g.io.In)
		if err != nil || password == "" {
			return "", "", usageErrorf("--password-stdin: no password on the first line of standard input")
		}
		return user, password, nil
	case g.passwordFile != "":
		f, err := os.Open(g.passwordFile)
		if err != nil {
			return "", "", withCode(ExitUsage, fmt.Errorf("--password-file: %w", err))
		}
		defer f.Close()
		password, err = readLine(f)
		if err != nil || password == "" {
			return "", "", usageErrorf("--password-file %s: no password on its first line", g.passwordFile)
		}
		return user, password, nil
	}
	if p := g.io.Getenv("BATON_PASSWORD"); p != "" {
		return user, p, nil
	}
	password, err = g.prompt(fmt.Sprintf("Password for %s: ", safe(user)))
	if err != nil {
		return "", "", withCode(ExitUsage, fmt.Errorf("--user %s: no password given (--password-stdin, --password-file, BATON_PASSWORD) and none read: %w", safe(user), err))
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
func (g *globals) prompt(text string) (string, error) {
	fmt.Fprint(g.io.Err, text)
	if f, ok := g.io.In.(*os.File); ok {
		if restore, err := noEcho(int(f.Fd())); err == nil {
			defer func() {
				restore()
				fmt.Fprintln(g.io.Err)
			}()
		}
	}
	return readLine(g.io.In)
}
