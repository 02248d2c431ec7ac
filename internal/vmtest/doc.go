// Package vmtest runs a package's kernel tests inside a virtual machine
// booting a kernel that has what this machine's kernel lacks (IPVS, the
// dummy link type).
//
// A host-side test calls Run; it compiles the package's tests into a
// static binary, packs it with busybox, the named tools (with their
// shared libraries) and the kernel's networking modules into an
// initramfs, and boots the Debian cloud kernel under
// qemu-system-x86_64 with TCG (no KVM: it is not reliable on the
// machines we run on). Inside, the tests run as root with
// PROXYKIT_IN_VM=1 and PROXYKIT_REQUIRE_KERNEL=1, so a missing feature
// fails them rather than skipping them. The kernel tests themselves are
// ordinary tests: they create namespaces with internal/netns and skip on
// a host kernel without the feature. Config.Omit leaves modules out, for
// a test of a kernel that lacks them.
//
//	func TestIPVSInVM(t *testing.T) {
//		vmtest.Run(t, vmtest.Config{
//			Run:     "^TestKernel",
//			Modules: []string{"ip_vs", "ip_vs_rr", "dummy"},
//			Tools:   []string{"iptables-restore", "iptables-save"},
//		})
//	}
//
// The machine needs qemu-system-x86, linux-image-cloud-amd64 and
// busybox-static (apt); without them, or without root (Debian's kernel
// image is readable only by root), Run skips, except under
// PROXYKIT_REQUIRE_KERNEL=1.
package vmtest
