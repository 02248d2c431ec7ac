package xtables

import "testing"

// TestRuleKey: a rule as the dataplane writes it and as iptables-save
// (1.8.9, both backends) lists it back have one Key; rules that act
// differently do not.
func TestRuleKey(t *testing.T) {
	for _, tc := range []struct {
		name        string
		written     string
		listed      string
		differently bool
	}{
		{name: "match order, /32, implicit -m tcp",
			written: `-m comment --comment "a/b:http cluster IP" -m tcp -p tcp -d 10.96.0.10 --dport 80 -j PK-SVC-X`,
			listed:  `-d 10.96.0.10/32 -p tcp -m comment --comment "a/b:http cluster IP" -m tcp --dport 80 -j PK-SVC-X`},
		{name: "default reject reason",
			written: `-m comment --comment "a/b:http has no endpoints" -m tcp -p tcp -d 10.96.0.10 --dport 80 -j REJECT`,
			listed:  `-d 10.96.0.10/32 -p tcp -m comment --comment "a/b:http has no endpoints" -m tcp --dport 80 -j REJECT --reject-with icmp-port-unreachable`},
		{name: "other reject reason",
			written:     `-p tcp -j REJECT`,
			listed:      `-p tcp -j REJECT --reject-with tcp-reset`,
			differently: true},
		{name: "marks as --set-xmark",
			written: `-j MARK --or-mark 0x00004000`,
			listed:  `-j MARK --set-xmark 0x4000/0x4000`},
		{name: "xor mark as --set-xmark",
			written: `-j MARK --xor-mark 0x00004000`,
			listed:  `-j MARK --set-xmark 0x4000/0x0`},
		{name: "mark match notation",
			written: `-m mark ! --mark 0x00004000/0x00004000 -j RETURN`,
			listed:  `-m mark ! --mark 0x4000/0x4000 -j RETURN`},
		{name: "probability rounded by the kernel",
			written: `-m statistic --mode random --probability 0.3333333333 -j PK-SEP-X`,
			listed:  `-m statistic --mode random --probability 0.33333333349 -j PK-SEP-X`},
		{name: "another probability",
			written:     `-m statistic --mode random --probability 0.3333333333 -j PK-SEP-X`,
			listed:      `-m statistic --mode random --probability 0.50000000000 -j PK-SEP-X`,
			differently: true},
		{name: "recent defaults",
			written: `-m recent --name PK-SEP-X --rcheck --seconds 10800 --reap -j PK-SEP-X`,
			listed:  `-m recent --rcheck --seconds 10800 --reap --name PK-SEP-X --mask 255.255.255.255 --rsource -j PK-SEP-X`},
		{name: "recent timeout",
			written:     `-m recent --name PK-SEP-X --rcheck --seconds 10800 --reap -j PK-SEP-X`,
			listed:      `-m recent --rcheck --seconds 60 --reap --name PK-SEP-X --mask 255.255.255.255 --rsource -j PK-SEP-X`,
			differently: true},
		{name: "nfacct counter (iptables-save pads its name)",
			written: `-m comment --comment "a/b:http" -m tcp -p tcp -d 127.0.0.0/8 --dport 30080 -m nfacct --nfacct-name localhost_nps_accepted_pkts -j PK-EXT-X`,
			listed:  `-d 127.0.0.0/8 -p tcp -m comment --comment "a/b:http" -m tcp --dport 30080 -m nfacct --nfacct-name  localhost_nps_accepted_pkts -j PK-EXT-X`},
		{name: "another nfacct counter",
			written:     `-m conntrack --ctstate INVALID -m nfacct --nfacct-name ct_state_invalid_dropped_pkts -j DROP`,
			listed:      `-m conntrack --ctstate INVALID -m nfacct --nfacct-name  other -j DROP`,
			differently: true},
		{name: "nfacct counter gone",
			written:     `-m conntrack --ctstate INVALID -m nfacct --nfacct-name ct_state_invalid_dropped_pkts -j DROP`,
			listed:      `-m conntrack --ctstate INVALID -j DROP`,
			differently: true},
		{name: "negated source",
			written: `-d 127.0.0.0/8 ! -s 127.0.0.0/8 -m conntrack ! --ctstate RELATED,ESTABLISHED,DNAT -j DROP`,
			listed:  `! -s 127.0.0.0/8 -d 127.0.0.0/8 -m conntrack ! --ctstate RELATED,ESTABLISHED,DNAT -j DROP`},
		{name: "negation matters",
			written:     `-s 127.0.0.0/8 -j DROP`,
			listed:      `! -s 127.0.0.0/8 -j DROP`,
			differently: true},
		{name: "DNAT target",
			written:     `-m tcp -p tcp -j DNAT --to-destination 10.244.0.1:80`,
			listed:      `-p tcp -m tcp -j DNAT --to-destination 10.244.0.2:80`,
			differently: true},
		{name: "DNAT of the port alone",
			written: `-m comment --comment "a/b:http node port" -p tcp -m tcp --dport 30080 -j DNAT --to-destination :45439`,
			listed:  `-p tcp -m comment --comment "a/b:http node port" -m tcp --dport 30080 -j DNAT --to-destination :45439`},
		{name: "REDIRECT target",
			written: `-m comment --comment "a/b:http cluster IP" -d 10.96.0.10/32 -p tcp -m tcp --dport 80 -j REDIRECT --to-ports 40000`,
			listed:  `-d 10.96.0.10/32 -p tcp -m comment --comment "a/b:http cluster IP" -m tcp --dport 80 -j REDIRECT --to-ports 40000`},
		{name: "REDIRECT port matters",
			written:     `-p tcp -j REDIRECT --to-ports 40000`,
			listed:      `-p tcp -j REDIRECT --to-ports 40001`,
			differently: true},
		{name: "TPROXY defaults",
			written: `-m comment --comment "a/b:http cluster IP" -d 10.96.0.10/32 -p tcp -m tcp --dport 80 -j TPROXY --on-port 41234`,
			listed:  `-d 10.96.0.10/32 -p tcp -m comment --comment "a/b:http cluster IP" -m tcp --dport 80 -j TPROXY --on-port 41234 --on-ip 0.0.0.0 --tproxy-mark 0x0/0x0`},
		{name: "TPROXY IPv6 defaults",
			written: `-d fd00::10/128 -p udp -m udp --dport 53 -j TPROXY --on-port 41234 --tproxy-mark 0x00200000/0x00200000`,
			listed:  `-d fd00::10/128 -p udp -m udp --dport 53 -j TPROXY --on-port 41234 --on-ip :: --tproxy-mark 0x200000/0x200000`},
		{name: "TPROXY mark without a mask",
			written: `-p tcp -j TPROXY --on-port 1 --tproxy-mark 0x1`,
			listed:  `-p tcp -j TPROXY --on-port 1 --on-ip 0.0.0.0 --tproxy-mark 0x1/0xffffffff`},
		{name: "TPROXY port matters",
			written:     `-p tcp -j TPROXY --on-port 41234`,
			listed:      `-p tcp -j TPROXY --on-port 0 --on-ip 0.0.0.0 --tproxy-mark 0x0/0x0`,
			differently: true},
		{name: "TPROXY address matters",
			written:     `-p tcp -j TPROXY --on-port 41234`,
			listed:      `-p tcp -j TPROXY --on-port 41234 --on-ip 127.0.0.1 --tproxy-mark 0x0/0x0`,
			differently: true},
		{name: "TPROXY mark matters",
			written:     `-p tcp -j TPROXY --on-port 41234 --tproxy-mark 0x200000/0x200000`,
			listed:      `-p tcp -j TPROXY --on-port 41234 --on-ip 0.0.0.0 --tproxy-mark 0x0/0x0`,
			differently: true},
		{name: "addrtype negation matters",
			written:     `-m addrtype --src-type LOCAL -j DROP`,
			listed:      `-m addrtype ! --src-type LOCAL -j DROP`,
			differently: true},
		{name: "negated interface",
			written: `! -i cbr0 -d 1.2.3.4/32 -j DROP`,
			listed:  `-d 1.2.3.4/32 ! -i cbr0 -j DROP`},
		{name: "comment matters",
			written:     `-m comment --comment "a" -j RETURN`,
			listed:      `-m comment --comment "b" -j RETURN`,
			differently: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w, ok := RuleKey(tc.written)
			if !ok {
				t.Fatalf("cannot parse %q", tc.written)
			}
			l, ok := RuleKey(tc.listed)
			if !ok {
				t.Fatalf("cannot parse %q", tc.listed)
			}
			if (w != l) != tc.differently {
				t.Errorf("keys equal = %v, want %v:\n%s\n%s", w == l, !tc.differently, w, l)
			}
		})
	}
}
