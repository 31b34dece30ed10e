// Package kubernetes holds the example manifests. Its test decodes them
// with the Kubernetes API types and checks that they refer to each other
// correctly; it is a module of its own so that the k8s.io modules stay out
// of baton's go.mod.
package kubernetes

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	metavalidation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	kjson "k8s.io/apimachinery/pkg/runtime/serializer/json"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"
)

// newDecoder decodes YAML as the API server does under
// `kubectl apply --validate=strict`: an unknown, misspelt, miscased or
// duplicate field, a value of the wrong type, or an apiVersion/kind outside
// the scheme is an error.
func newDecoder(t testing.TB) runtime.Decoder {
	t.Helper()
	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{corev1.AddToScheme, appsv1.AddToScheme, policyv1.AddToScheme} {
		if err := add(scheme); err != nil {
			t.Fatal(err)
		}
	}
	return kjson.NewSerializerWithOptions(kjson.DefaultMetaFactory, scheme, scheme,
		kjson.SerializerOptions{Yaml: true, Strict: true})
}

// manifests holds the decoded objects by kind and name.
type manifests struct {
	configMaps  map[string]*corev1.ConfigMap
	secrets     map[string]*corev1.Secret
	accounts    map[string]*corev1.ServiceAccount
	deployments map[string]*appsv1.Deployment
	pdbs        map[string]*policyv1.PodDisruptionBudget
}

func newManifests() *manifests {
	return &manifests{
		configMaps:  map[string]*corev1.ConfigMap{},
		secrets:     map[string]*corev1.Secret{},
		accounts:    map[string]*corev1.ServiceAccount{},
		deployments: map[string]*appsv1.Deployment{},
		pdbs:        map[string]*policyv1.PodDisruptionBudget{},
	}
}

func put[T any](m map[string]T, name string, v T) error {
	if _, ok := m[name]; ok {
		return fmt.Errorf("%q defined twice", name)
	}
	m[name] = v
	return nil
}

// add decodes one YAML document and files it by kind. A kind the checks
// below do not cover is an error, so a new kind cannot slip in unchecked.
func (m *manifests) add(dec runtime.Decoder, doc []byte) error {
	obj, gvk, err := dec.Decode(doc, nil, nil)
	if err != nil {
		return err
	}
	acc, err := meta.Accessor(obj)
	if err != nil {
		return err
	}
	if msgs := validation.IsDNS1123Subdomain(acc.GetName()); len(msgs) > 0 {
		return fmt.Errorf("%s: metadata.name %q: %s", gvk.Kind, acc.GetName(), strings.Join(msgs, "; "))
	}
	if errs := metavalidation.ValidateLabels(acc.GetLabels(), field.NewPath("metadata", "labels")); len(errs) > 0 {
		return fmt.Errorf("%s %s: %v", gvk.Kind, acc.GetName(), errs.ToAggregate())
	}
	switch o := obj.(type) {
	case *corev1.ConfigMap:
		err = put(m.configMaps, o.Name, o)
	case *corev1.Secret:
		err = put(m.secrets, o.Name, o)
	case *corev1.ServiceAccount:
		err = put(m.accounts, o.Name, o)
	case *appsv1.Deployment:
		err = put(m.deployments, o.Name, o)
	case *policyv1.PodDisruptionBudget:
		err = put(m.pdbs, o.Name, o)
	default:
		return fmt.Errorf("%s %s: a kind this test does not check", gvk.GroupVersion(), gvk.Kind)
	}
	if err != nil {
		return fmt.Errorf("%s %w", gvk.Kind, err)
	}
	return nil
}

// load decodes every document of every file, skipping empty ones (only
// comments), as kubectl does.
func load(t *testing.T, files ...string) *manifests {
	t.Helper()
	dec := newDecoder(t)
	m := newManifests()
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
		for i := 1; ; i++ {
			doc, err := r.Read()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatalf("%s, document %d: %v", f, i, err)
			}
			if j, err := yaml.YAMLToJSON(doc); err == nil && string(bytes.TrimSpace(j)) == "null" {
				continue
			}
			if err := m.add(dec, doc); err != nil {
				t.Fatalf("%s, document %d: %v", f, i, err)
			}
		}
	}
	return m
}

func TestManifestsDecodeStrictlyAndReferToEachOther(t *testing.T) {
	files, err := filepath.Glob("*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no manifests: %v", err)
	}
	m := load(t, files...)
	if len(m.deployments) != 2 {
		t.Fatalf("%d deployments, want the library one and the wrapper one", len(m.deployments))
	}
	for _, d := range m.deployments {
		checkDeployment(t, m, d)
	}
	for name, p := range m.pdbs {
		checkPDB(t, m, name, p)
	}
}

