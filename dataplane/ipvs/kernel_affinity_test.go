package ipvs

import (
	"bufio"
	"bytes"
	"encoding/hex"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"strconv"
	"strings"

	mobyipvs "github.com/moby/ipvs"
	"github.com/proxykit/proxykit/dataplane/ipvs/internal/handle"
	"golang.org/x/sys/unix"
)

// template is one IPVS persistence template: the memory that pins a
// client to a real server of a persistent virtual server.
type template struct {
	proto   string
	client  netip.Addr
	virtual netip.AddrPort
}

// forgetPersistence makes IPVS forget which real server each client is
// pinned to, in the calling thread's network namespace, for the kernel
// lab's ClientIP affinity cases. IPVS has no call that deletes a template,
// but it drops one itself when a new connection finds the template's real
// server gone: so the real servers of every persistent virtual server are
// taken out, one connection attempt per template is sent from the node
// with the client's source address (it goes nowhere: there is no real
// server to schedule), and the real servers are put back as they were.
func forgetPersistence() error {
	h, err := mobyipvs.New("")
	if err != nil {
		return err
	}
	defer h.Close()
	templates, err := readTemplates()
	if err != nil || len(templates) == 0 {
		return err
	}
	svcs, err := h.GetServices()
	if err != nil {
		return err
	}
	type removed struct {
		svc  *mobyipvs.Service
		dsts []*mobyipvs.Destination
	}
	var all []removed
	restore := func() error {
		var errs []error
		for _, r := range all {
			for _, d := range r.dsts {
				errs = append(errs, h.NewDestination(r.svc, d))
			}
		}
		return errors.Join(errs...)
	}
	for _, svc := range svcs {
		if svc.Flags&handle.FlagPersistent == 0 {
			continue
		}
		dsts, err := h.GetDestinations(svc)
		if err != nil {
			return errors.Join(err, restore())
		}
		for _, d := range dsts {
			if err := h.DelDestination(svc, d); err != nil {
				return errors.Join(err, restore())
			}
		}
		all = append(all, removed{svc, dsts})
	}
	for _, t := range templates {
		if err := sendFrom(t); err != nil {
			return errors.Join(err, restore())
		}
	}
	if err := restore(); err != nil {
		return err
	}
	left, err := readTemplates()
	if err != nil {
		return err
	}
	if len(left) > 0 {
		return fmt.Errorf("IPVS kept %d persistence templates, e.g. %s from %s to %s", len(left), left[0].proto, left[0].client, left[0].virtual)
	}
	return nil
}

// readTemplates lists the live persistence templates of
// /proc/net/ip_vs_conn: the entries without a client port, less those
// IPVS already invalidated (it moves them to port 0xffff).
func readTemplates() ([]template, error) {
	b, err := os.ReadFile("/proc/thread-self/net/ip_vs_conn")
	if err != nil {
		return nil, err
	}
	var out []template
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 8 || f[0] == "Pro" || f[2] != "0000" || f[4] == "FFFF" {
			continue
		}
		client, err1 := procAddr(f[1])
		vaddr, err2 := procAddr(f[3])
		vport, err3 := strconv.ParseUint(f[4], 16, 16)
		if err := errors.Join(err1, err2, err3); err != nil {
			return nil, fmt.Errorf("ip_vs_conn line %q: %w", sc.Text(), err)
		}
		out = append(out, template{proto: f[0], client: client, virtual: netip.AddrPortFrom(vaddr, uint16(vport))})
	}
	return out, sc.Err()
}

// procAddr reads an address as ip_vs_conn prints it: IPv4 as eight hex
// digits, IPv6 in full colon form.
func procAddr(s string) (netip.Addr, error) {
	if strings.Contains(s, ":") {
		return netip.ParseAddr(s)
	}
	b, err := hex.DecodeString(s)
	if err != nil || len(b) != 4 {
		return netip.Addr{}, fmt.Errorf("address %q", s)
	}
	return netip.AddrFrom4([4]byte(b)), nil
}

// sendFrom sends one packet of t's protocol from t's client to its
// virtual address without waiting for an answer: the connect (TCP) or
// send (UDP) passes IPVS's output hook before the call returns. A
// transparent socket may use the client's address, which is not the
// node's.
func sendFrom(t template) error {
	domain, level, opt := unix.AF_INET, unix.SOL_IP, unix.IP_TRANSPARENT
	if t.client.Is6() {
		domain, level, opt = unix.AF_INET6, unix.SOL_IPV6, unix.IPV6_TRANSPARENT
	}
	typ := unix.SOCK_STREAM
	if t.proto == "UDP" {
		typ = unix.SOCK_DGRAM
	} else if t.proto != "TCP" {
		return fmt.Errorf("persistence template of protocol %s", t.proto)
	}
	fd, err := unix.Socket(domain, typ|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	if err := unix.SetsockoptInt(fd, level, opt, 1); err != nil {
		return fmt.Errorf("transparent socket: %w", err)
	}
	if err := unix.Bind(fd, sockaddr(netip.AddrPortFrom(t.client, 0))); err != nil {
		return fmt.Errorf("bind %s: %w", t.client, err)
	}
	if typ == unix.SOCK_DGRAM {
		// The datagram may be refused; it has been seen by then.
		_ = unix.Sendto(fd, []byte{0}, 0, sockaddr(t.virtual))
		return nil
	}
	if err := unix.Connect(fd, sockaddr(t.virtual)); err != nil && !errors.Is(err, unix.EINPROGRESS) && !errors.Is(err, unix.EPERM) {
		return fmt.Errorf("connect from %s to %s: %w", t.client, t.virtual, err)
	}
	return nil
}

func sockaddr(ap netip.AddrPort) unix.Sockaddr {
	if ap.Addr().Is4() {
		return &unix.SockaddrInet4{Addr: ap.Addr().As4(), Port: int(ap.Port())}
	}
	return &unix.SockaddrInet6{Addr: ap.Addr().As16(), Port: int(ap.Port())}
}
