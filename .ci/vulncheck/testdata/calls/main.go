// Package main calls the fixture's vulnerable symbol.
package main

import "strings"

func main() { println(strings.Repeat("x", 2)) }
