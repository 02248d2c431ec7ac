package xtables

import (
	"fmt"
	"math"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	v1 "k8s.io/api/core/v1"
)

// Rule is one parsed rule: the matches and the target the tracer
// understands.
type Rule struct {
	// Text is the rule as written, words joined by single spaces (quoted
	// words requoted), which is what -D compares.
	Text    string
	Comment string

	proto                string
	src, dst             *addrMatch
	inIface              string
	inNeg                bool
	dport                int
	srcLocal, dstLocal   bool
	srcNeg, dstNeg       bool
	ctstates             []string
	ctNeg                bool
	markVal, markMask    uint32
	hasMark, markNeg     bool
	recentCheck          bool
	recentSet            bool
	recentName           string
	recentSeconds        string
	recentReap           bool
	recentMask           string
	recentDest           bool
	probabilistic        bool
	probability          int64
	Target               string
	toDestination        string
	toPorts              string
	orMark, xorMark      uint32
	setsMark, clearsMark bool
	randomFully          bool
	rejectWith           string
	// matchSet is an ipset match ("[! ]NAME dst,dst"), which the tracer
	// evaluates against the Ruleset's ipsets (SetIPSets); without them a
	// rule with one never matches.
	matchSet string
	// tproxy holds a TPROXY target's options.
	tproxy tproxyTarget
	// nfacct is the counter an nfacct match adds the packet to; the
	// match itself always matches.
	nfacct string
}

// tproxyTarget is what a TPROXY target takes: the socket of the node the
// packet goes to (onIP unset or unspecified: any of its addresses) and
// the mark it sets (mark = mark&^markMask ^ markVal).
type tproxyTarget struct {
	onPort            int
	hasOnPort         bool
	onIP              netip.Addr
	markVal, markMask uint32
	hasMark           bool
}

func parseAddr(s string) (netip.Prefix, error) {
	if strings.Contains(s, "/") {
		p, err := netip.ParsePrefix(s)
		if err != nil {
			return p, err
		}
		if p != p.Masked() {
			return p, fmt.Errorf("prefix %s has host bits", s)
		}
		return p, nil
	}
	a, err := netip.ParseAddr(s)
	if err != nil {
		return netip.Prefix{}, err
	}
	return netip.PrefixFrom(a, a.BitLen()), nil
}

func parseMark(s string) (val, mask uint32, err error) {
	v, m, hasMask := strings.Cut(s, "/")
	vv, err := strconv.ParseUint(v, 0, 32)
	if err != nil {
		return 0, 0, err
	}
	mm := uint64(0xffffffff)
	if hasMask {
		if mm, err = strconv.ParseUint(m, 0, 32); err != nil {
			return 0, 0, err
		}
	}
	return uint32(vv), uint32(mm), nil
}

var knownModules = map[string]bool{
	"comment": true, "tcp": true, "udp": true, "sctp": true, "conntrack": true,
	"mark": true, "addrtype": true, "recent": true, "statistic": true,
	"set": true, "nfacct": true,
}

// ruleParser reads the words of one rule, keeping its text as it goes.
type ruleParser struct {
	words []string
	i     int
	text  []string
	// neg is set by a "!" for the option that follows it.
	neg bool
	r   *Rule
}

func (p *ruleParser) keep(w string) {
	if strings.ContainsAny(w, " \t") || w == "" {
		p.text = append(p.text, `"`+w+`"`)
	} else {
		p.text = append(p.text, w)
	}
}

// arg consumes the value of the option at i.
func (p *ruleParser) arg() (string, error) {
	if p.i+1 >= len(p.words) {
		return "", fmt.Errorf("option %s needs a value", p.words[p.i])
	}
	p.i++
	v := p.words[p.i]
	p.keep(v)
	return v, nil
}

// parseRule parses the words of a rule after "-A CHAIN".
func parseRule(words []string) (*Rule, error) {
	p := &ruleParser{words: words, r: &Rule{}}
	r := p.r
	for ; p.i < len(words); p.i++ {
		w := words[p.i]
		p.keep(w)
		if w == "!" {
			p.neg = true
			continue
		}
		handled, err := p.matchOption(w)
		if !handled && err == nil {
			if handled, err = p.targetOption(w); !handled && err == nil {
				err = fmt.Errorf("unknown option %q", w)
			}
		}
		if err != nil {
			return nil, err
		}
		if p.neg && !negatable(w) {
			return nil, fmt.Errorf("%s cannot be negated", w)
		}
		p.neg = false
	}
	if p.neg {
		return nil, fmt.Errorf("dangling !")
	}
	if (r.Target == "DNAT") != (r.toDestination != "") {
		return nil, fmt.Errorf("DNAT needs --to-destination and only DNAT takes it")
	}
	if r.toPorts != "" && r.Target != "REDIRECT" {
		return nil, fmt.Errorf("only REDIRECT takes --to-ports")
	}
	if r.dport != 0 && r.proto == "" {
		return nil, fmt.Errorf("--dport needs -p")
	}
	if err := r.checkTproxy(); err != nil {
		return nil, err
	}
	r.Text = strings.Join(p.text, " ")
	return r, nil
}

