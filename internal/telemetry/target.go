package telemetry

import "go.opentelemetry.io/otel/trace"

// Target is one lock, election, semaphore or read/write lock as its spans
// describe it. It holds no attribute until a span is recorded, so that a
// process with thousands of locks and no tracing pays a few words per
// lock. The zero Target, and a nil one, trace nothing.
type Target struct {
	tracer              trace.Tracer
	primitive, ns, name string
	mode                string // rwmutex: read or write
	limit               int    // semaphore
}

// NewTarget describes the object primitive ns/name, traced through tp (nil:
// the global provider).
func NewTarget(tp trace.TracerProvider, primitive, ns, name string) Target {
	return Target{tracer: Tracer(tp), primitive: primitive, ns: ns, name: name}
}

// TargetOf is NewTarget with the tracer already looked up (Tracer), for a
// caller that keeps one tracer and builds its Target per call; a nil
// tracer traces nothing.
func TargetOf(tr trace.Tracer, primitive, ns, name string) Target {
	return Target{tracer: tr, primitive: primitive, ns: ns, name: name}
}

// Mode returns t for the read or write locks of a read/write lock.
func (t Target) Mode(mode string) Target { t.mode = mode; return t }

// Limit returns t for a semaphore of limit permits.
func (t Target) Limit(limit int) Target { t.limit = limit; return t }

// on reports whether t traces.
func (t *Target) on() bool { return t != nil && t.tracer != nil }

// setAttributes gives a recording span t's attributes.
func (t *Target) setAttributes(span trace.Span) {
	span.SetAttributes(LockPrimitive.String(t.primitive), LockNamespace.String(t.ns), LockName.String(t.name))
	if t.mode != "" {
		span.SetAttributes(LockMode.String(t.mode))
	}
	if t.limit > 0 {
		span.SetAttributes(SemaphoreLimit.Int(t.limit))
	}
}

// names returns the wait, hold and release span names of t's primitive:
// constants, so that none is built per span.
func (t *Target) names() (wait, hold, release string) {
	switch t.primitive {
	case Mutex:
		return "mutex wait", "mutex hold", "mutex release"
	case Election:
		return "election wait", "election hold", "election resign"
	case Semaphore:
		return "semaphore wait", "semaphore hold", "semaphore release"
	case RWMutex:
		return "rwmutex wait", "rwmutex hold", "rwmutex release"
	}
	return t.primitive + " wait", t.primitive + " hold", t.primitive + " release"
}

// For is the Target of one call on primitive ns/name, built per call so
// that an owner keeps nothing for it: a semaphore's carries its limit, a
// read/write lock's its mode.
func For(tr trace.Tracer, primitive, ns, name string, limit int, read bool) *Target {
	t := TargetOf(tr, primitive, ns, name)
	switch {
	case primitive == Semaphore:
		t = t.Limit(limit)
	case primitive == RWMutex && read:
		t = t.Mode("read")
	case primitive == RWMutex:
		t = t.Mode("write")
	}
	return &t
}
