package grpcsession

import (
	"runtime"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// The Edge's client remembers each connection it served, weakly: a closed
// connection that is garbage collected leaves the map, so a program that
// dials and closes connections for ever does not grow it.
func TestEdgeForgetsCollectedConnections(t *testing.T) {
	c := newConfig(nil)
	count := func() int {
		n := 0
		c.conns.Range(func(any, any) bool { n++; return true })
		return n
	}
	for i := range 20 {
		cc, err := grpc.NewClient("127.0.0.1:1", grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		st := c.conn(cc)
		if c.conn(cc) != st {
			t.Fatalf("connection %d: a second call found another state", i)
		}
		st.paired.Store(true)
		_ = cc.Close()
	}
	if n := count(); n != 20 {
		t.Fatalf("%d connections remembered, want 20", n)
	}
	deadline := time.Now().Add(10 * time.Second)
	for count() > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("%d of 20 closed connections still remembered", count())
		}
		runtime.GC()
		time.Sleep(10 * time.Millisecond)
	}
	// A new connection, perhaps at a collected one's address, starts unpaired.
	cc, err := grpc.NewClient("127.0.0.1:1", grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	if c.conn(cc).paired.Load() {
		t.Fatal("a new connection inherited a collected one's pairing")
	}
}