// matchOption reads w if it is an option of a match; handled is false
// for any other.
func (p *ruleParser) matchOption(w string) (handled bool, err error) {
	var v string
	switch w {
	case "-m":
		if v, err = p.arg(); err == nil && !knownModules[v] {
			err = fmt.Errorf("unknown match module %q", v)
		}
	case "-p":
		if v, err = p.arg(); err == nil {
			if !knownProto(protoFromString(v)) {
				err = fmt.Errorf("unknown protocol %q", v)
			}
			p.r.proto = v
		}
	case "-s", "-d":
		if v, err = p.arg(); err == nil {
			var prefix netip.Prefix
			if prefix, err = parseAddr(v); err == nil {
				m := &addrMatch{neg: p.neg, prefix: prefix}
				if w == "-s" {
					p.r.src = m
				} else {
					p.r.dst = m
				}
			}
		}
	case "-i":
		if v, err = p.arg(); err == nil {
			p.r.inIface, p.r.inNeg = v, p.neg
		}
	case "--dport":
		if v, err = p.arg(); err == nil {
			p.r.dport, err = strconv.Atoi(v)
			if err == nil && (p.r.dport < 1 || p.r.dport > 65535) {
				err = fmt.Errorf("port %d out of range", p.r.dport)
			}
		}
	case "--match-set":
		var flags string
		if v, err = p.arg(); err == nil {
			if flags, err = p.arg(); err == nil {
				p.r.matchSet = v + " " + flags
				if p.neg {
					p.r.matchSet = "! " + p.r.matchSet
				}
			}
		}
	case "--comment":
		if v, err = p.arg(); err == nil {
			if len(v) > 255 {
				err = fmt.Errorf("comment too long")
			}
			p.r.Comment = v
		}
	case "--src-type", "--dst-type":
		if v, err = p.arg(); err == nil {
			if v != "LOCAL" {
				err = fmt.Errorf("unsupported %s %s", w, v)
			} else if w == "--src-type" {
				p.r.srcLocal, p.r.srcNeg = true, p.neg
			} else {
				p.r.dstLocal, p.r.dstNeg = true, p.neg
			}
		}
	case "--ctstate":
		if v, err = p.arg(); err == nil {
			p.r.ctstates, p.r.ctNeg = strings.Split(v, ","), p.neg
		}
	case "--mark":
		if v, err = p.arg(); err == nil {
			p.r.markVal, p.r.markMask, err = parseMark(v)
			p.r.hasMark, p.r.markNeg = true, p.neg
		}
	case "--name":
		if v, err = p.arg(); err == nil && !validChainName(v) {
			err = fmt.Errorf("bad recent name %q", v)
		}
		p.r.recentName = v
	case "--rcheck":
		p.r.recentCheck = true
	case "--set":
		p.r.recentSet = true
	case "--reap":
		p.r.recentReap = true
	case "--rsource":
	case "--rdest":
		p.r.recentDest = true
	case "--mask":
		if v, err = p.arg(); err == nil {
			p.r.recentMask = v
		}
	case "--nfacct-name":
		if v, err = p.arg(); err == nil {
			p.r.nfacct = v
		}
	default:
		return false, nil
	}
	return true, err
}

