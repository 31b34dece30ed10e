// Package kubernetes holds example manifests; its test decodes them.
package kubernetes

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// The fields of the Kubernetes API these manifests use, decoded strictly:
// a misspelt or misplaced field fails the test, as it would fail
// `kubectl apply --validate=strict`.

type meta struct {
	Name   string            `json:"name"`
	Labels map[string]string `json:"labels,omitempty"`
}

type header struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
}

type configMap struct {
	header
	Metadata meta              `json:"metadata"`
	Data     map[string]string `json:"data"`
}

type secret struct {
	header
	Metadata   meta              `json:"metadata"`
	Type       string            `json:"type"`
	StringData map[string]string `json:"stringData"`
}

type serviceAccount struct {
	header
	Metadata                     meta  `json:"metadata"`
	AutomountServiceAccountToken *bool `json:"automountServiceAccountToken"`
}

type selector struct {
	MatchLabels map[string]string `json:"matchLabels"`
}

type probe struct {
	HTTPGet struct {
		Path string `json:"path"`
		Port string `json:"port"`
	} `json:"httpGet"`
	PeriodSeconds    int `json:"periodSeconds"`
	TimeoutSeconds   int `json:"timeoutSeconds,omitempty"`
	FailureThreshold int `json:"failureThreshold,omitempty"`
}

type container struct {
	Name    string   `json:"name"`
	Image   string   `json:"image"`
	Command []string `json:"command,omitempty"`
	Args    []string `json:"args"`
	Env     []struct {
		Name      string `json:"name"`
		Value     string `json:"value,omitempty"`
		ValueFrom *struct {
			FieldRef struct {
				FieldPath string `json:"fieldPath"`
			} `json:"fieldRef"`
		} `json:"valueFrom,omitempty"`
	} `json:"env"`
	EnvFrom []struct {
		ConfigMapRef struct {
			Name string `json:"name"`
		} `json:"configMapRef"`
	} `json:"envFrom"`
	Ports []struct {
		Name          string `json:"name"`
		ContainerPort int    `json:"containerPort"`
	} `json:"ports"`
	LivenessProbe  *probe `json:"livenessProbe"`
	ReadinessProbe *probe `json:"readinessProbe"`
	Resources      struct {
		Requests map[string]string `json:"requests,omitempty"`
		Limits   map[string]string `json:"limits,omitempty"`
	} `json:"resources"`
	SecurityContext struct {
		AllowPrivilegeEscalation *bool `json:"allowPrivilegeEscalation"`
		ReadOnlyRootFilesystem   *bool `json:"readOnlyRootFilesystem"`
		Capabilities             struct {
			Drop []string `json:"drop"`
		} `json:"capabilities"`
	} `json:"securityContext"`
	VolumeMounts []struct {
		Name      string `json:"name"`
		MountPath string `json:"mountPath"`
		ReadOnly  bool   `json:"readOnly"`
	} `json:"volumeMounts"`
}

type deployment struct {
	header
	Metadata meta `json:"metadata"`
	Spec     struct {
		Replicas int      `json:"replicas"`
		Selector selector `json:"selector"`
		Strategy struct {
			Type          string `json:"type"`
			RollingUpdate struct {
				MaxUnavailable int `json:"maxUnavailable"`
				MaxSurge       int `json:"maxSurge"`
			} `json:"rollingUpdate"`
		} `json:"strategy"`
		Template struct {
			Metadata meta `json:"metadata"`
			Spec     struct {
				ServiceAccountName            string `json:"serviceAccountName"`
				AutomountServiceAccountToken  *bool  `json:"automountServiceAccountToken"`
				TerminationGracePeriodSeconds int    `json:"terminationGracePeriodSeconds"`
				Affinity                      struct {
					PodAntiAffinity struct {
						Preferred []struct {
							Weight          int `json:"weight"`
							PodAffinityTerm struct {
								TopologyKey   string   `json:"topologyKey"`
								LabelSelector selector `json:"labelSelector"`
							} `json:"podAffinityTerm"`
						} `json:"preferredDuringSchedulingIgnoredDuringExecution"`
					} `json:"podAntiAffinity"`
				} `json:"affinity"`
				SecurityContext struct {
					RunAsNonRoot bool `json:"runAsNonRoot"`
					RunAsUser    int  `json:"runAsUser"`
					FSGroup      int  `json:"fsGroup"`
				} `json:"securityContext"`
				Containers []container `json:"containers"`
				Volumes    []struct {
					Name   string `json:"name"`
					Secret struct {
						SecretName  string `json:"secretName"`
						DefaultMode int    `json:"defaultMode"`
					} `json:"secret"`
				} `json:"volumes"`
			} `json:"spec"`
		} `json:"template"`
	} `json:"spec"`
}

