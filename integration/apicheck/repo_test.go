package apicheck

import "testing"

// TestRepositoryAPIMatchesItsRecord is make api-check as a test: the
// library's exported API against api/ and CHANGELOG.md, so that make test
// fails when the API drifts from its record.
func TestRepositoryAPIMatchesItsRecord(t *testing.T) {
	root, err := FindRoot(".")
	if err != nil {
		t.Fatal(err)
	}
	r, err := LoadRepo(root)
	if err != nil {
		t.Fatal(err)
	}
	problems := r.Check()
	for _, p := range problems {
		t.Error(p)
	}
	if len(problems) > 0 {
		t.Log("docs/api-policy.md says how to record API: make api adds what is new to api/next.txt")
	}
	if len(r.Record.Releases) == 0 {
		t.Error("api/ records no release")
	}
}