// matches reports whether the selector is valid, not empty, and selects
// pods with the given labels.
func matches(s *metav1.LabelSelector, podLabels map[string]string) bool {
	sel, err := metav1.LabelSelectorAsSelector(s)
	return err == nil && !sel.Empty() && sel.Matches(labels.Set(podLabels))
}

func checkDeployment(t *testing.T, m *manifests, d *appsv1.Deployment) {
	t.Helper()
	name, pod := d.Name, d.Spec.Template
	s := pod.Spec
	if d.Spec.Replicas == nil || *d.Spec.Replicas != 3 {
		t.Errorf("%s: replicas %v, want 3", name, d.Spec.Replicas)
	}
	// The API server refuses a selector that does not select the template.
	if !matches(d.Spec.Selector, pod.Labels) {
		t.Errorf("%s: selector %v does not select the pod template's labels %v", name, d.Spec.Selector, pod.Labels)
	}
	if errs := metavalidation.ValidateLabels(pod.Labels, field.NewPath("spec", "template", "metadata", "labels")); len(errs) > 0 {
		t.Errorf("%s: %v", name, errs.ToAggregate())
	}
	for other, o := range m.deployments {
		if other != name && matches(d.Spec.Selector, o.Spec.Template.Labels) {
			t.Errorf("%s: selector also selects the pods of %s", name, other)
		}
	}
	if a := s.Affinity; a != nil && a.PodAntiAffinity != nil {
		for _, w := range a.PodAntiAffinity.PreferredDuringSchedulingIgnoredDuringExecution {
			if !matches(w.PodAffinityTerm.LabelSelector, pod.Labels) {
				t.Errorf("%s: anti-affinity selector %v does not select its own pods", name, w.PodAffinityTerm.LabelSelector)
			}
		}
	}
	if _, ok := m.accounts[s.ServiceAccountName]; !ok {
		t.Errorf("%s: service account %q not defined", name, s.ServiceAccountName)
	}
	if s.AutomountServiceAccountToken == nil || *s.AutomountServiceAccountToken {
		t.Errorf("%s: mounts a Kubernetes API token it does not need", name)
	}
	if psc := s.SecurityContext; psc == nil || psc.RunAsNonRoot == nil || !*psc.RunAsNonRoot || psc.FSGroup == nil || *psc.FSGroup == 0 {
		t.Errorf("%s: want non-root with an fsGroup that can read the secret", name)
	}
	volumes := map[string]corev1.Volume{}
	for _, v := range s.Volumes {
		volumes[v.Name] = v
		switch {
		case v.Secret != nil:
			if _, ok := m.secrets[v.Secret.SecretName]; !ok {
				t.Errorf("%s: secret %q not defined", name, v.Secret.SecretName)
			}
			if v.Secret.DefaultMode == nil || *v.Secret.DefaultMode&0o040 == 0 {
				t.Errorf("%s: secret mode %v unreadable by the fsGroup", name, v.Secret.DefaultMode)
			}
		case v.ConfigMap != nil:
			if _, ok := m.configMaps[v.ConfigMap.Name]; !ok {
				t.Errorf("%s: config map %q not defined", name, v.ConfigMap.Name)
			}
		}
	}
	if len(s.Containers) != 1 {
		t.Fatalf("%s: %d containers", name, len(s.Containers))
	}
	c := s.Containers[0]
	checkContainer(t, m, name, c, volumes)
	checkGrace(t, name, c, s.TerminationGracePeriodSeconds)
}

func checkPDB(t *testing.T, m *manifests, name string, p *policyv1.PodDisruptionBudget) {
	t.Helper()
	d, ok := m.deployments[name]
	if !ok || !matches(p.Spec.Selector, d.Spec.Template.Labels) {
		t.Errorf("PodDisruptionBudget %s does not select the pods of deployment %s", name, name)
		return
	}
	for other, o := range m.deployments {
		if other != name && matches(p.Spec.Selector, o.Spec.Template.Labels) {
			t.Errorf("PodDisruptionBudget %s also selects the pods of %s", name, other)
		}
	}
	if p.Spec.MinAvailable == nil || d.Spec.Replicas == nil {
		t.Errorf("PodDisruptionBudget %s: want minAvailable against a fixed replica count", name)
		return
	}
	replicas := int(*d.Spec.Replicas)
	min, err := intstr.GetScaledValueFromIntOrPercent(p.Spec.MinAvailable, replicas, true)
	if err != nil || min >= replicas {
		t.Errorf("PodDisruptionBudget %s: minAvailable %s of %d replicas blocks every eviction (%v)", name, p.Spec.MinAvailable, replicas, err)
	}
}

