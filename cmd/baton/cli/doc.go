// Package cli is baton's root command: the one list of subcommands, each
// built by the package of its concern (see docs/cli.md, "Where the code
// lives"), and Main, which runs them and maps errors to exit codes.
package cli
