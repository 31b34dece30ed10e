//go:build mixed_planted

package main

// planted: every write skips the fencing check (a plain put, neither the
// guard nor the holder's key compared), as a program that trusts its lock
// would. The mixed test's planted run must report it.
const planted = true
