package main

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
	appsv1 "k8s.io/api/apps/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/kubernetes/scheme"
)

// deployObjects strictly decodes every manifest under deploy/, so that a
// typo in a field name fails here rather than at kubectl apply.
func deployObjects(t *testing.T) []runtime.Object {
	t.Helper()
	files, err := filepath.Glob("deploy/*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no deploy manifests: %v", err)
	}
	dec := serializer.NewCodecFactory(scheme.Scheme, serializer.EnableStrict).UniversalDeserializer()
	var objs []runtime.Object
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
		for {
			doc, err := r.Read()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatalf("%s: %v", f, err)
			}
			if len(bytes.TrimSpace(doc)) == 0 {
				continue
			}
			o, _, err := dec.Decode(doc, nil, nil)
			if err != nil {
				t.Fatalf("%s: %v", f, err)
			}
			objs = append(objs, o)
		}
	}
	return objs
}

func TestDeployManifests(t *testing.T) {
	var role *rbacv1.ClusterRole
	var ds *appsv1.DaemonSet
	kinds := map[string]int{}
	for _, o := range deployObjects(t) {
		kinds[o.GetObjectKind().GroupVersionKind().Kind]++
		switch o := o.(type) {
		case *rbacv1.ClusterRole:
			role = o
		case *appsv1.DaemonSet:
			ds = o
		}
	}
	if diff := cmp.Diff(map[string]int{"ServiceAccount": 1, "ClusterRole": 1, "ClusterRoleBinding": 1, "DaemonSet": 1}, kinds); diff != "" {
		t.Errorf("kinds (-want +got):\n%s", diff)
	}
	// What informer.Source lists and watches and the event recorder
	// writes, and nothing more.
	wantRules := []rbacv1.PolicyRule{
		{APIGroups: []string{""}, Resources: []string{"services", "nodes"}, Verbs: []string{"list", "watch"}},
		{APIGroups: []string{"discovery.k8s.io"}, Resources: []string{"endpointslices"}, Verbs: []string{"list", "watch"}},
		{APIGroups: []string{"", "events.k8s.io"}, Resources: []string{"events"}, Verbs: []string{"create", "patch"}},
	}
	if diff := cmp.Diff(wantRules, role.Rules); diff != "" {
		t.Errorf("ClusterRole rules (-want +got):\n%s", diff)
	}
	spec := ds.Spec.Template.Spec
	c := spec.Containers[0]
	type podShape struct {
		HostNetwork       bool
		PriorityClassName string
		Privileged        bool
		Mounts            []string
		TolerateAll       bool
	}
	got := podShape{
		HostNetwork:       spec.HostNetwork,
		PriorityClassName: spec.PriorityClassName,
		Privileged:        c.SecurityContext != nil && c.SecurityContext.Privileged != nil && *c.SecurityContext.Privileged,
		TolerateAll:       len(spec.Tolerations) == 1 && spec.Tolerations[0].Operator == "Exists" && spec.Tolerations[0].Key == "",
	}
	for _, m := range c.VolumeMounts {
		got.Mounts = append(got.Mounts, m.MountPath)
	}
	want := podShape{true, "system-node-critical", true, []string{"/run/xtables.lock", "/lib/modules"}, true}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("DaemonSet pod (-want +got):\n%s", diff)
	}
}
