package cluster

import (
	"time"

	"go.uber.org/goleak"
)

// LeakOptions are the goleak options for packages that run clusters:
// goroutines etcd's embedded server leaves until process exit.
var LeakOptions = []goleak.Option{
	goleak.IgnoreTopFunction("github.com/golang/glog.(*fileSink).flushDaemon"),
	goleak.IgnoreAnyFunction("go.etcd.io/etcd/server/v3/etcdserver/api/v3rpc.(*serverWatchStream).recvLoop"),
	goleak.IgnoreTopFunction("go.opencensus.io/stats/view.(*worker).start"),
}

// FindLeaks is goleak.Find with more patience. A stopped member's peer
// connections outlive it by up to etcd's 5 s peer read timeout: etcd's
// connection wrapper resets, on every read, the past deadline net/http
// sets to abort a pending read, so those goroutines end only when the
// timeout fires. FindLeaks asks again for up to 10 s before reporting.
func FindLeaks(opts ...goleak.Option) error {
	opts = append(append([]goleak.Option(nil), LeakOptions...), opts...)
	deadline := time.Now().Add(10 * time.Second)
	for {
		err := goleak.Find(opts...)
		if err == nil || time.Now().After(deadline) {
			return err
		}
		time.Sleep(250 * time.Millisecond)
	}
}
