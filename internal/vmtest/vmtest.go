package vmtest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/proxykit/proxykit/internal/netns"
)

// InsideEnv is set to "1" in the environment of the tests a VM runs.
const InsideEnv = "PROXYKIT_IN_VM"

// KernelEnv names a kernel image to boot instead of the newest
// /boot/vmlinuz-*-cloud-amd64.
const KernelEnv = "PROXYKIT_VM_KERNEL"

// Inside reports whether this test binary runs inside a VM that Boot
// started. A host-side test that boots the VM skips itself there.
func Inside() bool { return os.Getenv(InsideEnv) == "1" }

// Config says what a VM runs. Every field's zero value is usable except Run.
type Config struct {
	// Run is the -test.run pattern selecting the tests to run inside.
	Run string
	// Package is the directory of the package whose tests run inside.
	// Zero: the working directory, which for a test is its package.
	Package string
	// Modules are loaded with modprobe, in order, before the tests start.
	// Every module under the kernel's net/ tree (and the dummy, veth,
	// macvlan and ipvlan drivers) is in the image anyway and loads on
	// demand, as the kernel asks modprobe for it.
	Modules []string
	// Omit are modules left out of the image, on-demand ones included, so
	// that the tests see a kernel without them (a node without xfrm_user,
	// say). Naming one in Modules too is an error.
	Omit []string
	// Tools are programs found on the host's PATH, copied into the VM's
	// /usr/sbin with the shared libraries they load (and the xtables
	// extensions, for the iptables family). "ip" is always included.
	Tools []string
	// Files are extra files copied in: path in the VM -> path on the host.
	Files map[string]string
	// Env is extra environment ("K=V") for the tests.
	Env []string
	// Args are extra test flags, e.g. "-test.count=1".
	Args []string
	// Timeout bounds the whole run, build included. Zero: 10 minutes.
	Timeout time.Duration
	// MemoryMiB is the VM's memory. Zero: 1024.
	MemoryMiB int
	// CPUs is the VM's processor count. Zero: 2.
	CPUs int
}

// Result is what the tests inside printed, and how they exited.
type Result struct {
	// Output is the VM console: the test binary's output, with the
	// kernel's and the init script's lines around it.
	Output string
	// ExitCode is the test binary's exit status.
	ExitCode int
}

// ErrUnavailable is returned (wrapped) when the machine cannot boot a VM:
// no qemu, no kernel image or modules, no busybox.
var ErrUnavailable = errors.New("vmtest: cannot boot a test VM here")

// host is what Boot needs from the machine.
type host struct {
	qemu, kernel, modules, busybox, goTool string
}

func findHost() (host, error) {
	var h host
	var missing []string
	var err error
	if h.qemu, err = exec.LookPath("qemu-system-x86_64"); err != nil {
		missing = append(missing, "qemu-system-x86_64 (apt: qemu-system-x86)")
	}
	if h.busybox, err = exec.LookPath("busybox"); err != nil {
		missing = append(missing, "busybox (apt: busybox-static)")
	}
	if h.goTool, err = exec.LookPath("go"); err != nil {
		h.goTool = filepath.Join(runtime.GOROOT(), "bin", "go")
	}
	h.kernel = os.Getenv(KernelEnv)
	if h.kernel == "" {
		images, _ := filepath.Glob("/boot/vmlinuz-*-cloud-amd64")
		if len(images) > 0 {
			h.kernel = images[len(images)-1]
		}
	}
	if h.kernel == "" {
		missing = append(missing, "a kernel image /boot/vmlinuz-*-cloud-amd64 (apt: linux-image-cloud-amd64)")
	} else {
		version := strings.TrimPrefix(filepath.Base(h.kernel), "vmlinuz-")
		h.modules = filepath.Join("/lib/modules", version)
		if _, err := os.Stat(filepath.Join(h.modules, "modules.dep")); err != nil {
			missing = append(missing, "the modules of "+h.kernel+" in "+h.modules)
		}
		if f, err := os.Open(h.kernel); err != nil {
			missing = append(missing, "read access to "+h.kernel)
		} else {
			f.Close()
		}
	}
	if len(missing) > 0 {
		return h, fmt.Errorf("%w: missing %s", ErrUnavailable, strings.Join(missing, ", "))
	}
	return h, nil
}