// targetOption reads w if it is an option of a target (or of the
// statistic match, which picks among targets); handled is false for any
// other.
func (p *ruleParser) targetOption(w string) (handled bool, err error) {
	var v string
	switch w {
	case "--on-port", "--on-ip", "--tproxy-mark":
		if v, err = p.arg(); err == nil {
			err = p.r.tproxy.option(w, v)
		}
	case "--random-fully":
		p.r.randomFully = true
	case "--reject-with":
		p.r.rejectWith, err = p.arg()
	case "--seconds":
		if v, err = p.arg(); err == nil {
			_, err = strconv.ParseUint(v, 10, 32)
		}
		p.r.recentSeconds = v
	case "--mode":
		if v, err = p.arg(); err == nil && v != "random" {
			err = fmt.Errorf("unsupported statistic mode %q", v)
		}
	case "--probability":
		if v, err = p.arg(); err == nil {
			var f float64
			if f, err = strconv.ParseFloat(v, 64); err == nil && (f <= 0 || f > 1) {
				err = fmt.Errorf("probability %s out of range", v)
			}
			// The kernel keeps the probability as a fraction of 2^31
			// and iptables-save prints it back rounded differently
			// from what was written: compare what the kernel holds.
			p.r.probabilistic, p.r.probability = true, int64(math.Round(f*(1<<31)))
		}
	case "-j":
		if v, err = p.arg(); err == nil {
			p.r.Target = v
		}
	case "--to-destination":
		if v, err = p.arg(); err == nil {
			err = checkToDestination(v)
			p.r.toDestination = v
		}
	case "--to-ports":
		if v, err = p.arg(); err == nil {
			var port int
			if port, err = strconv.Atoi(v); err == nil && (port < 1 || port > 65535) {
				err = fmt.Errorf("port %d out of range", port)
			}
			p.r.toPorts = v
		}
	case "--set-xmark":
		// iptables-save's spelling of both: --or-mark M is
		// --set-xmark M/M, --xor-mark M is --set-xmark M/0.
		if v, err = p.arg(); err == nil {
			var val, mask uint32
			if val, mask, err = parseMark(v); err == nil {
				switch mask {
				case val:
					p.r.orMark, p.r.setsMark = val, true
				case 0:
					p.r.xorMark, p.r.clearsMark = val, true
				default:
					err = fmt.Errorf("unsupported --set-xmark %s", v)
				}
			}
		}
	case "--or-mark", "--xor-mark":
		if v, err = p.arg(); err == nil {
			var m uint64
			if m, err = strconv.ParseUint(v, 0, 32); err == nil {
				if w == "--or-mark" {
					p.r.orMark, p.r.setsMark = uint32(m), true
				} else {
					p.r.xorMark, p.r.clearsMark = uint32(m), true
				}
			}
		}
	default:
		return false, nil
	}
	return true, err
}

// checkToDestination checks a DNAT's --to-destination: an address and
// port, or a port alone (":PORT"), which keeps the packet's address.
func checkToDestination(v string) error {
	port, ok := strings.CutPrefix(v, ":")
	if !ok {
		_, err := netip.ParseAddrPort(v)
		return err
	}
	if n, err := strconv.ParseUint(port, 10, 16); err != nil || n == 0 {
		return fmt.Errorf("bad port in --to-destination %q", v)
	}
	return nil
}

// negatable reports whether the option opt may follow a "!".
func negatable(opt string) bool {
	switch opt {
	case "-s", "-d", "-i", "--ctstate", "--mark", "--match-set", "--src-type", "--dst-type":
		return true
	}
	return false
}

// option parses one of TPROXY's options, opt with value v.
func (t *tproxyTarget) option(opt, v string) error {
	var err error
	switch opt {
	case "--on-port":
		// 0 is the packet's own destination port.
		var n uint64
		if n, err = strconv.ParseUint(v, 10, 16); err == nil {
			t.onPort, t.hasOnPort = int(n), true
		}
	case "--on-ip":
		t.onIP, err = netip.ParseAddr(v)
	case "--tproxy-mark":
		t.markVal, t.markMask, err = parseMark(v)
		t.hasMark = true
	}
	if err != nil {
		return fmt.Errorf("bad %s %q: %w", opt, v, err)
	}
	return nil
}

// checkTproxy checks what the kernel's TPROXY target requires of a rule,
// and that no other target was given its options.
func (r *Rule) checkTproxy() error {
	tp := r.tproxy
	if r.Target != "TPROXY" {
		if tp.hasOnPort || tp.onIP.IsValid() || tp.hasMark {
			return fmt.Errorf("only TPROXY takes --on-port, --on-ip and --tproxy-mark")
		}
		return nil
	}
	if !tp.hasOnPort {
		return fmt.Errorf("TPROXY needs --on-port")
	}
	if p := protoFromString(r.proto); p != v1.ProtocolTCP && p != v1.ProtocolUDP {
		return fmt.Errorf("TPROXY needs -p tcp or -p udp")
	}
	for _, m := range []*addrMatch{r.src, r.dst} {
		if m != nil && tp.onIP.IsValid() && m.prefix.Addr().Is4() != tp.onIP.Is4() {
			return fmt.Errorf("--on-ip %s is not of the rule's family", tp.onIP)
		}
	}
	return nil
}

