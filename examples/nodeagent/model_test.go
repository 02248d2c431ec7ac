package main

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/proxykit/proxykit/dataplane"
	v1 "k8s.io/api/core/v1"
)

// TestSubcommandsReadTheRunningAgent runs an agent (a dry run following
// manifests) and asks it with --agent: list, diagnose and explain answer
// as they do from the same manifests, and follow the agent when a
// manifest changes.
func TestSubcommandsReadTheRunningAgent(t *testing.T) {
	t.Setenv("KUBERNETES_SERVICE_HOST", "")
	dir := t.TempDir()
	entries, err := demoFS.ReadDir("demo")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		data, err := demoFS.ReadFile("demo/" + e.Name())
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, e.Name()), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	metrics := freeAddr(t)
	flags := []string{"--hostname-override", "demo-node", "--cluster-cidr", "10.244.0.0/16,fd00:10:244::/48", "--proxy-mode", "nftables"}
	ctx, cancel := context.WithCancel(context.Background())
	var out, errOut lockedBuffer
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, append([]string{"--manifests", dir, "--dry-run", "--metrics-bind-address", metrics}, flags...), &out, &errOut)
	}()
	defer func() {
		cancel()
		if code := <-done; code != exitOK {
			t.Errorf("agent: exit %d, stderr:\n%s", code, errOut.String())
		}
	}()
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if code, _ := get(t, "http://"+metrics+statesPath); code == http.StatusOK {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no model served; stderr:\n%s", errOut.String())
		}
	}

	commands := [][]string{
		{"list"},
		{"list", "--type", "NodePort", "-o", "json"},
		{"diagnose", "default/web"},
		{"diagnose", "default/empty", "-o", "json"},
		{"explain", "10.244.0.5", "10.96.0.10:53/UDP"},
		{"explain", "fd00:10:244::5", "[fd00:10:96::10]:53/UDP"},
	}
	for _, c := range commands {
		wantCode, want, wantErr := runAgent(t, append(append([]string{"--manifests", dir}, flags...), c...)...)
		code, got, gotErr := runAgent(t, append([]string{"--agent", metrics}, c...)...)
		if code != wantCode || got != want {
			t.Errorf("%s: exit %d with --agent, %d from the manifests; output (-manifests +agent):\n%s\nstderr:\n%s\n%s",
				strings.Join(c, " "), code, wantCode, cmp.Diff(want, got), gotErr, wantErr)
		}
	}

	// The answer follows the agent, not the files: a service deleted
	// while the agent runs is gone from its model once it synced.
	if err := os.Remove(filepath.Join(dir, "web.yaml")); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		code, got, _ := runAgent(t, "--agent", "http://"+metrics+"/", "diagnose", "default/web")
		if code == exitFailure && strings.Contains(got, "verdict: no Service default/web is proxied here") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("diagnose --agent still finds default/web (exit %d):\n%s", code, got)
		}
	}
}

func TestStatesHandler(t *testing.T) {
	st := demoStates(t)[0]
	var synced, idle atomic.Pointer[dataplane.State]
	synced.Store(st)
	o := &options{proxyMode: "iptables"}
	cases := []struct {
		name, remote string
		last         *atomic.Pointer[dataplane.State]
		code         int
		body         string
	}{
		{"loopback", "127.0.0.1:40000", &synced, http.StatusOK, `{"mode":"iptables","states":[{"version":1,"family":"IPv4"`},
		{"IPv6 loopback", "[::1]:40000", &synced, http.StatusOK, `{"mode":"iptables"`},
		{"another host", "192.0.2.7:40000", &synced, http.StatusForbidden, "clients on this node only"},
		{"before the first sync", "127.0.0.1:40000", &idle, http.StatusServiceUnavailable, "not programmed its first sync yet"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			req := httptest.NewRequest(http.MethodGet, statesPath, nil)
			req.RemoteAddr = tc.remote
			w := httptest.NewRecorder()
			o.statesHandler([]plane{{last: tc.last, family: v1.IPv4Protocol}}).ServeHTTP(w, req)
			if w.Code != tc.code || !strings.Contains(w.Body.String(), tc.body) {
				t.Errorf("%d %q, want %d and %q", w.Code, w.Body.String(), tc.code, tc.body)
			}
		})
	}
}

// TestAgentFlagErrors: what --agent says when there is no agent to read,
// or it cannot be the one the command line means.
func TestAgentFlagErrors(t *testing.T) {
	notAgent := httptest.NewServer(http.NotFoundHandler())
	defer notAgent.Close()
	ipvsAgent := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = w.Write([]byte(`{"mode":"ipvs","states":[{"version":1,"family":"IPv4","node":{"name":"n"},"settings":{"localDetector":{}},"services":[],"endpoints":[]}]}`))
	}))
	defer ipvsAgent.Close()
	nullAgent := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = w.Write([]byte(`{"mode":"iptables","states":[null]}`))
	}))
	defer nullAgent.Close()
	badAgent := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = w.Write([]byte(`{"mode":"iptables","states":[{"version":1,"family":"IPv4","services":[{"namespace":"a","name":"b","protocol":"TCP","clusterIP":"fd00::1","port":80}]}]}`))
	}))
	defer badAgent.Close()
	closed := freeAddr(t)
	cases := []struct {
		args []string
		code int
		err  string
	}{
		{[]string{"--agent", closed, "list"}, exitFailure, "--agent " + closed + ": no agent listens there (its --metrics-bind-address, 127.0.0.1:10249 by default)"},
		{[]string{"--agent", notAgent.URL, "list"}, exitFailure, "404 Not Found: it serves no model at /proxykit/states (not a proxykit node agent, or an older one)"},
		{[]string{"--agent", ipvsAgent.URL, "--proxy-mode", "iptables", "list"}, exitFailure, "--proxy-mode iptables, but the agent at " + ipvsAgent.URL + " runs in mode ipvs"},
		{[]string{"--agent", ipvsAgent.URL, "explain", "fd00::1", "[fd00::2]:80"}, exitFailure, "the agent at " + ipvsAgent.URL + " proxies no IPv6"},
		{[]string{"--agent", nullAgent.URL, "list"}, exitFailure, "the agent sent no model"},
		{[]string{"--agent", badAgent.URL, "list"}, exitFailure, "not a proxykit State: service port a/b clusterIP: fd00::1 is not IPv4"},
		{[]string{"--agent", closed, "--manifests", "demo", "list"}, exitUsage, "--agent reads the running agent's model: --manifests, --kubeconfig, --master and --demo build another"},
		{[]string{"--agent", closed}, exitUsage, "--agent applies to a subcommand only"},
	}
	for _, tc := range cases {
		code, _, stderr := runAgent(t, tc.args...)
		if code != tc.code || !strings.Contains(stderr, tc.err) {
			t.Errorf("%s: exit %d, stderr:\n%s\nwant exit %d and %q", strings.Join(tc.args, " "), code, stderr, tc.code, tc.err)
		}
	}
	// The ipvs agent's empty model answers in its mode.
	code, out, stderr := runAgent(t, "--agent", ipvsAgent.URL, "list")
	if code != exitOK || out != "FRONTEND  TYPE  SERVICE  BACKENDS\n" {
		t.Errorf("list of an empty model: exit %d, stdout %q, stderr:\n%s", code, out, stderr)
	}
}
