package vmtest

import (
	"bufio"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"strings"

	"github.com/proxykit/proxykit/internal/netns"
)

// assemble puts into im everything the VM needs: busybox and its applets,
// the init script, the tools with their libraries, the kernel modules,
// the test binary and the package's testdata.
func assemble(im *image, h host, cfg Config, testBin, pkg string) error {
	im.file("/bin/busybox", h.busybox)
	applets, err := exec.Command(h.busybox, "--list").Output()
	if err != nil {
		return fmt.Errorf("vmtest: busybox --list: %w", err)
	}
	for _, a := range strings.Fields(string(applets)) {
		if a != "busybox" {
			im.link("/bin/"+a, "busybox")
		}
	}
	// The kernel runs /sbin/modprobe to load a module on demand.
	im.link("/sbin/modprobe", "/bin/busybox")
	for _, d := range []string{"/proc", "/sys", "/dev", "/run", "/tmp", "/etc", "/var"} {
		im.dir(d)
	}
	for _, etc := range []string{"/etc/protocols", "/etc/services", "/etc/ethertypes"} {
		if _, err := os.Stat(etc); err == nil {
			im.file(etc, etc)
		}
	}
	im.bytes("/etc/passwd", []byte("root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/:/bin/false\n"))
	im.bytes("/etc/group", []byte("root:x:0:\nnogroup:x:65534:\n"))

	tools := append([]string{"ip"}, cfg.Tools...)
	libs := map[string]bool{}
	for _, tool := range tools {
		p, err := exec.LookPath(tool)
		if err != nil {
			return fmt.Errorf("vmtest: tool %q is not on PATH: %w", tool, err)
		}
		real, err := filepath.EvalSymlinks(p)
		if err != nil {
			return err
		}
		// Copied under the name asked for: multi-call binaries such as
		// xtables-nft-multi act on the name they are run as.
		im.file("/usr/sbin/"+filepath.Base(tool), real)
		if err := sharedLibs(real, libs); err != nil {
			return err
		}
		if strings.HasPrefix(filepath.Base(real), "xtables-") {
			if err := xtablesExtensions(im, libs); err != nil {
				return err
			}
		}
	}
	for lib := range libs {
		im.file(lib, lib)
	}

	if err := addModules(im, h.modules, cfg.Modules, cfg.Omit); err != nil {
		return err
	}

	im.file("/pkg/pkg.test", testBin)
	if err := addTree(im, filepath.Join(pkg, "testdata"), "/pkg/testdata"); err != nil {
		return err
	}
	for dst, src := range cfg.Files {
		im.file(dst, src)
	}
	im.bytes("/init", initScript(cfg))
	return nil
}

var lddPath = regexp.MustCompile(`(?:=>\s*)?(/\S+)\s+\(0x`)

// sharedLibs adds the libraries (and the loader) ldd names for file.
func sharedLibs(file string, into map[string]bool) error {
	out, err := exec.Command("ldd", file).CombinedOutput()
	if err != nil {
		// Static executables: ldd says so and exits non-zero.
		if strings.Contains(string(out), "not a dynamic executable") || strings.Contains(string(out), "statically linked") {
			return nil
		}
		return fmt.Errorf("vmtest: ldd %s: %w: %s", file, err, out)
	}
	for _, m := range lddPath.FindAllStringSubmatch(string(out), -1) {
		into[m[1]] = true
	}
	return nil
}

// xtablesExtensions adds the iptables extension modules, which the
// iptables tools load by name at run time (ldd cannot see them).
func xtablesExtensions(im *image, libs map[string]bool) error {
	for _, dir := range []string{"/usr/lib/x86_64-linux-gnu/xtables", "/usr/lib/xtables", "/usr/lib64/xtables"} {
		entries, err := os.ReadDir(dir)
		if err != nil {
			continue
		}
		for _, e := range entries {
			p := filepath.Join(dir, e.Name())
			im.file(p, p)
			if err := sharedLibs(p, libs); err != nil {
				return err
			}
		}
		return nil
	}
	return fmt.Errorf("vmtest: no xtables extension directory found on the host")
}

// onDemand are module paths (under the version's directory) that go into
// every image, so that the kernel's on-demand loading finds them.
var onDemand = []string{
	"kernel/net/",
	"kernel/drivers/net/dummy.ko",
	"kernel/drivers/net/veth.ko",
	"kernel/drivers/net/macvlan.ko",
	"kernel/drivers/net/ipvlan/",
}

