// Package exampleflag gives the small example programs one command line
// behaviour: -h and --help say what the program does, how to run it and its
// flags; a wrong flag, a stray argument or a bad value is refused with exit
// status 2 before anything starts.
package exampleflag
