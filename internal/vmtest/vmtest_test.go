package vmtest

import (
	"bytes"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/proxykit/proxykit/internal/netns"
)

// TestBoot boots the VM and runs TestInside there: the modules the IPVS
// dataplane needs load, namespaces and dummy links work, and the
// iptables tools find their extensions.
func TestBoot(t *testing.T) {
	res := Run(t, Config{
		Run:     "^TestInside$",
		Modules: []string{"ip_vs", "ip_vs_rr", "dummy"},
		Tools:   []string{"iptables-restore", "iptables-save"},
		Env:     []string{"VMTEST_PROBE=it's here"},
	})
	if !strings.Contains(res.Output, "--- PASS: TestInside") {
		t.Fatalf("TestInside did not pass in the VM:\n%s", res.Output)
	}
}

func TestInside(t *testing.T) {
	if !Inside() {
		t.Skip("runs only inside the VM TestBoot starts")
	}
	if got := os.Getenv("VMTEST_PROBE"); got != "it's here" {
		t.Errorf("Config.Env did not arrive: %q", got)
	}
	if _, err := os.Stat("/proc/net/ip_vs"); err != nil {
		t.Errorf("ip_vs is not loaded: %v", err)
	}
	if _, err := os.Stat("testdata/probe.txt"); err != nil {
		t.Errorf("the package's testdata is not in the working directory: %v", err)
	}
	ns := netns.New(t, "vm")
	ns.MustRun("ip", "link", "add", "pk0", "type", "dummy")
	ns.MustRun("ip", "addr", "add", "10.0.0.1/32", "dev", "pk0")
	cmd := ns.Command("iptables-restore", "--noflush")
	cmd.Stdin = strings.NewReader("*nat\n:PK-PROBE - [0:0]\n-A PK-PROBE -p tcp -m comment --comment probe -j DNAT --to-destination 10.0.0.2:80\nCOMMIT\n")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("iptables-restore: %v: %s", err, out)
	}
	if out := ns.MustRun("iptables-save", "-t", "nat"); !strings.Contains(out, "--comment probe") {
		t.Errorf("iptables-save does not show the rule:\n%s", out)
	}
}

func TestInitScriptQuotes(t *testing.T) {
	got := string(initScript(Config{Run: "^Test'X$", Modules: []string{"ip_vs"}, Env: []string{"A=b c"}, Args: []string{"-test.count=1"}}))
	want := "env PROXYKIT_IN_VM=1 PROXYKIT_REQUIRE_KERNEL=1 'A=b c' /pkg/pkg.test -test.v -test.run '^Test'\\''X$' '-test.count=1'\n"
	if !strings.Contains(got, want) {
		t.Errorf("init script lacks the test line\n%s", cmp.Diff(want, got))
	}
}

func TestExitCode(t *testing.T) {
	for _, tc := range []struct {
		out  string
		code int
		ok   bool
	}{
		{"boot\nvmtest-exit: 0\n", 0, true},
		{"vmtest-exit: 1\n", 1, true},
		{"kernel panic\n", 0, false},
		{"echo vmtest-exit: 3\nvmtest-exit: 2\n", 2, true},
	} {
		code, ok := exitCode(tc.out)
		if code != tc.code || ok != tc.ok {
			t.Errorf("exitCode(%q) = %d, %v; want %d, %v", tc.out, code, ok, tc.code, tc.ok)
		}
	}
}

func TestCPIO(t *testing.T) {
	im := newImage()
	im.bytes("/a/b", []byte("xyz"))
	im.link("/a/c", "b")
	var buf bytes.Buffer
	if err := im.writeTo(&buf); err != nil {
		t.Fatal(err)
	}
	if buf.Len()%4 != 0 {
		t.Errorf("archive length %d is not a multiple of 4", buf.Len())
	}
	var names []string
	for _, part := range strings.Split(buf.String(), "070701")[1:] {
		name := part[13*8:]
		names = append(names, name[:strings.IndexByte(name, 0)])
	}
	if diff := cmp.Diff([]string{"a", "a/c", "a/b", "TRAILER!!!"}, names); diff != "" {
		t.Errorf("entries (-want +got):\n%s", diff)
	}
}

// TestOmitModules: an omitted module stays out of the image even when it
// loads on demand or another module depends on it; one both loaded and
// omitted is an error.
func TestOmitModules(t *testing.T) {
	dir := t.TempDir()
	dep := "kernel/net/xfrm/xfrm_user.ko:\nkernel/net/key/af_key.ko: kernel/net/xfrm/xfrm_user.ko\nkernel/drivers/net/dummy.ko:\nkernel/fs/other.ko:\n"
	if err := os.WriteFile(dir+"/modules.dep", []byte(dep), 0o644); err != nil {
		t.Fatal(err)
	}
	im := newImage()
	if err := addModules(im, dir, nil, []string{"xfrm_user"}); err != nil {
		t.Fatal(err)
	}
	var got []string
	for p := range im.files {
		if strings.HasSuffix(p, ".ko") {
			got = append(got, p[strings.Index(p, "/kernel/")+1:])
		}
	}
	slices.Sort(got)
	if diff := cmp.Diff([]string{"kernel/drivers/net/dummy.ko", "kernel/net/key/af_key.ko"}, got); diff != "" {
		t.Errorf("modules in the image (-want +got):\n%s", diff)
	}
	if err := addModules(newImage(), dir, []string{"xfrm-user"}, []string{"xfrm_user"}); err == nil {
		t.Error("a module both loaded and omitted was accepted")
	}
}
