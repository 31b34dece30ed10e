package scale

import (
	"context"
	"errors"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/batonhq/baton/fencing"
)

// fenceServer is the resource a phase's child processes write to: one
// fencing.MemoryGuard in the parent, a high-water mark per resource, in
// front of a handler, over loopback HTTP. A POST to /write/<resource>
// carrying a token in fencing's header reaches the handler only if the
// guard admits it for that resource; the guard's refusals (409) are
// counted by the rejected callback.
type fenceServer struct {
	url   string
	guard *fencing.MemoryGuard
	hs    *http.Server
	done  chan struct{}
}

// startFence serves h behind the guard; routes, if not nil, adds the
// phase's other endpoints (a start barrier) to the same server.
func startFence(h http.Handler, rejected func(*http.Request), routes func(*http.ServeMux)) (*fenceServer, error) {
	f := &fenceServer{guard: fencing.NewMemoryGuard(), done: make(chan struct{})}
	fenced := fencing.Middleware(f.guard, func(r *http.Request) (string, error) {
		name := strings.TrimPrefix(r.URL.Path, "/write/")
		if name == "" || name == r.URL.Path {
			return "", errors.New("no resource in the path")
		}
		return name, nil
	})(h)
	mux := http.NewServeMux()
	mux.HandleFunc("/write/", func(w http.ResponseWriter, r *http.Request) {
		sw := &fenceStatus{ResponseWriter: w, code: http.StatusOK}
		fenced.ServeHTTP(sw, r)
		if sw.code == http.StatusConflict && rejected != nil {
			rejected(r)
		}
	})
	if routes != nil {
		routes(mux)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	f.url = "http://" + ln.Addr().String()
	f.hs = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		defer close(f.done)
		_ = f.hs.Serve(ln)
	}()
	return f, nil
}

// close stops the server and waits for it.
func (f *fenceServer) close() {
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	_ = f.hs.Shutdown(sctx)
	cancel()
	_ = f.hs.Close()
	<-f.done
}

// fenceStatus keeps the status the guard's middleware answered.
type fenceStatus struct {
	http.ResponseWriter
	code int
}

func (s *fenceStatus) WriteHeader(code int) {
	s.code = code
	s.ResponseWriter.WriteHeader(code)
}