func hasKey(s *corev1.Secret, key string) bool {
	_, inString := s.StringData[key]
	_, inData := s.Data[key]
	return inString || inData
}

func checkContainer(t *testing.T, m *manifests, name string, c corev1.Container, volumes map[string]corev1.Volume) {
	t.Helper()
	if c.Image == "" {
		t.Errorf("%s: no image", name)
	}
	if msgs := validation.IsDNS1123Label(c.Name); len(msgs) > 0 {
		t.Errorf("%s: container name %q: %s", name, c.Name, strings.Join(msgs, "; "))
	}
	ports := map[string]int32{}
	for _, p := range c.Ports {
		if msgs := validation.IsValidPortName(p.Name); p.Name != "" && len(msgs) > 0 {
			t.Errorf("%s: port name %q: %s", name, p.Name, strings.Join(msgs, "; "))
		}
		ports[p.Name] = p.ContainerPort
	}
	// A probe's port, by name or by number, must be a declared one.
	resolve := func(p intstr.IntOrString) int32 {
		if p.Type == intstr.String {
			return ports[p.StrVal]
		}
		for _, n := range ports {
			if n == p.IntVal {
				return n
			}
		}
		return 0
	}
	var probed int32
	for _, pr := range []struct {
		what  string
		probe *corev1.Probe
	}{{"liveness", c.LivenessProbe}, {"readiness", c.ReadinessProbe}} {
		if pr.probe == nil || pr.probe.HTTPGet == nil {
			t.Errorf("%s: no HTTP %s probe", name, pr.what)
			continue
		}
		g := pr.probe.HTTPGet
		port := resolve(g.Port)
		if g.Path != "/healthz" || port == 0 {
			t.Errorf("%s: %s probe on %s port %s, want /healthz on a declared port", name, pr.what, g.Path, g.Port.String())
		}
		if probed != 0 && port != probed {
			t.Errorf("%s: probes on ports %d and %d", name, probed, port)
		}
		probed = port
	}
	// The probed port is the one the program listens on.
	port := fmt.Sprintf(":%d", probed)
	args := strings.Join(c.Args, " ")
	if !strings.Contains(args, "--metrics-listen="+port) && !strings.Contains(args, "--listen "+port) {
		t.Errorf("%s: args %q do not listen on the probed port %s", name, args, port)
	}
	mounted := func(dir string) *corev1.Secret {
		for _, vm := range c.VolumeMounts {
			if v, ok := volumes[vm.Name]; ok && v.Secret != nil && filepath.Clean(dir) == vm.MountPath {
				return m.secrets[v.Secret.SecretName]
			}
		}
		return nil
	}
	for _, vm := range c.VolumeMounts {
		if _, ok := volumes[vm.Name]; !ok {
			t.Errorf("%s: mounts volume %q, not defined in the pod", name, vm.Name)
		}
	}
	for _, e := range c.EnvFrom {
		if e.SecretRef != nil {
			if _, ok := m.secrets[e.SecretRef.Name]; !ok {
				t.Errorf("%s: secret %q not defined", name, e.SecretRef.Name)
			}
		}
		if e.ConfigMapRef == nil {
			continue
		}
		cm, ok := m.configMaps[e.ConfigMapRef.Name]
		if !ok {
			t.Errorf("%s: config map %q not defined", name, e.ConfigMapRef.Name)
			continue
		}
		// Certificate paths point into the mounted secret, at keys it has.
		for _, k := range []string{"BATON_CACERT", "BATON_CERT", "BATON_KEY"} {
			dir, file := filepath.Split(cm.Data[k])
			if s := mounted(dir); s == nil || !hasKey(s, file) {
				t.Errorf("%s: %s=%q is not a key of a mounted secret", name, k, cm.Data[k])
			}
		}
		if cm.Data["BATON_ENDPOINTS"] == "" {
			t.Errorf("%s: no BATON_ENDPOINTS", name)
		}
	}
	var podName bool
	for _, e := range c.Env {
		podName = podName || e.Name == "POD_NAME" && e.ValueFrom != nil && e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "metadata.name"
		if e.ValueFrom == nil {
			continue
		}
		if r := e.ValueFrom.SecretKeyRef; r != nil {
			if s, ok := m.secrets[r.Name]; !ok || !hasKey(s, r.Key) {
				t.Errorf("%s: env %s: secret %q has no key %q", name, e.Name, r.Name, r.Key)
			}
		}
		if r := e.ValueFrom.ConfigMapKeyRef; r != nil {
			if cm, ok := m.configMaps[r.Name]; !ok || cm.Data[r.Key] == "" {
				t.Errorf("%s: env %s: config map %q has no key %q", name, e.Name, r.Name, r.Key)
			}
		}
	}
	if !podName {
		t.Errorf("%s: POD_NAME is not the pod's name", name)
	}
	sc := c.SecurityContext
	if sc == nil || sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation ||
		sc.Capabilities == nil || !slices.Contains(sc.Capabilities.Drop, corev1.Capability("ALL")) {
		t.Errorf("%s: the container may escalate or keeps capabilities", name)
	}
	if sc == nil || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
		t.Errorf("%s: the root filesystem is writable", name)
	}
}

