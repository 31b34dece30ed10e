// Package apicheck records the exported API of the library module's public
// packages and checks a change against the record in api/, as Go records
// and checks its own in $GOROOT/api (docs/api-policy.md says what the
// record promises).
//
// Features lists the API in Go's api format, one feature a line
// ("pkg github.com/batonhq/baton/mutex, func New(...) ..."); ReadRecord
// reads api/ (a file per release, next.txt, except.txt); ReadChangelog
// reads CHANGELOG.md's topmost heading, which announces the next release;
// Check compares the three and reports each problem with the feature it is
// about and what to do. The command baton-api (make api, make api-check)
// runs them on the repository, and so does TestRepositoryAPIMatchesItsRecord
// under make test.
package apicheck