// Boot compiles the package's test binary, builds an initramfs holding
// it, busybox, the tools and the kernel modules, boots it under
// qemu-system-x86_64 (TCG: no KVM needed) and returns what the tests
// printed. The error is non-nil only when the VM could not be built or
// did not report the tests' exit status (a crash or the timeout); tests
// that fail inside are a Result with a non-zero ExitCode.
func Boot(ctx context.Context, cfg Config) (Result, error) {
	h, err := findHost()
	if err != nil {
		return Result{}, err
	}
	if cfg.Run == "" {
		return Result{}, errors.New("vmtest: Config.Run is empty: say which tests run inside")
	}
	timeout := cfg.Timeout
	if timeout == 0 {
		timeout = 10 * time.Minute
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()

	work, err := os.MkdirTemp("", "vmtest-")
	if err != nil {
		return Result{}, err
	}
	defer os.RemoveAll(work)

	pkg := cfg.Package
	if pkg == "" {
		pkg = "."
	}
	testBin := filepath.Join(work, "pkg.test")
	build := exec.CommandContext(ctx, h.goTool, "test", "-c", "-o", testBin, ".")
	build.Dir = pkg
	// A static binary needs no C library in the VM.
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		return Result{}, fmt.Errorf("vmtest: building the tests of %s: %w\n%s", pkg, err, out)
	}

	im := newImage()
	if err := assemble(im, h, cfg, testBin, pkg); err != nil {
		return Result{}, err
	}
	initrd := filepath.Join(work, "initrd.cpio")
	f, err := os.Create(initrd)
	if err != nil {
		return Result{}, err
	}
	if err := im.writeTo(f); err != nil {
		f.Close()
		return Result{}, fmt.Errorf("vmtest: writing the initramfs: %w", err)
	}
	if err := f.Close(); err != nil {
		return Result{}, err
	}

	mem, cpus := cfg.MemoryMiB, cfg.CPUs
	if mem == 0 {
		mem = 1024
	}
	if cpus == 0 {
		cpus = 2
	}
	var console bytes.Buffer
	qemu := exec.CommandContext(ctx, h.qemu,
		"-machine", "q35,accel=tcg", "-cpu", "max",
		"-smp", strconv.Itoa(cpus), "-m", strconv.Itoa(mem),
		"-kernel", h.kernel, "-initrd", initrd,
		"-append", "console=ttyS0 quiet loglevel=3 panic=-1 rdinit=/init",
		"-nic", "none", "-display", "none", "-monitor", "none", "-serial", "stdio",
		"-no-reboot")
	qemu.Stdout = &console
	qemu.Stderr = &console
	// qemu is killed with its context; Wait must not then wait on pipes
	// a straggler still holds.
	qemu.WaitDelay = 5 * time.Second
	runErr := qemu.Run()
	res := Result{Output: strings.ReplaceAll(console.String(), "\r\n", "\n")}
	code, ok := exitCode(res.Output)
	if !ok {
		if ctx.Err() != nil {
			return res, fmt.Errorf("vmtest: the VM did not finish within %s", timeout)
		}
		return res, fmt.Errorf("vmtest: the VM stopped without reporting the tests' exit status (qemu: %v)", runErr)
	}
	res.ExitCode = code
	return res, nil
}

var exitLine = regexp.MustCompile(`(?m)^` + exitMarker + `(\d+)$`)

const exitMarker = "vmtest-exit: "

func exitCode(out string) (int, bool) {
	m := exitLine.FindAllStringSubmatch(out, -1)
	if len(m) == 0 {
		return 0, false
	}
	n, err := strconv.Atoi(m[len(m)-1][1])
	return n, err == nil
}

// Run is Boot for a host-side test. It skips t (or fails it under
// PROXYKIT_REQUIRE_KERNEL=1) when the machine cannot boot a VM or the
// process is not root (the kernel image is readable only by root on
// Debian), logs the console, and fails t when the tests inside fail.
func Run(t testing.TB, cfg Config) Result {
	t.Helper()
	if Inside() {
		t.Skip("vmtest: already inside the VM")
	}
	_, err := findHost()
	if err == nil && os.Geteuid() != 0 {
		err = fmt.Errorf("%w: not root", ErrUnavailable)
	}
	if err != nil {
		if os.Getenv(netns.RequireKernelEnv) == "1" {
			t.Fatalf("%v (%s=1 forbids skipping)", err, netns.RequireKernelEnv)
		}
		t.Skip(err)
	}
	ctx := context.Background()
	if d, ok := t.(interface{ Context() context.Context }); ok {
		ctx = d.Context()
	}
	res, err := Boot(ctx, cfg)
	if err != nil {
		t.Fatalf("%v\nconsole:\n%s", err, res.Output)
	}
	if res.ExitCode != 0 {
		t.Fatalf("tests in the VM failed (exit %d):\n%s", res.ExitCode, res.Output)
	}
	t.Logf("VM console:\n%s", res.Output)
	return res
}