type podDisruptionBudget struct {
	header
	Metadata meta `json:"metadata"`
	Spec     struct {
		MinAvailable int      `json:"minAvailable"`
		Selector     selector `json:"selector"`
	} `json:"spec"`
}

type manifests struct {
	configMaps  map[string]configMap
	secrets     map[string]secret
	accounts    map[string]serviceAccount
	deployments map[string]deployment
	pdbs        map[string]podDisruptionBudget
}

func load(t *testing.T) manifests {
	t.Helper()
	m := manifests{map[string]configMap{}, map[string]secret{}, map[string]serviceAccount{}, map[string]deployment{}, map[string]podDisruptionBudget{}}
	files, err := filepath.Glob("*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no manifests: %v", err)
	}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for i, doc := range bytes.Split(data, []byte("\n---\n")) {
			where := fmt.Sprintf("%s, document %d", f, i+1)
			var h header
			if err := yaml.Unmarshal(doc, &h); err != nil {
				t.Fatalf("%s: %v", where, err)
			}
			decode := func(v any) {
				if err := yaml.UnmarshalStrict(doc, v); err != nil {
					t.Fatalf("%s (%s): %v", where, h.Kind, err)
				}
			}
			switch h.APIVersion + " " + h.Kind {
			case "v1 ConfigMap":
				var v configMap
				decode(&v)
				m.configMaps[v.Metadata.Name] = v
			case "v1 Secret":
				var v secret
				decode(&v)
				m.secrets[v.Metadata.Name] = v
			case "v1 ServiceAccount":
				var v serviceAccount
				decode(&v)
				m.accounts[v.Metadata.Name] = v
			case "apps/v1 Deployment":
				var v deployment
				decode(&v)
				m.deployments[v.Metadata.Name] = v
			case "policy/v1 PodDisruptionBudget":
				var v podDisruptionBudget
				decode(&v)
				m.pdbs[v.Metadata.Name] = v
			default:
				t.Fatalf("%s: unexpected %q %q", where, h.APIVersion, h.Kind)
			}
		}
	}
	return m
}

func TestManifestsDecodeStrictlyAndReferToEachOther(t *testing.T) {
	m := load(t)
	if len(m.deployments) != 2 {
		t.Fatalf("%d deployments, want the library one and the wrapper one", len(m.deployments))
	}
	for name, d := range m.deployments {
		s := d.Spec.Template.Spec
		if d.Spec.Replicas != 3 {
			t.Errorf("%s: %d replicas, want 3", name, d.Spec.Replicas)
		}
		for k, v := range d.Spec.Selector.MatchLabels {
			if d.Spec.Template.Metadata.Labels[k] != v {
				t.Errorf("%s: the selector's %s=%s does not match the pod template", name, k, v)
			}
		}
		if _, ok := m.accounts[s.ServiceAccountName]; !ok {
			t.Errorf("%s: service account %q not defined", name, s.ServiceAccountName)
		}
		if s.AutomountServiceAccountToken == nil || *s.AutomountServiceAccountToken {
			t.Errorf("%s: mounts a Kubernetes API token it does not need", name)
		}
		if !s.SecurityContext.RunAsNonRoot || s.SecurityContext.FSGroup == 0 {
			t.Errorf("%s: want non-root with an fsGroup that can read the secret", name)
		}
		volumes := map[string]string{}
		for _, v := range s.Volumes {
			if _, ok := m.secrets[v.Secret.SecretName]; !ok {
				t.Errorf("%s: secret %q not defined", name, v.Secret.SecretName)
			}
			if v.Secret.DefaultMode&0o040 == 0 {
				t.Errorf("%s: secret mode %o unreadable by the fsGroup", name, v.Secret.DefaultMode)
			}
			volumes[v.Name] = v.Secret.SecretName
		}
		if len(s.Containers) != 1 {
			t.Fatalf("%s: %d containers", name, len(s.Containers))
		}
		c := s.Containers[0]
		checkContainer(t, name, c, m, volumes)
		checkGrace(t, name, c, s.TerminationGracePeriodSeconds)
	}
	for name, p := range m.pdbs {
		d, ok := m.deployments[name]
		if !ok || fmt.Sprint(p.Spec.Selector.MatchLabels) != fmt.Sprint(d.Spec.Selector.MatchLabels) {
			t.Errorf("PodDisruptionBudget %s selects no deployment", name)
		}
		if ok && p.Spec.MinAvailable >= d.Spec.Replicas {
			t.Errorf("PodDisruptionBudget %s: minAvailable %d blocks every eviction", name, p.Spec.MinAvailable)
		}
	}
}

