// Package nftnl writes and reads the nftables dataplane's table over
// netlink, so that a sync starts no nft process and needs no nft binary.
//
// Its input is the dataplane's vocabulary: knftables objects whose rules
// are nft text, in Ops. Compile turns a rule's text into the expressions
// nft 1.0.6 itself generates for it, with nft's register numbering, plus
// the anonymous set or map the rule needs; sets and maps carry the user
// data nft writes (key byte order, typeof, comment). The messages a Conn
// sends are nft 1.0.6's for the same script byte for byte, so that an
// administrator running nft lists exactly what nft would have written. Decompile turns expressions read from the kernel back into
// text, and refuses (*DecompileError) whatever Compile would not write.
// The rule shapes are a closed set, the dataplane's; any other text is a
// *SyntaxError naming it.
//
// A Conn runs a list of Ops as one nftables transaction: one netlink
// batch, which the kernel commits whole or not at all, however large: it
// is never split (a cold sync of 100,000 services is one 80 MB sendmsg;
// the socket's send buffer is sized to the batch). Elements go thousands
// to a message, each message's element list under netlink's 64 KiB
// attribute limit, and runs of element operations are grouped by set. No acknowledgements are requested: the kernel answers only the
// messages it refuses, and a generation request sent after the batch
// marks the end of its answers, so a million-element batch costs no
// million replies and cannot overrun the receive buffer unless something
// was refused. A refused transaction changed nothing; its error
// (*OpError) names the refused operation as nft text and wraps the errno,
// and the socket is replaced so that no stale reply is read later.
//
// Conn also lists the table with the signatures and meaning of
// knftables.Interface's List, ListAll, ListRules and ListElements (rules
// as Decompile reads them, elements as nft prints them), prints the whole
// table as "nft list table" does (ListTable, for troubleshooting where
// there is no nft binary), and reads the ruleset generation, which moves
// with every commit in the namespace.
//
// From github.com/google/nftables only the expression types are used,
// and its decoding of expressions read back; the messages (expressions
// included), batching, replies and listing are this package's own, so
// none of v0.3.0's connection handling (acknowledgement floods, unsized
// buffers, oversized element attributes, sticky errors) applies.
package nftnl
