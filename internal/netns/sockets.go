package netns

import (
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
)

// ListeningPorts reads the socket tables of n (/proc/net/tcp, tcp6, udp
// and udp6 as its threads see them) and returns the ports of its TCP
// listeners and of its UDP sockets that are bound and not connected,
// whatever their address, sorted: what a test that proves nothing else
// answers from outside the namespace must try.
func (n *NS) ListeningPorts() (tcp, udp []uint16, err error) {
	err = n.Do(func() error {
		for _, tab := range []struct {
			file string
			into *[]uint16
		}{{"tcp", &tcp}, {"tcp6", &tcp}, {"udp", &udp}, {"udp6", &udp}} {
			b, err := os.ReadFile("/proc/thread-self/net/" + tab.file)
			if err != nil {
				return err
			}
			lines := strings.Split(strings.TrimSpace(string(b)), "\n")
			for _, l := range lines[1:] {
				// sl local_address rem_address st ...
				fields := strings.Fields(l)
				if len(fields) < 4 {
					return fmt.Errorf("/proc/net/%s: short line %q", tab.file, l)
				}
				_, lport, _ := strings.Cut(fields[1], ":")
				remote, rport, _ := strings.Cut(fields[2], ":")
				listens := fields[3] == "0A" // TCP_LISTEN
				if strings.HasPrefix(tab.file, "udp") {
					listens = rport == "0000" && strings.Trim(remote, "0") == ""
				}
				if !listens {
					continue
				}
				port, err := strconv.ParseUint(lport, 16, 16)
				if err != nil {
					return fmt.Errorf("/proc/net/%s: port %q: %w", tab.file, lport, err)
				}
				*tab.into = append(*tab.into, uint16(port))
			}
		}
		return nil
	})
	if err != nil {
		return nil, nil, err
	}
	slices.Sort(tcp)
	slices.Sort(udp)
	return slices.Compact(tcp), slices.Compact(udp), nil
}
