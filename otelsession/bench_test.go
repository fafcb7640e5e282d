package otelsession_test

// Benchmarks, each beside the raw OpenTelemetry (or context.WithValue)
// baseline it should be compared with. Run:
//
//	go test -run '^$' -bench . -benchmem -count 6 ./otelsession/ | tee new.txt
//
// The baselines operate on exactly the members a full Bind produces, so the
// ratio is like for like.

import (
	"context"
	"strconv"
	"testing"

	"go.opentelemetry.io/otel/baggage"
	otelprop "go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/sessionwire/sessionwire/internal/benchcpu"
	"github.com/sessionwire/sessionwire/otelsession"
	"github.com/sessionwire/sessionwire/propagation"
)

var (
	sinkCtx   context.Context
	sinkStr   string
	sinkState otelsession.State
	sinkSess  otelsession.Session
)

// boundMembers returns the baggage members of a full bound session.
func boundMembers(b *testing.B) []baggage.Member {
	ms := baggage.FromContext(otelsession.Bind(context.Background(), fullSession())).Members()
	if len(ms) < 15 {
		b.Fatalf("a full session has %d members", len(ms))
	}
	return ms
}

func BenchmarkBind(b *testing.B) {
	bg := context.Background()
	s := fullSession()
	members := boundMembers(b)
	b.Logf("a full session is %d baggage members", len(members))

	nextMessage := func(b *testing.B) {
		// The same conversation, a new message id each time: the cache's
		// entry with the message id member replaced.
		ids := make([]string, 1024)
		for i := range ids {
			ids[i] = strconv.Itoa(1_000_000 + i)
		}
		defer benchcpu.Time(b)()
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			s := s
			s.MessageID = ids[i%len(ids)]
			i++
			sinkCtx = otelsession.Bind(bg, s)
		}
	}
	setMember := func(b *testing.B) {
		// The least OpenTelemetry's API does to derive the next message's
		// baggage from the previous one: copy its map with one member
		// replaced. The members are built beforehand, as the floor's are.
		bag := baggage.FromContext(otelsession.Bind(bg, s))
		ids := make([]baggage.Member, 1024)
		for i := range ids {
			m, err := baggage.NewMemberRaw(otelsession.FieldMessageID.Key(), strconv.Itoa(1_000_000+i))
			if err != nil {
				b.Fatal(err)
			}
			ids[i] = m
		}
		// From a map SetMember built, as a conversation's next message
		// finds it: baggage.New grows its map member by member, and a map
		// grown that way is slower to copy than one made to size.
		bag, _ = bag.SetMember(ids[len(ids)-1])
		defer benchcpu.Time(b)()
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			next, _ := bag.SetMember(ids[i%len(ids)])
			i++
			sinkCtx = baggage.ContextWithBaggage(bg, next)
		}
	}
	// The garbage collector's share of a row's CPU time grows with the live
	// heap it marks (benchcpu.LiveHeap), so rows compared with each other
	// run beside the same one. The next message's Bind and its floor run
	// first beside an almost empty heap, as benchmarks commonly do; after
	// the first-time binds below have filled the bind cache (about 2.5 MiB
	// live, as a gateway's cache is), they run again beside it, with every
	// row after them.
	b.Run("sessionwire/Bind_next_message", nextMessage)
	b.Run("baseline/SetMember_new_message_id", setMember)
	// firstTime binds sessions never bound before into ctx: built, then
	// cached. 65,536 chat ids (each prefix's own) in turn, so a cache of a
	// few hundred entries never holds the next.
	firstTime := func(ctx context.Context, prefix string) func(b *testing.B) {
		return func(b *testing.B) {
			ids := make([]string, 1<<16)
			for i := range ids {
				ids[i] = prefix + strconv.Itoa(1_000_000_000+i)
			}
			defer benchcpu.Time(b)()
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				s := s
				s.ChatID = ids[i%len(ids)]
				i++
				sinkCtx = otelsession.Bind(ctx, s)
			}
		}
	}
	b.Run("sessionwire/Bind_first_time", firstTime(bg, "-100"))
	b.Run("sessionwire/Bind", func(b *testing.B) {
		// The same session again: served by the bind cache.
		defer benchcpu.Time(b)()
		b.ReportAllocs()
		for b.Loop() {
			sinkCtx = otelsession.Bind(bg, s)
		}
	})
	b.Run("sessionwire/Bind_next_message_beside_full_cache", nextMessage)
	b.Run("baseline/SetMember_new_message_id_beside_full_cache", setMember)
	// Over the application's own baggage, as a handler binds over a request
	// that carried some: one member (a tenant), the same session again
	// (the cache's baggage, the member merged into it: one SetMember) and
	// a session never bound before (built with the member, and noted); and
	// five members, more than the cache merges (built with them).
	appBag := func(kvs ...[2]string) context.Context {
		var ms []baggage.Member
		for _, kv := range kvs {
			m, _ := baggage.NewMemberRaw(kv[0], kv[1])
			ms = append(ms, m)
		}
		fb, _ := baggage.New(ms...)
		return baggage.ContextWithBaggage(bg, fb)
	}
	oneApp := appBag([2]string{"tenant", "acme"})
	fiveApp := appBag([2]string{"tenant", "acme"}, [2]string{"feature", "beta"}, [2]string{"region", "eu-west-1"},
		[2]string{"plan", "pro"}, [2]string{"canary", "1"})
	b.Run("sessionwire/Bind_over_1_foreign_member", func(b *testing.B) {
		defer benchcpu.Time(b)()
		b.ReportAllocs()
		for b.Loop() {
			sinkCtx = otelsession.Bind(oneApp, s)
		}
	})
	b.Run("sessionwire/Bind_over_1_foreign_member_first_time", firstTime(oneApp, "-200"))
	b.Run("sessionwire/Bind_over_5_foreign_members", func(b *testing.B) {
		defer benchcpu.Time(b)()
		b.ReportAllocs()
		for b.Loop() {
			sinkCtx = otelsession.Bind(fiveApp, s)
		}
	})
	b.Run("baseline/baggage.New_prebuilt", func(b *testing.B) {
		defer benchcpu.Time(b)()
		b.ReportAllocs()
		for b.Loop() {
			bag, _ := baggage.New(members...)
			sinkCtx = baggage.ContextWithBaggage(bg, bag)
		}
	})
	b.Run("baseline/NewMemberRaw_and_New", func(b *testing.B) {
		// What a program without sessionwire does to put the same values
		// into baggage: build each member with OpenTelemetry's constructor
		// (which validates it), then the baggage.
		kvs := make([][2]string, len(members))
		for i, m := range members {
			kvs[i] = [2]string{m.Key(), m.Value()}
		}
		defer benchcpu.Time(b)()
		b.ReportAllocs()
		for b.Loop() {
			ms := make([]baggage.Member, 0, len(kvs))
			for _, kv := range kvs {
				m, err := baggage.NewMemberRaw(kv[0], kv[1])
				if err != nil {
					b.Fatal(err)
				}
				ms = append(ms, m)
			}
			bag, _ := baggage.New(ms...)
			sinkCtx = baggage.ContextWithBaggage(bg, bag)
		}
	})
	b.Run("baseline/sequential_SetMember", func(b *testing.B) {
		defer benchcpu.Time(b)()
		b.ReportAllocs()
		for b.Loop() {
			var bag baggage.Baggage
			for _, m := range members {
				bag, _ = bag.SetMember(m)
			}
			sinkCtx = baggage.ContextWithBaggage(bg, bag)
		}
	})
	b.Run("baseline/context.WithValue_struct", func(b *testing.B) {
		type key struct{}
		defer benchcpu.Time(b)()
		b.ReportAllocs()
		for b.Loop() {
			sinkCtx = context.WithValue(bg, key{}, s)
		}
	})
}

