package serve

import (
	"net/http"
	"time"
)

// HTTPServerWithReadTimeout is HTTPServer over plaintext with the
// --read-timeout given.
func HTTPServerWithReadTimeout(h http.Handler, read time.Duration) *http.Server {
	return httpServer(h, false, nil, timeouts{readHeader: DefaultReadHeaderTimeout, read: read, idle: DefaultIdleTimeout})
}
