// Package clitest is the scaffolding the CLI's tests share: one embedded
// etcd per test binary, baton run in process (Run, RunTo, RunEnv), golden
// files, and scenes written to etcd for the listing and page tests. Only
// tests import it.
package clitest
