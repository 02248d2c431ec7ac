package cluster

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// A hybrid host's mountinfo (this machine's kind), with a non-cgroup mount
// and a cgroup mounted twice.
const hybridMountinfo = `25 30 0:23 / /sys rw,nosuid,nodev,noexec,relatime shared:7 - sysfs sysfs rw
31 25 0:27 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
32 31 0:28 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu
33 31 0:29 / /sys/fs/cgroup/cpuset rw,relatime - cgroup cgroup rw,cpuset
34 31 0:30 / /sys/fs/cgroup/systemd rw,relatime - cgroup cgroup rw,name=systemd
35 31 0:31 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
36 31 0:28 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu
37 25 0:32 / /mnt/with\040space rw,relatime shared:9 opt:1 - cgroup2 cgroup2 rw
`

func TestHierarchies(t *testing.T) {
	got, err := hierarchies(strings.NewReader(hybridMountinfo))
	if err != nil {
		t.Fatal(err)
	}
	want := []hierarchy{
		{Mount: "/sys/fs/cgroup/cpu"},
		{Mount: "/sys/fs/cgroup/cpuset"},
		{Mount: "/sys/fs/cgroup/systemd"},
		{Mount: "/sys/fs/cgroup/unified", V2: true},
		{Mount: "/mnt/with space", V2: true},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("hierarchies (-want +got):\n%s", diff)
	}
}

// fakeHierarchies are two directories standing in for a v1 cpuset
// hierarchy and a cgroup2 one.
func fakeHierarchies(t *testing.T) cgroups {
	t.Helper()
	dir := t.TempDir()
	cpuset, unified := filepath.Join(dir, "cpuset"), filepath.Join(dir, "unified")
	for _, d := range []string{cpuset, unified} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for f, v := range map[string]string{"cpuset.cpus": "0-1\n", "cpuset.mems": "0\n"} {
		if err := os.WriteFile(filepath.Join(cpuset, f), []byte(v), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return cgroups{hs: []hierarchy{{Mount: cpuset}, {Mount: unified, V2: true}}, id: "c-1"}
}

func TestMakeDirCopiesCpuset(t *testing.T) {
	cg := fakeHierarchies(t)
	if err := cg.makeDir("node-1"); err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, h := range cg.hs {
		_ = filepath.WalkDir(h.Mount, func(path string, d os.DirEntry, err error) error {
			rel, _ := filepath.Rel(filepath.Dir(cg.hs[0].Mount), path)
			if d.IsDir() {
				got[rel] = "dir"
			} else if b, err := os.ReadFile(path); err == nil {
				got[rel] = string(b)
			}
			return nil
		})
	}
	want := map[string]string{
		"cpuset": "dir", "cpuset/cpuset.cpus": "0-1\n", "cpuset/cpuset.mems": "0\n",
		"cpuset/proxykit-e2e": "dir", "cpuset/proxykit-e2e/cpuset.cpus": "0-1\n", "cpuset/proxykit-e2e/cpuset.mems": "0\n",
		"cpuset/proxykit-e2e/c-1": "dir", "cpuset/proxykit-e2e/c-1/cpuset.cpus": "0-1\n", "cpuset/proxykit-e2e/c-1/cpuset.mems": "0\n",
		"cpuset/proxykit-e2e/c-1/node-1": "dir", "cpuset/proxykit-e2e/c-1/node-1/cpuset.cpus": "0-1\n", "cpuset/proxykit-e2e/c-1/node-1/cpuset.mems": "0\n",
		"unified": "dir", "unified/proxykit-e2e": "dir", "unified/proxykit-e2e/c-1": "dir", "unified/proxykit-e2e/c-1/node-1": "dir",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("tree (-want +got):\n%s", diff)
	}
}

// The wrapper writes the process's own PID into every hierarchy's
// cgroup.procs before it becomes the program, which does not see the
// variable that named them.
func TestCommandJoinsCgroupsFirst(t *testing.T) {
	cg := fakeHierarchies(t)
	rel := procCgroup("e2e-node-1", "commands")
	if err := cg.makeDir(rel); err != nil {
		t.Fatal(err)
	}
	cmd := cg.command(context.Background(), rel, "sh", "-c", `echo "$$ [$`+cgroupEnv+`] $PATH"`)
	out, err := cmd.Output()
	if err != nil {
		t.Fatal(err)
	}
	pid := strconv.Itoa(cmd.Process.Pid)
	if diff := cmp.Diff(pid+" [] "+processPath+"\n", string(out)); diff != "" {
		t.Errorf("program's view (-want +got):\n%s", diff)
	}
	for _, f := range cg.procsFiles(rel) {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if got := strings.TrimSpace(string(b)); got != pid {
			t.Errorf("%s holds %q, want the program's PID %s", f, got, pid)
		}
	}
}
