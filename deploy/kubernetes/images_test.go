package kubernetes

import (
	"bufio"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

// recipe is what a container recipe of ../container says of its image.
type recipe struct {
	file      string
	image     string   // from its "# image: NAME" header
	froms     []string // the FROM lines' images, in order
	user      string   // the final stage's USER
	cgoOff    bool     // every go build runs with CGO_ENABLED=0
	builds    []string // what its go build lines build
	finalBase string
}

var (
	fromLine  = regexp.MustCompile(`^FROM\s+(\S+)`)
	imageLine = regexp.MustCompile(`^#\s*image:\s*(\S+)`)
	buildPkg  = regexp.MustCompile(`go (?:-C (\S+) )?build .*?(\./\S+|\.)\s*$`)
)

func readRecipes(t *testing.T) map[string]recipe {
	t.Helper()
	files, err := filepath.Glob("../container/*Dockerfile")
	if err != nil || len(files) == 0 {
		t.Fatalf("no container recipes in ../container: %v", err)
	}
	out := map[string]recipe{}
	for _, f := range files {
		r := recipe{file: f, cgoOff: true}
		fh, err := os.Open(f)
		if err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(fh)
		var logical strings.Builder
		for sc.Scan() {
			line := strings.TrimSpace(sc.Text())
			if m := imageLine.FindStringSubmatch(line); m != nil && r.image == "" {
				r.image = m[1]
			}
			if strings.HasSuffix(line, "\\") {
				logical.WriteString(strings.TrimSuffix(line, "\\") + " ")
				continue
			}
			logical.WriteString(line)
			l := logical.String()
			logical.Reset()
			if m := fromLine.FindStringSubmatch(l); m != nil {
				r.froms = append(r.froms, m[1])
				r.user = ""
			}
			if u, ok := strings.CutPrefix(l, "USER "); ok {
				r.user = strings.TrimSpace(u)
			}
			if strings.HasPrefix(l, "RUN ") && strings.Contains(l, "go ") && strings.Contains(l, " build ") {
				if !strings.Contains(l, "CGO_ENABLED=0") {
					r.cgoOff = false
				}
				if m := buildPkg.FindStringSubmatch(l); m != nil {
					r.builds = append(r.builds, filepath.Join(m[1], m[2]))
				}
			}
		}
		fh.Close()
		if len(r.froms) > 0 {
			r.finalBase = r.froms[len(r.froms)-1]
		}
		if r.image == "" {
			t.Errorf("%s: no '# image: NAME' header", f)
			continue
		}
		out[r.image] = r
	}
	return out
}

// TestImagesComeFromTheRecipes: every container of the manifests runs an
// image that a recipe of ../container builds; every recipe's final image is
// static (distroless static, no cgo in its builds) and runs as the
// manifests' non-root user; what a recipe builds exists in the repository.
func TestImagesComeFromTheRecipes(t *testing.T) {
	recipes := readRecipes(t)
	files, _ := filepath.Glob("*.yaml")
	m := load(t, files...)
	for _, d := range m.deployments {
		sc := d.Spec.Template.Spec.SecurityContext
		var uid int64 = -1
		if sc != nil && sc.RunAsUser != nil {
			uid = *sc.RunAsUser
		}
		for _, c := range append(append([]corev1.Container{}, d.Spec.Template.Spec.InitContainers...), d.Spec.Template.Spec.Containers...) {
			name, _, _ := strings.Cut(c.Image, ":")
			r, ok := recipes[name]
			if !ok {
				t.Errorf("deployment %s, container %s: image %s is built by no recipe in ../container", d.Name, c.Name, c.Image)
				continue
			}
			if want := "65532:65532"; r.user != want || uid != 65532 {
				t.Errorf("%s: USER %q with the pod's runAsUser %d, want %s and 65532", r.file, r.user, uid, want)
			}
		}
	}
	for _, r := range recipes {
		if !strings.HasPrefix(r.finalBase, "gcr.io/distroless/static") && r.finalBase != "scratch" {
			t.Errorf("%s: final image %q is not static (distroless static or scratch)", r.file, r.finalBase)
		}
		if !r.cgoOff {
			t.Errorf("%s: a go build without CGO_ENABLED=0: the binary would not be static", r.file)
		}
		if r.user == "" || strings.HasPrefix(r.user, "0") || r.user == "root" {
			t.Errorf("%s: the final stage runs as %q, want a non-root user", r.file, r.user)
		}
		for _, b := range r.builds {
			if fi, err := os.Stat(filepath.Join("..", "..", b)); err != nil || !fi.IsDir() {
				t.Errorf("%s: builds %s, which is not a directory of the repository", r.file, b)
			}
		}
	}
	if _, ok := recipes["ghcr.io/batonhq/baton"]; !ok {
		t.Error("no recipe for the CLI's image ghcr.io/batonhq/baton")
	}
}