func checkContainer(t *testing.T, name string, c container, m manifests, volumes map[string]string) {
	t.Helper()
	if c.Image == "" {
		t.Errorf("%s: no image", name)
	}
	ports := map[string]int{}
	for _, p := range c.Ports {
		ports[p.Name] = p.ContainerPort
	}
	for what, p := range map[string]*probe{"liveness": c.LivenessProbe, "readiness": c.ReadinessProbe} {
		if p == nil {
			t.Errorf("%s: no %s probe", name, what)
			continue
		}
		if p.HTTPGet.Path != "/healthz" || ports[p.HTTPGet.Port] == 0 {
			t.Errorf("%s: %s probe on %s port %q, want /healthz on a declared port", name, what, p.HTTPGet.Path, p.HTTPGet.Port)
		}
	}
	// The probed port is the one the program listens on.
	port := fmt.Sprintf(":%d", ports["metrics"])
	args := strings.Join(c.Args, " ")
	if !strings.Contains(args, "--metrics-listen="+port) && !strings.Contains(args, "--listen "+port) {
		t.Errorf("%s: args %q do not listen on the probed port %s", name, args, port)
	}
	for _, e := range c.EnvFrom {
		cm, ok := m.configMaps[e.ConfigMapRef.Name]
		if !ok {
			t.Errorf("%s: config map %q not defined", name, e.ConfigMapRef.Name)
			continue
		}
		// Certificate paths point into the mounted secret, at keys it has.
		for _, k := range []string{"BATON_CACERT", "BATON_CERT", "BATON_KEY"} {
			dir, file := filepath.Split(cm.Data[k])
			found := false
			for _, vm := range c.VolumeMounts {
				if filepath.Clean(dir) == vm.MountPath {
					_, found = m.secrets[volumes[vm.Name]].StringData[file]
				}
			}
			if !found {
				t.Errorf("%s: %s=%q is not a key of a mounted secret", name, k, cm.Data[k])
			}
		}
		if cm.Data["BATON_ENDPOINTS"] == "" {
			t.Errorf("%s: no BATON_ENDPOINTS", name)
		}
	}
	var podName bool
	for _, e := range c.Env {
		podName = podName || e.Name == "POD_NAME" && e.ValueFrom != nil && e.ValueFrom.FieldRef.FieldPath == "metadata.name"
	}
	if !podName {
		t.Errorf("%s: POD_NAME is not the pod's name", name)
	}
	if sc := c.SecurityContext; sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation || !slices.Contains(sc.Capabilities.Drop, "ALL") {
		t.Errorf("%s: the container may escalate or keeps capabilities", name)
	}
}

// checkGrace: with baton elect, the kubelet's SIGKILL must come after
// baton's own stop of the command (--grace) and its resignation.
func checkGrace(t *testing.T, name string, c container, podGrace int) {
	t.Helper()
	if len(c.Command) == 0 {
		return
	}
	if !slices.Contains(c.Args, "elect") || !slices.Contains(c.Args, "--") || !slices.Contains(c.Args, "$(POD_NAME)") {
		t.Errorf("%s: want baton elect NAME $(POD_NAME) -- CMD, got %q", name, c.Args)
	}
	for _, a := range c.Args {
		var secs int
		if _, err := fmt.Sscanf(a, "--grace=%ds", &secs); err == nil && podGrace < secs+10 {
			t.Errorf("%s: terminationGracePeriodSeconds %d leaves baton's --grace %ds no room to resign", name, podGrace, secs)
		}
	}
}