// addModules adds the modules under onDemand and the ones named, with
// everything they depend on, but none of omit, and the index files
// modprobe reads.
func addModules(im *image, dir string, named, omit []string) error {
	deps, err := readModulesDep(filepath.Join(dir, "modules.dep"))
	if err != nil {
		return err
	}
	byName := map[string]string{}
	for m := range deps {
		byName[moduleName(m)] = m
	}
	omitted := map[string]bool{}
	for _, n := range omit {
		omitted[strings.ReplaceAll(n, "-", "_")] = true
	}
	want := map[string]bool{}
	var add func(string)
	add = func(m string) {
		if want[m] || omitted[moduleName(m)] {
			return
		}
		want[m] = true
		for _, d := range deps[m] {
			add(d)
		}
	}
	for m := range deps {
		for _, prefix := range onDemand {
			if strings.HasPrefix(m, prefix) {
				add(m)
			}
		}
	}
	for _, n := range named {
		if omitted[strings.ReplaceAll(n, "-", "_")] {
			return fmt.Errorf("vmtest: kernel module %q is both loaded and omitted", n)
		}
		m, ok := byName[strings.ReplaceAll(n, "-", "_")]
		if !ok {
			if builtin(dir, n) {
				continue
			}
			return fmt.Errorf("vmtest: kernel module %q is not in %s/modules.dep", n, dir)
		}
		add(m)
	}
	version := filepath.Base(dir)
	vmDir := path.Join("/lib/modules", version)
	for m := range want {
		im.file(path.Join(vmDir, m), filepath.Join(dir, m))
	}
	for _, index := range []string{"modules.dep", "modules.alias", "modules.builtin", "modules.symbols", "modules.order"} {
		p := filepath.Join(dir, index)
		if _, err := os.Stat(p); err == nil {
			im.file(path.Join(vmDir, index), p)
		}
	}
	return nil
}

func moduleName(p string) string {
	n := path.Base(p)
	n = n[:strings.Index(n, ".ko")]
	return strings.ReplaceAll(n, "-", "_")
}

func readModulesDep(file string) (map[string][]string, error) {
	f, err := os.Open(file)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	deps := map[string][]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		mod, rest, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		deps[mod] = strings.Fields(rest)
	}
	return deps, sc.Err()
}

func builtin(dir, name string) bool {
	b, err := os.ReadFile(filepath.Join(dir, "modules.builtin"))
	if err != nil {
		return false
	}
	for _, line := range strings.Split(string(b), "\n") {
		if line != "" && moduleName(line) == strings.ReplaceAll(name, "-", "_") {
			return true
		}
	}
	return false
}

// addTree copies a host directory, if it exists, into the image.
func addTree(im *image, hostDir, vmDir string) error {
	if _, err := os.Stat(hostDir); err != nil {
		return nil
	}
	return filepath.WalkDir(hostDir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(hostDir, p)
		if err != nil {
			return err
		}
		dst := path.Join(vmDir, filepath.ToSlash(rel))
		switch {
		case d.IsDir():
			im.dir(dst)
		case d.Type().IsRegular():
			im.file(dst, p)
		}
		return nil
	})
}

// shellQuote quotes s for the init script's shell.
func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

func initScript(cfg Config) []byte {
	var b strings.Builder
	b.WriteString(`#!/bin/sh
export PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev 2>/dev/null
mount -t tmpfs tmpfs /run
mount -t tmpfs tmpfs /tmp
mkdir -p /dev/pts /dev/shm /root /var/lib
ln -s /run /var/run
echo /sbin/modprobe > /proc/sys/kernel/modprobe
`)
	for _, m := range cfg.Modules {
		fmt.Fprintf(&b, "modprobe %s || echo 'vmtest: modprobe %s failed'\n", shellQuote(m), m)
	}
	b.WriteString("ip link set lo up\ncd /pkg\n")
	// Inside, a kernel feature a test skips for is a failure: the VM
	// exists to have them.
	b.WriteString("env " + InsideEnv + "=1 " + netns.RequireKernelEnv + "=1")
	for _, e := range cfg.Env {
		b.WriteString(" " + shellQuote(e))
	}
	b.WriteString(" /pkg/pkg.test -test.v -test.run " + shellQuote(cfg.Run))
	for _, a := range cfg.Args {
		b.WriteString(" " + shellQuote(a))
	}
	b.WriteString("\necho \"" + exitMarker + "$?\"\nsync\npoweroff -f\n")
	return []byte(b.String())
}
