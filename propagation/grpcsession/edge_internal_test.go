package grpcsession

import (
	"fmt"
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

// A connection's calls name their method's URL, each method's built once
// and shared by its calls, up to maxMethodURLs methods; beyond them a call
// still names its own.
func TestConnStateDestPerMethod(t *testing.T) {
	st := &connState{names: namesOf("dns:///notify.internal:443")}
	first := st.dest("/notify.v1.Notify/Send")
	if got := first.URL.String(); got != "grpc://notify.internal:443/notify.v1.Notify/Send" || first.Name != "notify.internal" {
		t.Fatalf("dest = %q named %q", got, first.Name)
	}
	again := st.dest("/notify.v1.Notify/Send")
	if again.URL != first.URL || again.Name != first.Name || again.Transport != first.Transport {
		t.Fatalf("a second call of the method named %+v, want %+v", again, first)
	}
	if other := st.dest("/notify.v1.Notify/Cancel"); other.URL.Path != "/notify.v1.Notify/Cancel" {
		t.Fatalf("another method named %q", other.URL)
	}
	for i := range 2 * maxMethodURLs {
		m := fmt.Sprintf("/svc.S/M%d", i)
		if d := st.dest(m); d.URL.Path != m {
			t.Fatalf("method %s named %q", m, d.URL)
		}
	}
	if n := st.nURLs.Load(); n != maxMethodURLs {
		t.Fatalf("%d URLs kept, want the bound, %d", n, maxMethodURLs)
	}
}
