package router

// SetDialHook makes f run at the start of every opening of a cluster's
// connection, before it dials.
func SetDialHook(r *Router, f func(cluster string)) { r.hookDial = f }
