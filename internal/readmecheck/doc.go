// Package readmecheck holds one test: that every Go snippet in the
// repository's README compiles against the code as it is, so that the
// README cannot drift from the API it shows. It owns no code a program
// imports.
package readmecheck
