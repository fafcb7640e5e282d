package otelsession_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"testing"

	"go.opentelemetry.io/otel/baggage"

	"github.com/sessionwire/sessionwire/internal/sessionstate"
	"github.com/sessionwire/sessionwire/otelsession"
)

// Lookup, Getenv, Range and RangeFields read a baggage a writer built from
// the writer's own record of it instead of looking each field up. Whatever
// sequence of writes, and of baggage replaced behind the library's back, led
// to a context, they must see exactly what the baggage's members say.
func TestRangeAgreesWithLookupAfterAnyWrites(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 15))
	fields := otelsession.Fields()
	value := func() string {
		switch rng.IntN(4) {
		case 0:
			return "" // Cleared
		case 1:
			return "v" + strconv.Itoa(rng.IntN(3))
		default:
			return "x-" + strconv.Itoa(rng.IntN(1000))
		}
	}
	session := func() otelsession.Session {
		s := fullSession()
		s.ChatID, s.ThreadID, s.MessageID, s.UserName = value(), value(), value(), value()
		if rng.IntN(2) == 0 {
			s.MessageID = strconv.Itoa(rng.IntN(4)) // the bind cache's next-message path
		}
		return s
	}
	foreign := func(t *testing.T, ctx context.Context, withSession bool) context.Context {
		t.Helper()
		m, err := baggage.NewMemberRaw("app.tenant", value()+"t")
		if err != nil {
			t.Fatal(err)
		}
		ms := []baggage.Member{m}
		if withSession {
			// A session member nobody checked (another propagator's, say).
			sm, err := baggage.NewMemberRaw(otelsession.FieldChatID.Key(), "unchecked-"+strconv.Itoa(rng.IntN(9)))
			if err != nil {
				t.Fatal(err)
			}
			ms = append(ms, sm)
		}
		b, err := baggage.New(ms...)
		if err != nil {
			t.Fatal(err)
		}
		return baggage.ContextWithBaggage(ctx, b)
	}
	steps := []struct {
		name string
		do   func(t *testing.T, ctx context.Context) context.Context
	}{
		{"Bind", func(_ *testing.T, ctx context.Context) context.Context { return otelsession.Bind(ctx, session()) }},
		{"Bind over Reset", func(_ *testing.T, ctx context.Context) context.Context {
			return otelsession.Bind(otelsession.Reset(ctx), session())
		}},
		{"With", func(_ *testing.T, ctx context.Context) context.Context {
			return otelsession.With(ctx, fields[rng.IntN(len(fields))], value())
		}},
		{"Clear", func(_ *testing.T, ctx context.Context) context.Context { return otelsession.Clear(ctx) }},
		{"Reset", func(_ *testing.T, ctx context.Context) context.Context { return otelsession.Reset(ctx) }},
		{"WithSessionID", func(_ *testing.T, ctx context.Context) context.Context {
			return otelsession.WithSessionID(ctx, value())
		}},
		{"baggage replaced", func(t *testing.T, ctx context.Context) context.Context { return foreign(t, ctx, false) }},
		{"baggage replaced, with a session member", func(t *testing.T, ctx context.Context) context.Context { return foreign(t, ctx, true) }},
		{"baggage removed", func(_ *testing.T, ctx context.Context) context.Context { return baggage.ContextWithoutBaggage(ctx) }},
		{"every record's hint overwritten", func(_ *testing.T, ctx context.Context) context.Context {
			// The records stay in the context; RecordOf no longer finds
			// them, and the reads must read the baggage itself alike.
			sessionstate.ForgetRecorded()
			return ctx
		}},
		{"a member set over the checked baggage", func(t *testing.T, ctx context.Context) context.Context {
			m, err := baggage.NewMemberRaw(otelsession.FieldThreadID.Key(), "set-by-hand")
			if err != nil {
				t.Fatal(err)
			}
			b, err := baggage.FromContext(ctx).SetMember(m)
			if err != nil {
				t.Fatal(err)
			}
			return baggage.ContextWithBaggage(ctx, b)
		}},
	}
	recorded := 0
	for run := range 300 {
		ctx := context.Background()
		var trail []string
		for range 1 + rng.IntN(6) {
			s := steps[rng.IntN(len(steps))]
			ctx = s.do(t, ctx)
			trail = append(trail, s.name)
			if sessionstate.RecordOf(ctx, baggage.FromContext(ctx)) != nil {
				recorded++
			}
			want := map[otelsession.Field]string{}
			for _, f := range fields {
				v, st := rawState(ctx, f)
				want[f] = fmt.Sprintf("%q %v", v, st)
				if got, gst := otelsession.Lookup(ctx, f); fmt.Sprintf("%q %v", got, gst) != want[f] {
					t.Fatalf("run %d, after %v: Lookup gives %s = %q %v, the baggage %s", run, trail, f, got, gst, want[f])
				}
				if st != otelsession.Unset {
					if got := otelsession.Getenv(ctx, f.Name(), "unset"); got != v {
						t.Fatalf("run %d, after %v: Getenv gives %s = %q, the baggage %s", run, trail, f, got, want[f])
					}
				}
			}
			otelsession.Range(ctx, func(f otelsession.Field, v string, st otelsession.State) bool {
				if got := fmt.Sprintf("%q %v", v, st); got != want[f] {
					t.Fatalf("run %d, after %v: Range gives %s = %s, Lookup %s", run, trail, f, got, want[f])
				}
				return true
			})
			otelsession.RangeFields(ctx, fields, func(f otelsession.Field, v string, st otelsession.State) bool {
				if got := fmt.Sprintf("%q %v", v, st); got != want[f] {
					t.Fatalf("run %d, after %v: RangeFields gives %s = %s, Lookup %s", run, trail, f, got, want[f])
				}
				return true
			})
		}
	}
	if recorded == 0 {
		t.Error("no context had a record: the test did not read through one")
	}
	t.Logf("%d contexts read through a record", recorded)
}