// key is what the target does, as Rule.Key spells it: no --on-ip is the
// unspecified address and no --tproxy-mark is 0/0, as iptables-save lists
// them.
func (t tproxyTarget) key() string {
	ip := ""
	if t.onIP.IsValid() && !t.onIP.IsUnspecified() {
		ip = t.onIP.String()
	}
	return fmt.Sprintf("%d,%s,%#x/%#x", t.onPort, ip, t.markVal, t.markMask)
}

func protoFromString(s string) v1.Protocol {
	return v1.Protocol(strings.ToUpper(s))
}

// knownProto reports whether rules can match p.
func knownProto(p v1.Protocol) bool {
	return p == v1.ProtocolTCP || p == v1.ProtocolUDP || p == v1.ProtocolSCTP
}

// Key returns what r does, independent of how it was spelled: the order of
// its matches, implicit match modules, address and mark notation, and the
// options iptables-save adds with their default values. Two rules with
// one Key behave alike, so a rule written by a restore and the same rule
// listed back by iptables-save have one Key.
func (r *Rule) Key() string {
	b := make([]byte, 0, 64+len(r.Comment)+len(r.Target)+len(r.toDestination))
	str := func(name, v string) {
		b = append(b, name...)
		b = append(b, '=')
		b = append(b, v...)
		b = append(b, ';')
	}
	num := func(name string, v int64) {
		b = append(b, name...)
		b = append(b, '=')
		b = strconv.AppendInt(b, v, 10)
		b = append(b, ';')
	}
	flag := func(name string, v bool) {
		if v {
			str(name, "1")
		}
	}
	addr := func(name string, m *addrMatch) {
		if m != nil {
			flag("!"+name, m.neg)
			str(name, m.prefix.String())
		}
	}
	str("p", r.proto)
	addr("s", r.src)
	addr("d", r.dst)
	if r.inIface != "" {
		flag("!i", r.inNeg)
		str("i", r.inIface)
	}
	num("dport", int64(r.dport))
	flag("src-local", r.srcLocal)
	flag("!src-local", r.srcNeg)
	flag("dst-local", r.dstLocal)
	flag("!dst-local", r.dstNeg)
	if len(r.ctstates) > 0 {
		flag("!ctstate", r.ctNeg)
		str("ctstate", strings.Join(slices.Sorted(slices.Values(r.ctstates)), ","))
	}
	if r.hasMark {
		flag("!mark", r.markNeg)
		num("mark", int64(r.markVal))
		num("mask", int64(r.markMask))
	}
	if r.recentCheck || r.recentSet {
		mask := r.recentMask
		if mask == "255.255.255.255" || mask == "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff" {
			mask = ""
		}
		flag("rcheck", r.recentCheck)
		flag("set", r.recentSet)
		str("name", r.recentName)
		str("seconds", r.recentSeconds)
		flag("reap", r.recentReap)
		str("rmask", mask)
		flag("rdest", r.recentDest)
	}
	if r.probabilistic {
		num("probability", r.probability)
	}
	str("set", r.matchSet)
	if r.nfacct != "" {
		str("nfacct", r.nfacct)
	}
	str("comment", r.Comment)
	str("j", r.Target)
	str("to", r.toDestination)
	str("to-ports", r.toPorts)
	if r.setsMark {
		num("or-mark", int64(r.orMark))
	}
	if r.clearsMark {
		num("xor-mark", int64(r.xorMark))
	}
	flag("random-fully", r.randomFully)
	if r.Target == "TPROXY" {
		str("tproxy", r.tproxy.key())
	}
	if r.Target == "REJECT" {
		// Each family's default reason is what a restore gets without one.
		if with := r.rejectWith; with != "" && with != "icmp-port-unreachable" && with != "icmp6-port-unreachable" {
			str("reject-with", with)
		}
	}
	return string(b)
}

// RuleKey parses the text of one rule (as iptables-save lists it or as
// restore input gives it) and returns its Key; ok is false for a rule
// this package does not understand.
func RuleKey(text string) (string, bool) {
	words, err := splitWords(text)
	if err != nil {
		return "", false
	}
	r, err := parseRule(words)
	if err != nil {
		return "", false
	}
	return r.Key(), true
}

// Key is the Key of the rule j inserts; ok is false for a rule this
// package does not understand.
func (j Jump) Key() (string, bool) {
	r, err := parseRule(j.Rule)
	if err != nil {
		return "", false
	}
	return r.Key(), true
}
