// Package nftnl writes and reads the nftables dataplane's table over
// netlink (github.com/google/nftables), so that a sync starts no nft
// process and needs no nft binary.
//
// Its input is the dataplane's vocabulary: knftables objects whose rules
// are nft text. Every rule is compiled to the expressions nft itself
// generates for that text, so that what an administrator lists with nft
// is what nft would have written; reading turns the expressions back into
// the same text.
package nftnl
