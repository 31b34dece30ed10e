package core

// Hooks are pause points that tests use to force an interleaving at an
// exact step. Production code leaves them nil.
type Hooks struct {
	// AfterConfirm runs between an acquisition's confirming read and the
	// hold's registration for deletion news.
	AfterConfirm func(key string)
	// BeforeArm runs in an acquisition after its hold is made, before the
	// hold is armed.
	BeforeArm func(key string)
	// BeforeReread runs after the namespace watch broke, before its re-read.
	BeforeReread func()
	// InClose runs in an owner's Close after it refused new calls, before it
	// waits for the calls in flight.
	InClose func()
	// Deleted runs in the namespace watch for every deletion it receives.
	Deleted func(key string)
	// OnRenewed runs after each acknowledged renewal.
	OnRenewed func()
	// EndingHolds runs in the goroutine that runs a lease's holds' end
	// hooks once the lease ended, before it runs them.
	EndingHolds func()
}

func call(f func()) {
	if f != nil {
		f()
	}
}
