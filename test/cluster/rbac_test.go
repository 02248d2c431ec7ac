package cluster

import (
	"context"
	"fmt"
	"regexp"
	"slices"
	"sort"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// forbids matches the agent's report of a refused call.
var forbids = regexp.MustCompile(`"The API server forbids a call the source needs; it waits until permission is granted".*source="informers" verb="(\w+)" resource="([\w.]+)"`)

// TestRBAC runs the agent with the DaemonSet's ClusterRole less some
// access: it must say once which verb on which resource it lacks, and
// converge once the DaemonSet's role is back.
func TestRBAC(t *testing.T) {
	bins, agent := binaries(t)
	lab := NewLab(t, bins, agent, LabConfig{Nodes: 1, NoAgents: true})
	ctx := context.Background()
	roles := lab.CP.Admin.RbacV1().ClusterRoles()
	full, err := roles.Get(ctx, agentSA, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	without := func(group, resource string, verbs ...string) []rbacv1.PolicyRule {
		var out []rbacv1.PolicyRule
		for _, r := range full.Rules {
			r = *r.DeepCopy()
			if slices.Contains(r.APIGroups, group) && slices.Contains(r.Resources, resource) {
				rest := slices.DeleteFunc(slices.Clone(r.Resources), func(s string) bool { return s == resource })
				if len(rest) > 0 {
					out = append(out, rbacv1.PolicyRule{APIGroups: r.APIGroups, Resources: rest, Verbs: r.Verbs})
				}
				if v := slices.DeleteFunc(slices.Clone(r.Verbs), func(s string) bool { return slices.Contains(verbs, s) }); len(v) > 0 {
					out = append(out, rbacv1.PolicyRule{APIGroups: r.APIGroups, Resources: []string{resource}, Verbs: v})
				}
				continue
			}
			out = append(out, r)
		}
		return out
	}
	setRules := func(t *testing.T, rules []rbacv1.PolicyRule) {
		t.Helper()
		role, err := roles.Get(ctx, agentSA, metav1.GetOptions{})
		if err == nil {
			role.Rules = rules
			_, err = roles.Update(ctx, role, metav1.UpdateOptions{})
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	n := lab.Nodes[0]
	for _, tc := range []struct {
		name  string
		rules []rbacv1.PolicyRule
		want  []string
	}{
		{"no watch on EndpointSlices", without("discovery.k8s.io", "endpointslices", "watch"), []string{"watch endpointslices.discovery.k8s.io"}},
		{"no access to EndpointSlices", without("discovery.k8s.io", "endpointslices", "list", "watch"), []string{"list endpointslices.discovery.k8s.io", "watch endpointslices.discovery.k8s.io"}},
		{"no access to Services", without("", "services", "list", "watch"), []string{"list services", "watch services"}},
		{"no access to Nodes", without("", "nodes", "list", "watch"), []string{"list nodes", "watch nodes"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			setRules(t, tc.rules)
			logBefore := len(n.AgentLog())
			n.StartAgent()
			defer n.KillAgent()
			said := func() []string {
				var out []string
				for _, m := range forbids.FindAllStringSubmatch(n.AgentLog()[logBefore:], -1) {
					out = append(out, m[1]+" "+m[2])
				}
				sort.Strings(out)
				return out
			}
			eventually(t, 20*time.Second, "the agent names what it lacks", func() error {
				if len(said()) < len(tc.want) {
					return fmt.Errorf("said %v", said())
				}
				return nil
			})
			// Several of client-go's retries later, it has still said it once.
			time.Sleep(5 * time.Second)
			if diff := cmp.Diff(tc.want, said()); diff != "" {
				t.Errorf("forbidden calls reported (-want +got):\n%s\nlog:\n%s", diff, n.AgentLog()[logBefore:])
			}
		})
	}
	t.Run("DaemonSet role", func(t *testing.T) {
		setRules(t, full.Rules)
		n.StartAgent()
		svc, err := Apply(ctx, lab.CP.Admin, NewService("rbac", 80), n.Pods[0])
		if err != nil {
			t.Fatal(err)
		}
		eventually(t, 30*time.Second, "served with the DaemonSet's role", func() error { return servedBy(n.Pods[0], ClusterAddr(svc), n.Pods[0]) })
	})
}
