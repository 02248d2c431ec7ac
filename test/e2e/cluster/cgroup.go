package cluster

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// cgroupTree is the directory the fixture owns in every cgroup hierarchy.
const cgroupTree = "proxykit-e2e"

// hierarchy is one mounted cgroup hierarchy.
type hierarchy struct {
	Mount string // where it is mounted
	V2    bool   // cgroup2 (unified)
}

// hierarchies lists the cgroup hierarchies mounted in the host's mount
// namespace, from a mountinfo file, each mount point once.
func hierarchies(mountinfo io.Reader) ([]hierarchy, error) {
	var hs []hierarchy
	seen := map[string]bool{}
	sc := bufio.NewScanner(mountinfo)
	for sc.Scan() {
		// id parent major:minor root mountpoint options [optional...] - fstype source superoptions
		fields := strings.Fields(sc.Text())
		sep := -1
		for i, f := range fields {
			if f == "-" {
				sep = i
				break
			}
		}
		if sep < 5 || sep+1 >= len(fields) {
			continue
		}
		fstype, mnt := fields[sep+1], unescapeMount(fields[4])
		if (fstype != "cgroup" && fstype != "cgroup2") || seen[mnt] {
			continue
		}
		seen[mnt] = true
		hs = append(hs, hierarchy{Mount: mnt, V2: fstype == "cgroup2"})
	}
	return hs, sc.Err()
}

// unescapeMount undoes mountinfo's octal escapes (\040 for a space...).
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+4 <= len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

func hostHierarchies() ([]hierarchy, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil, fmt.Errorf("cluster: list cgroup hierarchies: %w", err)
	}
	defer f.Close()
	hs, err := hierarchies(f)
	if err != nil {
		return nil, fmt.Errorf("cluster: list cgroup hierarchies: %w", err)
	}
	if len(hs) == 0 {
		return nil, errors.New("cluster: no cgroup hierarchy is mounted")
	}
	return hs, nil
}

// cgroups makes and fills one cluster's part of the fixture's tree:
// proxykit-e2e/<id> in every hierarchy. Several clusters may run at once,
// each under its own id.
type cgroups struct {
	hs []hierarchy
	id string
}

// base is the cluster's directory relative to a hierarchy's mount.
func (c cgroups) base() string { return filepath.Join(cgroupTree, c.id) }

// makeDir creates rel (a path under the cluster's directory, "" for the
// directory itself) in every hierarchy, each missing level with what it
// needs to hold processes: cpuset's cpus and mems copied from its parent
// (v1), and on cgroup2 the parent's available controllers delegated to it.
func (c cgroups) makeDir(rel string) error {
	parts := strings.Split(strings.Trim(filepath.Join(c.base(), rel), "/"), "/")
	for _, h := range c.hs {
		dir := h.Mount
		for _, p := range parts {
			parent := dir
			dir = filepath.Join(dir, p)
			if _, err := os.Stat(dir); err == nil {
				continue
			}
			if h.V2 {
				delegate(parent)
			}
			if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
				return fmt.Errorf("cluster: cgroup %s: %w", dir, err)
			}
			if err := copyCpuset(parent, dir); err != nil {
				return err
			}
		}
	}
	return nil
}

// delegate enables in dir's cgroup.subtree_control every controller dir
// has, so that kubelet finds them below. Best effort: a controller a
// parent holds back, or one with processes in dir, stays off.
func delegate(dir string) {
	b, err := os.ReadFile(filepath.Join(dir, "cgroup.controllers"))
	if err != nil {
		return
	}
	for _, ctl := range strings.Fields(string(b)) {
		_ = os.WriteFile(filepath.Join(dir, "cgroup.subtree_control"), []byte("+"+ctl), 0o644)
	}
}

// copyCpuset gives a new v1 cpuset cgroup its parent's cpus and mems, or
// no task could join it.
func copyCpuset(parent, dir string) error {
	for _, f := range []string{"cpuset.cpus", "cpuset.mems"} {
		b, err := os.ReadFile(filepath.Join(parent, f))
		if errors.Is(err, fs.ErrNotExist) {
			return nil // not a v1 cpuset hierarchy
		}
		if err != nil {
			return fmt.Errorf("cluster: cgroup %s: %w", parent, err)
		}
		if err := os.WriteFile(filepath.Join(dir, f), b, 0o644); err != nil {
			return fmt.Errorf("cluster: cgroup %s: %w", dir, err)
		}
	}
	return nil
}

// nodeRoot is node i's kubelet cgroupRoot, made in every hierarchy before
// kubelet starts (it refuses to start otherwise).
func (c cgroups) nodeRoot(i int) string {
	return "/" + filepath.Join(c.base(), fmt.Sprintf("node-%d", i))
}