// checkGrace: with baton elect, the kubelet's SIGKILL must come after
// baton's own stop of the command (--grace) and its resignation.
func checkGrace(t *testing.T, name string, c corev1.Container, podGrace *int64) {
	t.Helper()
	if len(c.Command) == 0 {
		return
	}
	if !slices.Contains(c.Args, "elect") || !slices.Contains(c.Args, "--") || !slices.Contains(c.Args, "$(POD_NAME)") {
		t.Errorf("%s: want baton elect NAME $(POD_NAME) -- CMD, got %q", name, c.Args)
	}
	for _, a := range c.Args {
		var secs int64
		if _, err := fmt.Sscanf(a, "--grace=%ds", &secs); err == nil && (podGrace == nil || *podGrace < secs+10) {
			t.Errorf("%s: terminationGracePeriodSeconds %v leaves baton's --grace %ds no room to resign", name, podGrace, secs)
		}
	}
}

// TestDecodeRejects keeps the decoding strict: each document is one
// mistake that `kubectl apply --validate=strict` refuses.
func TestDecodeRejects(t *testing.T) {
	const deployment = "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: x\nspec:\n"
	for _, tc := range []struct{ name, doc, want string }{
		{"misspelt field", deployment + "  replica: 3\n", `unknown field "spec.replica"`},
		{"field in the wrong case", deployment + "  Replicas: 3\n", `unknown field "spec.Replicas"`},
		{"field of another kind", deployment + "  serviceName: x\n", `unknown field "spec.serviceName"`},
		{"field at the wrong level", deployment + "  serviceAccountName: x\n", `unknown field "spec.serviceAccountName"`},
		{"duplicate field", deployment + "  replicas: 3\n  replicas: 2\n", `"replicas" already set`},
		{"value of the wrong type", deployment + "  replicas: \"3\"\n", "cannot unmarshal string"},
		{"misspelt kind", "apiVersion: apps/v1\nkind: Deploymnet\nmetadata:\n  name: x\n", `no kind "Deploymnet" is registered`},
		{"kind in the wrong group", "apiVersion: v1\nkind: Deployment\nmetadata:\n  name: x\n", `no kind "Deployment" is registered for version "v1"`},
		{"removed version", "apiVersion: extensions/v1beta1\nkind: Deployment\nmetadata:\n  name: x\n", `no kind "Deployment" is registered for version "extensions/v1beta1"`},
		{"no kind", "apiVersion: v1\nmetadata:\n  name: x\n", "Object 'Kind' is missing"},
		{"kind not checked here", "apiVersion: v1\nkind: Service\nmetadata:\n  name: x\n", "a kind this test does not check"},
		{"invalid name", "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: Baton_etcd\n", "metadata.name"},
		{"invalid label", "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: x\n  labels:\n    app: \"a b\"\n", "metadata.labels"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := newManifests().add(newDecoder(t), []byte(tc.doc))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want an error containing %q", err, tc.want)
			}
		})
	}
	// The same documents, well formed, decode.
	ok := newManifests()
	for _, doc := range []string{deployment + "  replicas: 3\n", "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: x\n"} {
		if err := ok.add(newDecoder(t), []byte(doc)); err != nil {
			t.Fatalf("%q: %v", doc, err)
		}
	}
	if err := ok.add(newDecoder(t), []byte("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: x\n")); err == nil || !strings.Contains(err.Error(), "defined twice") {
		t.Fatalf("a second ConfigMap x: got %v, want defined twice", err)
	}
}
