package main

import (
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/google/go-cmp/cmp"
	mobyipvs "github.com/moby/ipvs"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/proxykit/proxykit/dataplane/ipvs"
	"github.com/proxykit/proxykit/dataplane/ipvs/ipvstest"
	v1 "k8s.io/api/core/v1"
)

// programmedIPVSDemo is a fake machine on which the agent programmed the
// demo manifests once in mode ipvs.
func programmedIPVSDemo(t *testing.T) (host, *fakeIPVSHost) {
	t.Helper()
	fh := newFakeIPVSHost(false)
	h := fh.host()
	if code, _, errOut := runOnHost(t, h, "--demo", "--proxy-mode", "ipvs", "--once"); code != exitOK {
		t.Fatalf("--once: exit %d, stderr:\n%s", code, errOut)
	}
	return h, fh
}

// delRealServer deletes real server dest of the TCP virtual server vs
// by hand, as ipvsadm -d would.
func delRealServer(t *testing.T, fi *ipvstest.FakeIPVS, vs, dest string) {
	t.Helper()
	v, d := netip.MustParseAddrPort(vs), netip.MustParseAddrPort(dest)
	svc := &mobyipvs.Service{AddressFamily: 2, Address: net.IP(v.Addr().AsSlice()), Protocol: 6, Port: v.Port()}
	if err := fi.DelDestination(svc, &mobyipvs.Destination{Address: net.IP(d.Addr().AsSlice()), Port: d.Port()}); err != nil {
		t.Fatal(err)
	}
}

func TestVerifyIPVS(t *testing.T) {
	h, fh := programmedIPVSDemo(t)
	code, out, errOut := runOnHost(t, h, "--proxy-mode", "ipvs", "verify")
	if code != exitOK || out != "OK: the kernel's rules do what the model says for 8 service ports (IPv4, IPv6)\n" {
		t.Fatalf("in sync: exit %d, stdout %q, stderr:\n%s", code, out, errOut)
	}
	delRealServer(t, fh.ipvs[v1.IPv4Protocol], "10.96.10.10:80", "10.244.1.12:8080")
	code, out, errOut = runOnHost(t, h, "--proxy-mode", "ipvs", "verify")
	wantOut := "default/web:http/TCP: wrong-endpoints at 10.96.10.10:80/TCP (cluster IP) from 198.51.100.7: missing 10.244.1.12:8080\n"
	if code != exitFailure || !strings.Contains(errOut, "the kernel's rules differ from the model for default/web:http/TCP\n") {
		t.Errorf("after a real server deleted by hand: exit %d, stderr:\n%s", code, errOut)
	}
	if diff := cmp.Diff(wantOut, out); diff != "" {
		t.Errorf("stdout (-want +got):\n%s", diff)
	}
}

func TestExplainKernelIPVS(t *testing.T) {
	h, fh := programmedIPVSDemo(t)
	code, out, errOut := runOnHost(t, h, "--proxy-mode", "ipvs", "explain", "10.244.0.9", "10.96.10.10:80", "--kernel")
	if code != exitOK {
		t.Fatalf("exit %d, stdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
	want := "  ipvs: virtual server TCP 10.96.10.10:80 rr: real servers 10.244.0.11:8080 weight 1, 10.244.1.12:8080 weight 1, 10.244.2.13:8080 weight 1\n"
	if !strings.Contains(out, want) || !strings.Contains(out, "agrees:     yes") {
		t.Errorf("stdout lacks %q or the agreement:\n%s", want, out)
	}
	delRealServer(t, fh.ipvs[v1.IPv4Protocol], "10.96.10.10:80", "10.244.1.12:8080")
	code, out, _ = runOnHost(t, h, "--proxy-mode", "ipvs", "explain", "10.244.0.9", "10.96.10.10:80", "--kernel")
	if code != exitFailure || !strings.Contains(out, "DISAGREES:  wrong-endpoints: missing 10.244.1.12:8080") {
		t.Errorf("after a real server deleted by hand: exit %d:\n%s", code, out)
	}
}

// TestVerifierIPVS: the periodic check of an IPVS plane reads the kernel
// through the plane's dataplane and counts a real server deleted by hand.
func TestVerifierIPVS(t *testing.T) {
	states := demoStates(t)
	fh := newFakeIPVSHost(false)
	fi, nl, r := fh.ipvs[v1.IPv4Protocol], fh.nl[v1.IPv4Protocol], fh.runners[v1.IPv4Protocol]
	d, err := ipvs.New(ipvs.Config{Kernel: &ipvstest.Kernel{IPVS: fi, Netlink: nl}, Runner: r})
	if err != nil {
		t.Fatal(err)
	}
	rec := &recordedIPVS{Dataplane: d, family: v1.IPv4Protocol}
	if err := rec.Sync(t.Context(), states[0]); err != nil {
		t.Fatal(err)
	}
	pl := plane{Dataplane: rec, last: &rec.last, family: v1.IPv4Protocol}
	o := &options{proxyMode: "ipvs", verifyPeriod: time.Hour}
	v, err := o.newVerifier(fh.host(), logr.Discard(), prometheus.NewRegistry(), []plane{pl})
	if err != nil {
		t.Fatal(err)
	}
	v.check(t.Context(), pl)
	if got := value(t, v.drifts.WithLabelValues("IPv4")); got != 0 {
		t.Errorf("in sync: drifts = %v, want 0", got)
	}
	delRealServer(t, fi, "10.96.10.10:80", "10.244.1.12:8080")
	v.check(t.Context(), pl)
	if got := value(t, v.total.WithLabelValues("IPv4", "wrong-endpoints")); got != 1 {
		t.Errorf("after a real server deleted by hand: wrong-endpoints = %v, want 1", got)
	}
}

func TestDiagnoseKernelIPVS(t *testing.T) {
	h, fh := programmedIPVSDemo(t)
	code, out, errOut := runOnHost(t, h, "--proxy-mode", "ipvs", "diagnose", "default/web", "--kernel")
	if code != exitOK || !strings.HasSuffix(out, "verdict: OK: 3 endpoints, rules in place\n") {
		t.Errorf("exit %d, stdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
	delRealServer(t, fh.ipvs[v1.IPv4Protocol], "10.96.10.10:80", "10.244.1.12:8080")
	code, out, _ = runOnHost(t, h, "--proxy-mode", "ipvs", "diagnose", "default/web", "--kernel")
	if code != exitFailure || !strings.Contains(out, "wrong-endpoints") {
		t.Errorf("after a real server deleted by hand: exit %d, stdout:\n%s", code, out)
	}
}
