// Package threadrpc is the example programs' smallest gRPC service: one
// unary method, Thread, that takes nothing and answers the thread of the
// conversation whose session the call carried. The examples use it to show
// the session crossing a gRPC hop (propagation/grpcsession). Its messages are
// protobuf's well-known types, so it needs no generated code.
package threadrpc
