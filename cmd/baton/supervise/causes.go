package supervise

// Causes of a stop the supervisor made by itself, as it reports them.
const (
	CauseDeadline = "deadline"   // no extension before the validity deadline
	causeParent   = "baton-died" // baton exited or was killed
	causeStop     = "stop"       // baton asked
	causeRequest  = "request"    // baton passed on a release request
	causeSignal   = "signal"     // the supervisor itself got SIGINT, SIGTERM or SIGHUP
)