// procsFiles are the cgroup.procs files of rel in every hierarchy: a
// process written to all of them is in the cluster's tree wherever
// Reclaim looks.
func (c cgroups) procsFiles(rel string) []string {
	files := make([]string, len(c.hs))
	for i, h := range c.hs {
		files[i] = filepath.Join(h.Mount, c.base(), rel, "cgroup.procs")
	}
	return files
}

// Reclaim removes what earlier runs left: for every cluster under the
// proxykit-e2e tree whose owner is gone (its lock is free), it kills every
// process in its cgroups in every hierarchy (namespace holders included,
// so their namespaces, links, rules and mounts go with them) and removes
// the cgroups, deepest first; then the tree itself once no cluster is
// left. Clusters still running (in this process or another) are left
// alone. It is safe to call when nothing is left, and Up calls it first.
func Reclaim(ctx context.Context, log io.Writer) error {
	if log == nil {
		log = io.Discard
	}
	hs, err := hostHierarchies()
	if err != nil {
		return err
	}
	unlock, err := lockTree(ctx, hs)
	if err != nil {
		return err
	}
	defer unlock()
	if err := reclaimDead(ctx, hs, log); err != nil {
		return err
	}
	return removeTreeIfEmpty(hs)
}

// reclaimDead reclaims every cluster whose lock is free. The caller holds
// the tree's lock, so no cluster is being made meanwhile.
func reclaimDead(ctx context.Context, hs []hierarchy, log io.Writer) error {
	ids := map[string]bool{}
	for _, h := range hs {
		entries, _ := os.ReadDir(filepath.Join(h.Mount, cgroupTree))
		for _, e := range entries {
			if e.IsDir() {
				ids[e.Name()] = true
			}
		}
	}
	var errs []error
	for id := range ids {
		lock, err := lockCluster(hs, id)
		if errors.Is(err, errBusy) {
			continue
		}
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if err := reclaim(ctx, cgroups{hs: hs, id: id}, log); err != nil {
			errs = append(errs, err)
		}
		lock.Close()
	}
	return errors.Join(errs...)
}

// reclaimRounds bounds the kill rounds: a dying containerd may start a shim
// or two, but nothing restarts processes forever.
const reclaimRounds = 100

// reclaim kills every process in cg's cgroups and removes them.
func reclaim(ctx context.Context, cg cgroups, log io.Writer) error {
	var roots []string
	for _, h := range cg.hs {
		root := filepath.Join(h.Mount, cg.base())
		if _, err := os.Stat(root); err == nil {
			roots = append(roots, root)
		}
	}
	if len(roots) == 0 {
		return nil
	}
	killed := map[int]bool{}
	for round := 0; ; round++ {
		pids := treePIDs(roots)
		if len(pids) == 0 {
			break
		}
		if round == reclaimRounds {
			return fmt.Errorf("cluster: reclaim: processes %v still in %s after %d rounds of SIGKILL", pids, cg.base(), round)
		}
		for _, pid := range pids {
			killed[pid] = true
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		if err := sleepCtx(ctx, 100*time.Millisecond); err != nil {
			return fmt.Errorf("cluster: reclaim: %w", err)
		}
	}
	if len(killed) > 0 {
		fmt.Fprintf(log, "reclaim: killed %d processes in %s\n", len(killed), cg.base())
	}
	var errs []error
	for _, root := range roots {
		if err := removeTree(ctx, root); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// treePIDs lists the processes in the cgroups under roots.
func treePIDs(roots []string) []int {
	seen := map[int]bool{}
	var pids []int
	for _, root := range roots {
		_ = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() || d.Name() != "cgroup.procs" {
				return nil
			}
			b, err := os.ReadFile(path)
			if err != nil {
				return nil
			}
			for _, f := range strings.Fields(string(b)) {
				if pid, err := strconv.Atoi(f); err == nil && !seen[pid] {
					seen[pid] = true
					pids = append(pids, pid)
				}
			}
			return nil
		})
	}
	sort.Ints(pids)
	return pids
}

// removeTree removes root and every cgroup below it, deepest first,
// retrying for a while: a cgroup stays busy until its last killed
// process is gone.
func removeTree(ctx context.Context, root string) error {
	var last error
	for try := 0; try < 50; try++ {
		var dirs []string
		_ = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				dirs = append(dirs, path)
			}
			return nil
		})
		if len(dirs) == 0 {
			return nil
		}
		sort.Slice(dirs, func(i, j int) bool { return strings.Count(dirs[i], "/") > strings.Count(dirs[j], "/") })
		last = nil
		for _, d := range dirs {
			if err := syscall.Rmdir(d); err != nil && !errors.Is(err, syscall.ENOENT) {
				last = fmt.Errorf("cluster: remove cgroup %s: %w", d, err)
			}
		}
		if last == nil {
			return nil
		}
		if err := sleepCtx(ctx, 100*time.Millisecond); err != nil {
			return errors.Join(last, err)
		}
	}
	return last
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
