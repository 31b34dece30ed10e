package router

import "errors"

var (
	// ErrInvalidMap is wrapped by every problem Parse, ParseMap, Load,
	// Map.Validate and New report about a cluster map: a syntax error, an
	// unknown field, a duplicate key, a value of the wrong type or out of
	// bounds, a namespace served by two clusters. The problems of one map
	// are reported together, joined, each naming its place in the file.
	ErrInvalidMap = errors.New("router: invalid cluster map")

	// ErrUnserved is returned by Client and Cluster for a namespace that no
	// cluster of the map serves when the map has no default cluster.
	ErrUnserved = errors.New("router: no cluster serves the namespace")

	// ErrUnknownCluster is returned by ClusterClient for a name that is not
	// a cluster of the map.
	ErrUnknownCluster = errors.New("router: no such cluster")

	// ErrClosed is returned by Client and ClusterClient after Close.
	ErrClosed = errors.New("router: closed")

	// ErrEpochOrder is returned by CheckMove when a namespace would move to
	// a cluster whose epoch is not greater than that of the cluster it
	// leaves, or when a cluster's epoch would go down: fencing tokens would
	// then go backwards.
	ErrEpochOrder = errors.New("router: epochs do not order the move")

	// ErrIdentity is returned by Client and ClusterClient, and by every
	// request of their clients, when the etcd cluster behind a cluster's
	// endpoints is not the one the map pins (Cluster.ID), or is below the
	// revision it had reached when pinned (rebuilt or restored): the
	// cluster's name now leads elsewhere, and the tokens issued there
	// would not order after those issued before. The map must pin the new
	// cluster and raise its epoch (CheckMove).
	ErrIdentity = errors.New("router: the etcd cluster is not the one the map pins")

	// ErrTokenRange is returned by Token and (*Router).Token for a token
	// that does not fit the 47 bits left beside the epoch, or that is not
	// positive.
	ErrTokenRange = errors.New("router: token out of range")
)
