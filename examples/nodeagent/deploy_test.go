package main

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/clientcmd"
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
	var cm *corev1.ConfigMap
	kinds := map[string]int{}
	for _, o := range deployObjects(t) {
		kinds[o.GetObjectKind().GroupVersionKind().Kind]++
		switch o := o.(type) {
		case *rbacv1.ClusterRole:
			role = o
		case *appsv1.DaemonSet:
			ds = o
		case *corev1.ConfigMap:
			cm = o
		}
	}
	if diff := cmp.Diff(map[string]int{"ServiceAccount": 1, "ClusterRole": 1, "ClusterRoleBinding": 1, "DaemonSet": 1, "ConfigMap": 1}, kinds); diff != "" {
		t.Errorf("kinds (-want +got):\n%s", diff)
	}
	// What informer.Source lists and watches and the event recorder
	// writes, and nothing more.
	wantRules := []rbacv1.PolicyRule{
		{APIGroups: []string{""}, Resources: []string{"services", "nodes"}, Verbs: []string{"list", "watch"}},
		{APIGroups: []string{"discovery.k8s.io"}, Resources: []string{"endpointslices"}, Verbs: []string{"list", "watch"}},
		{APIGroups: []string{"networking.k8s.io"}, Resources: []string{"servicecidrs"}, Verbs: []string{"list", "watch"}},
		{APIGroups: []string{"", "events.k8s.io"}, Resources: []string{"events"}, Verbs: []string{"create", "patch"}},
	}
	if diff := cmp.Diff(wantRules, role.Rules); diff != "" {
		t.Errorf("ClusterRole rules (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(role.Rules, readmeRBAC(t)); diff != "" {
		t.Errorf("README.md's RBAC table against deploy/rbac.yaml (-file +README):\n%s", diff)
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
	want := podShape{true, "system-node-critical", true, []string{"/var/lib/kube-proxy", "/run/xtables.lock", "/lib/modules"}, true}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("DaemonSet pod (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"/usr/local/bin/nodeagent", "--config=/var/lib/kube-proxy/config.conf", "--hostname-override=$(NODE_NAME)"}, c.Command); diff != "" {
		t.Errorf("command, kubeadm's kube-proxy's (-want +got):\n%s", diff)
	}
	if v := spec.Volumes[0]; v.ConfigMap == nil || v.ConfigMap.Name != cm.Name {
		t.Errorf("the first volume is not the ConfigMap %s: %+v", cm.Name, v)
	}

	// The ConfigMap's files, written where the DaemonSet mounts them,
	// make a valid agent that warns about nothing.
	dir := t.TempDir()
	for _, f := range []string{"config.conf", "kubeconfig.conf"} {
		if err := os.WriteFile(filepath.Join(dir, f), []byte(cm.Data[f]), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	o, err := parse([]string{"--config", filepath.Join(dir, "config.conf"), "--hostname-override", "node-a"}, io.Discard)
	if err != nil {
		t.Fatalf("config.conf: %v", err)
	}
	if len(o.warnings) > 0 || o.cfg.ClientConnection.Kubeconfig != "/var/lib/kube-proxy/kubeconfig.conf" || o.proxyMode != "iptables" {
		t.Errorf("config.conf: warnings %q, kubeconfig %q, mode %q", o.warnings, o.cfg.ClientConnection.Kubeconfig, o.proxyMode)
	}
	kc, err := clientcmd.LoadFromFile(filepath.Join(dir, "kubeconfig.conf"))
	if err != nil {
		t.Fatalf("kubeconfig.conf: %v", err)
	}
	if u := kc.AuthInfos["default"]; u == nil || u.TokenFile != "/var/run/secrets/kubernetes.io/serviceaccount/token" {
		t.Errorf("kubeconfig.conf does not use the pod's service account token: %+v", u)
	}
}

// readmeRBAC reads the README's table of the ClusterRole's rules: API
// groups, resources and verbs, each a comma-separated list of quoted
// names (`""` is the core group).
func readmeRBAC(t *testing.T) []rbacv1.PolicyRule {
	t.Helper()
	data, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, table, ok := strings.Cut(string(data), "<!-- BEGIN rbac -->\n")
	table, _, ok2 := strings.Cut(table, "<!-- END rbac -->")
	if !ok || !ok2 {
		t.Fatal("README.md has no <!-- BEGIN rbac --> ... <!-- END rbac --> table")
	}
	names := func(cell string) []string {
		var out []string
		for _, n := range strings.Split(cell, ",") {
			n = strings.Trim(strings.TrimSpace(n), "`")
			if n == `""` {
				n = ""
			}
			out = append(out, n)
		}
		return out
	}
	var rules []rbacv1.PolicyRule
	for i, line := range strings.Split(strings.TrimSpace(table), "\n") {
		cells := strings.Split(strings.Trim(line, "|"), "|")
		if i < 2 {
			continue // the header and its rule
		}
		if len(cells) != 4 {
			t.Fatalf("README.md's RBAC table: %q: want 4 columns", line)
		}
		rules = append(rules, rbacv1.PolicyRule{APIGroups: names(cells[0]), Resources: names(cells[1]), Verbs: names(cells[2])})
	}
	return rules
}