// rawState is f's value and state by the definition: a remote field's member
// in the baggage (absent Unset, empty or the Cleared marker Cleared), a local
// field's from Lookup, which reads it from beside the baggage.
func rawState(ctx context.Context, f otelsession.Field) (string, otelsession.State) {
	if !f.Spec().Baggage() {
		return otelsession.Lookup(ctx, f)
	}
	m := baggage.FromContext(ctx).Member(f.Key())
	switch v := m.Value(); {
	case m.Key() == "":
		return "", otelsession.Unset
	case v == "" || v == otelsession.ClearedValue:
		return "", otelsession.Cleared
	default:
		return v, otelsession.Set
	}
}

// Every writer of a record tells RecordOf of it, so the reads of the
// contexts the writers return take the record: Bind (built, cached, the
// next message), the other writers, and a cached Bind whose hint another
// baggage's overwrote since it was built.
func TestWritersHintTheirRecords(t *testing.T) {
	hinted := func(name string, ctx context.Context) {
		t.Helper()
		if sessionstate.RecordOf(ctx, baggage.FromContext(ctx)) == nil {
			t.Errorf("%s: the reads do not find the context's record", name)
		}
	}
	s := fullSession()
	s.ChatID = "hint-" + t.Name()
	hinted("Bind, built", otelsession.Bind(context.Background(), s))
	hinted("Bind, cached", otelsession.Bind(context.Background(), s))
	s.MessageID = "next"
	hinted("Bind, the next message", otelsession.Bind(context.Background(), s))
	sessionstate.ForgetRecorded()
	hinted("Bind, cached after its hint was overwritten", otelsession.Bind(context.Background(), s))
	ctx := otelsession.With(otelsession.Bind(context.Background(), s), otelsession.FieldThreadID, "t-other")
	hinted("With", ctx)
	hinted("WithSessionID", otelsession.WithSessionID(ctx, "s-other"))
	hinted("Clear", otelsession.Clear(ctx))
}
