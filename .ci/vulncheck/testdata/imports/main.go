// Package main imports the fixture's vulnerable package, but calls
// nothing vulnerable in it.
package main

import "strings"

func main() { println(strings.HasPrefix("xy", "x")) }