func BenchmarkLookup(b *testing.B) {
	// The Unset fallback reads an in-memory environment, not os.Environ.
	ctx, _ := envCtx(nil)
	ctx = otelsession.Bind(ctx, fullSession())
	key := otelsession.FieldThreadID.Key()

	b.Run("sessionwire/Lookup", func(b *testing.B) {
		defer benchcpu.Time(b)()
		b.ReportAllocs()
		for b.Loop() {
			sinkStr, sinkState = otelsession.Lookup(ctx, otelsession.FieldThreadID)
		}
	})
	b.Run("sessionwire/Lookup_local_field", func(b *testing.B) {
		defer benchcpu.Time(b)()
		b.ReportAllocs()
		for b.Loop() {
			sinkStr, sinkState = otelsession.Lookup(ctx, otelsession.FieldUISessionID)
		}
	})
	b.Run("sessionwire/Getenv", func(b *testing.B) {
		defer benchcpu.Time(b)()
		b.ReportAllocs()
		for b.Loop() {
			sinkStr = otelsession.Getenv(ctx, "HERMES_SESSION_THREAD_ID", "")
		}
	})
	b.Run("sessionwire/Getenv_unset_fallback", func(b *testing.B) {
		reset := otelsession.Reset(ctx)
		defer benchcpu.Time(b)()
		b.ReportAllocs()
		for b.Loop() {
			sinkStr = otelsession.Getenv(reset, "HERMES_SESSION_THREAD_ID", "")
		}
	})
	b.Run("baseline/baggage_Member_Value", func(b *testing.B) {
		defer benchcpu.Time(b)()
		b.ReportAllocs()
		for b.Loop() {
			sinkStr = baggage.FromContext(ctx).Member(key).Value()
		}
	})

	// The contexts a handler holds: Bind's under the span it starts, and a
	// worker's after a consumer's inbound policy accepted the session from
	// a message, under its span, each beside the raw read of the same
	// context. Then a context whose baggage no sessionwire code built or
	// accepted (the stock propagator extracted it), so there is no record
	// to read: what a read costs without one.
	sc := trace.NewSpanContext(trace.SpanContextConfig{
		TraceID: trace.TraceID{1, 2, 3}, SpanID: trace.SpanID{4, 5, 6}, TraceFlags: trace.FlagsSampled,
	})
	spanned := trace.ContextWithSpanContext(ctx, sc)
	line := otelprop.MapCarrier{}
	otelprop.Baggage{}.Inject(ctx, line)
	base, _ := envCtx(nil)
	extracted, err := propagation.NewInbound(propagation.TrustAll).Extract(base, otelprop.Baggage{}, line, propagation.Peer{Transport: "nats"})
	if err != nil {
		b.Fatal(err)
	}
	extracted = trace.ContextWithSpanContext(extracted, sc)
	foreign := trace.ContextWithSpanContext(otelprop.Baggage{}.Extract(base, line), sc)
	for _, c := range []context.Context{extracted, foreign} {
		if v, st := otelsession.Lookup(c, otelsession.FieldThreadID); st != otelsession.Set || v == "" {
			b.Fatalf("the extracted context's thread is %q (%v)", v, st)
		}
	}
	for _, c := range []struct {
		name string
		ctx  context.Context
	}{{"under_span", spanned}, {"extracted", extracted}, {"foreign", foreign}} {
		b.Run(c.name+"/sessionwire/Lookup", func(b *testing.B) {
			defer benchcpu.Time(b)()
			b.ReportAllocs()
			for b.Loop() {
				sinkStr, sinkState = otelsession.Lookup(c.ctx, otelsession.FieldThreadID)
			}
		})
		b.Run(c.name+"/sessionwire/Getenv", func(b *testing.B) {
			defer benchcpu.Time(b)()
			b.ReportAllocs()
			for b.Loop() {
				sinkStr = otelsession.Getenv(c.ctx, "HERMES_SESSION_THREAD_ID", "")
			}
		})
		b.Run(c.name+"/baseline/baggage_Member_Value", func(b *testing.B) {
			defer benchcpu.Time(b)()
			b.ReportAllocs()
			for b.Loop() {
				sinkStr = baggage.FromContext(c.ctx).Member(key).Value()
			}
		})
	}
}

func BenchmarkSnapshotAndReset(b *testing.B) {
	ctx := otelsession.Bind(context.Background(), fullSession())
	b.Run("sessionwire/FromContext", func(b *testing.B) {
		defer benchcpu.Time(b)()
		b.ReportAllocs()
		for b.Loop() {
			sinkSess = otelsession.FromContext(ctx)
		}
	})
	b.Run("sessionwire/Reset", func(b *testing.B) {
		defer benchcpu.Time(b)()
		b.ReportAllocs()
		for b.Loop() {
			sinkCtx = otelsession.Reset(ctx)
		}
	})
	b.Run("sessionwire/Clear", func(b *testing.B) {
		defer benchcpu.Time(b)()
		b.ReportAllocs()
		for b.Loop() {
			sinkCtx = otelsession.Clear(ctx)
		}
	})
	b.Run("sessionwire/With", func(b *testing.B) {
		defer benchcpu.Time(b)()
		b.ReportAllocs()
		for b.Loop() {
			sinkCtx = otelsession.With(ctx, otelsession.FieldCronAutoDeliverChatID, "c")
		}
	})
}
