package core

import "github.com/batonhq/baton/internal/watch"

// Hooks are pause points that tests use to force an interleaving at an
// exact step. Production code leaves them nil.
type Hooks struct {
	BeforeWait    func(key string) // after the enqueue found keys ahead, before the wait for them
	ReadAhead     func(key string) // after a wait read the queue ahead of key again
	AfterConfirm  func(key string) // between the confirming read and the registration for deletion news
	BeforeArm     func(key string) // after the hold is made, before it is armed
	InClose       func()           // in an Owner's Close, before it waits for the calls in flight
	OnRenewed     func()           // after each acknowledged renewal
	EndingHolds   func()           // once a lease ended, before its holds' end hooks run
	BeforeCleanup func(key string) // in a background deletion of a key, before its first attempt
	Moved         func(key string) // a waiting key moved by a hand-over, once the wait took its new revision
	HoldEnded     func(key string) // a hold's Context ended, in the step that ended it, after its OnEnd functions
	Stream        watch.Hooks      // the session's watch stream's
}

func call(f func()) {
	if f != nil {
		f()
	}
}

func callKey(f func(key string), key string) {
	if f != nil {
		f(key)
	}
}
