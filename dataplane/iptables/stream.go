package iptables

import (
	"bufio"
	"bytes"
	"io"
)

// stream writes restore input as it is made: into a runner's pipe, a
// buffer, or nowhere (to learn its size first). It counts the bytes and,
// per table, the rules of the dataplane's own chains it writes, and keeps
// the first write error, after which it writes nothing more.
type stream struct {
	w *bufio.Writer // nil: count only
	// canary is the chain whose rule is not counted.
	canary  string
	n       int
	err     error
	table   int
	written [numTables]int
}

// newStream returns a stream into w, or one that only counts if w is nil.
func newStream(w io.Writer, canary string) *stream {
	s := &stream{canary: canary, table: -1}
	if w != nil {
		bw, ok := w.(*bufio.Writer)
		if !ok {
			bw = bufio.NewWriterSize(w, 1<<16)
		}
		s.w = bw
	}
	return s
}

func (s *stream) str(x string) {
	s.n += len(x)
	if s.w != nil && s.err == nil {
		_, s.err = s.w.WriteString(x)
	}
}

func (s *stream) bytes(x []byte) {
	s.n += len(x)
	if s.w != nil && s.err == nil {
		_, s.err = s.w.Write(x)
	}
}

// line writes one line from its parts. "*nat" and "*filter" switch the
// table that rules are counted in; an appended rule counts unless it is the
// canary's.
func (s *stream) line(parts ...string) {
	switch {
	case len(parts) == 1 && parts[0] == "*nat":
		s.table = tableNAT
	case len(parts) == 1 && parts[0] == "*filter":
		s.table = tableFilter
	case len(parts) > 1 && parts[0] == "-A " && parts[1] != s.canary && s.table >= 0:
		s.written[s.table]++
	}
	if s.w == nil {
		for _, p := range parts {
			s.n += len(p)
		}
		s.n++
		return
	}
	// A line is appended to the writer's free buffer and written at
	// once: a full sync writes hundreds of thousands of lines.
	n := 1
	for _, p := range parts {
		n += len(p)
	}
	if buf := s.w.AvailableBuffer(); cap(buf) >= n && s.err == nil {
		for _, p := range parts {
			buf = append(buf, p...)
		}
		s.n += n
		_, s.err = s.w.Write(append(buf, '\n'))
		return
	}
	for _, p := range parts {
		s.str(p)
	}
	s.str("\n")
}

// decls declares the own chains of one service port.
func (s *stream) decls(o *ownChains) {
	for _, c := range o.spans {
		s.line(":", c.name, " - [0:0]")
	}
}

// rules appends the rules of the own chains of one service port.
func (s *stream) rules(o *ownChains) {
	if s.w == nil {
		// Only counting: the same sum without visiting each rule.
		s.n += len(o.text)
		for _, c := range o.spans {
			s.n += int(c.rules) * (len("-A ") + len(c.name) + 1)
			s.written[s.table] += int(c.rules)
		}
		return
	}
	for name, rules := range o.all() {
		for len(rules) > 0 {
			i := bytes.IndexByte(rules, '\n')
			rule := rules[:i+1]
			rules = rules[i+1:]
			s.written[s.table]++
			// As in line, one write per rule where the buffer has room.
			n := len("-A ") + len(name) + 1 + len(rule)
			if buf := s.w.AvailableBuffer(); cap(buf) >= n && s.err == nil {
				buf = append(append(append(append(buf, "-A "...), name...), ' '), rule...)
				s.n += n
				_, s.err = s.w.Write(buf)
				continue
			}
			s.str("-A ")
			s.str(name)
			s.str(" ")
			s.bytes(rule)
		}
	}
}

// flush writes out what the stream buffers.
func (s *stream) flush() {
	if s.w != nil && s.err == nil {
		s.err = s.w.Flush()
	}
}
