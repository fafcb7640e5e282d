package propagation_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/baggage"
	otelprop "go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/sessionwire/sessionwire/otelsession"
	"github.com/sessionwire/sessionwire/propagation"
	"github.com/sessionwire/sessionwire/propagation/internal/sessiontest"
)

// appendCarrier is a carrier whose Set adds a value instead of replacing
// the key's (as some message-header carriers do).
type appendCarrier map[string][]string

func (c appendCarrier) Get(key string) string {
	if v := c[key]; len(v) > 0 {
		return v[0]
	}
	return ""
}
func (c appendCarrier) Set(key, value string)      { c[key] = append(c[key], value) }
func (c appendCarrier) Keys() []string             { return slices.Collect(maps.Keys(c)) }
func (c appendCarrier) Values(key string) []string { return c[key] }

// deletingAppendCarrier is an appendCarrier that can also delete a key.
type deletingAppendCarrier struct{ appendCarrier }

func (c deletingAppendCarrier) Delete(key string) { delete(c.appendCarrier, key) }

// blindCarrier is a carrier that cannot read back what it was given (Get
// returns nothing), though it replaces on Set and can delete; Values shows
// the test what it holds.
type blindCarrier map[string][]string

func (c blindCarrier) Get(string) string          { return "" }
func (c blindCarrier) Set(key, value string)      { c[key] = []string{value} }
func (c blindCarrier) Keys() []string             { return slices.Collect(maps.Keys(c)) }
func (c blindCarrier) Values(key string) []string { return c[key] }
func (c blindCarrier) Delete(key string)          { delete(c, key) }

// perMemberBaggage writes baggage in another format than W3C's: one entry
// per member, as the OpenTracing propagator does ("ot-baggage-<key>").
type perMemberBaggage struct{}

func (perMemberBaggage) Inject(ctx context.Context, c otelprop.TextMapCarrier) {
	for _, m := range baggage.FromContext(ctx).Members() {
		c.Set("ot-baggage-"+m.Key(), m.Value())
	}
}
func (perMemberBaggage) Extract(ctx context.Context, _ otelprop.TextMapCarrier) context.Context {
	return ctx
}
func (perMemberBaggage) Fields() []string { return nil }

// wrappedW3C is a propagator of the application's own type around the W3C
// ones: sessionwire cannot know what it writes.
type wrappedW3C struct{ otelprop.TextMapPropagator }

// carrierView reads every entry of c, each W3C baggage value as its sorted
// members (their order is free), so that two carriers holding the same
// entries compare equal.
func carrierView(c otelprop.TextMapCarrier) map[string][]string {
	view := map[string][]string{}
	for _, k := range c.Keys() {
		var vs []string
		if vg, ok := c.(otelprop.ValuesGetter); ok {
			vs = vg.Values(k)
		} else {
			vs = []string{c.Get(k)}
		}
		for _, v := range vs {
			if strings.EqualFold(k, "baggage") {
				ms := strings.Split(v, ",")
				slices.Sort(ms)
				v = strings.Join(ms, ",")
			}
			view[k] = append(view[k], v)
		}
	}
	return view
}

func countSignatures(view map[string][]string) int {
	n := 0
	for k, vs := range view {
		for _, v := range vs {
			n += strings.Count(v, otelsession.SignatureKey+"=")
		}
		if strings.HasSuffix(strings.ToLower(k), otelsession.SignatureKey) {
			n += len(vs)
		}
	}
	return n
}

// A signing Outbound.Inject writes the signature into what the propagator
// wrote rather than copying the baggage to add it, where it can tell that
// is the same: every carrier and propagator must end up holding exactly
// what the stock propagator writes from the signed context (Signer.SignFor
// then Inject), one signature that verifies, and none past a withheld
// destination. InjectContext, which must return the signed context, signs
// the context itself: the two are compared too.
func TestSignedInjectWritesWhatTheSignedContextWrites(t *testing.T) {
	key := testKey("k1")
	signer := mustSigner(t, key, signTime)
	earlier := mustSigner(t, key, signTime.Add(-time.Minute))
	verifier := mustVerifier(t, signTime, key)
	sc := trace.NewSpanContext(trace.SpanContextConfig{
		TraceID: trace.TraceID{1, 2, 3}, SpanID: trace.SpanID{4, 5, 6}, TraceFlags: trace.FlagsSampled,
	})
	bound := trace.ContextWithSpanContext(otelsession.Bind(context.Background(), fullTestSession), sc)
	preSigned, err := earlier.SignFor(bound, "m-1")
	if err != nil {
		t.Fatal(err)
	}
	small := otelsession.Bind(context.Background(), otelsession.Session{Platform: "slack", ChatID: "C1"})

	carriers := map[string]func() otelprop.TextMapCarrier{
		"MapCarrier":    func() otelprop.TextMapCarrier { return otelprop.MapCarrier{} },
		"HeaderCarrier": func() otelprop.TextMapCarrier { return otelprop.HeaderCarrier(http.Header{}) },
		"appending Set, with Delete": func() otelprop.TextMapCarrier {
			return deletingAppendCarrier{appendCarrier{}}
		},
		"appending Set, no Delete": func() otelprop.TextMapCarrier { return appendCarrier{} },
		"cannot read back":         func() otelprop.TextMapCarrier { return blindCarrier{} },
	}
	props := map[string]struct {
		prop       otelprop.TextMapPropagator
		w3c, other bool // writes W3C baggage; writes it in another format
	}{
		"Baggage":                        {prop: otelprop.Baggage{}, w3c: true},
		"TraceContext+Baggage":           {prop: w3cProp, w3c: true},
		"nested composite":               {prop: otelprop.NewCompositeTextMapPropagator(otelprop.NewCompositeTextMapPropagator(otelprop.TraceContext{}), otelprop.Baggage{}), w3c: true},
		"TraceContext only (no baggage)": {prop: otelprop.NewCompositeTextMapPropagator(otelprop.TraceContext{})},
		"another baggage format":         {prop: perMemberBaggage{}, other: true},
		"W3C and another baggage format": {prop: otelprop.NewCompositeTextMapPropagator(otelprop.TraceContext{}, otelprop.Baggage{}, perMemberBaggage{}), w3c: true, other: true},
		"the application's own type":     {prop: wrappedW3C{w3cProp}, w3c: true},
		"no propagator at all":           {prop: otelprop.NewCompositeTextMapPropagator()},
	}
	contexts := map[string]struct {
		ctx    context.Context
		noRoom bool // the signature does not fit: sent unsigned, with ErrSignatureNoRoom
	}{
		"Bind's baggage":                      {ctx: bound},
		"with a foreign member":               {ctx: withForeign(t, bound, "app.tenant", "acme")},
		"already signed, by an earlier clock": {ctx: preSigned},
		"64 members: no room":                 {ctx: fill(t, small, 64-baggage.FromContext(small).Len(), 1), noRoom: true},
		"63 members: room for one":            {ctx: fill(t, small, 63-baggage.FromContext(small).Len(), 1)},
		"a few bytes short": {ctx: fill(t, small, 1, otelsession.MaxBaggageBytes-len(strings.Join(headerLines(small), ","))-60),
			noRoom: true},
		"room to spare in bytes": {ctx: fill(t, small, 1, otelsession.MaxBaggageBytes-len(strings.Join(headerLines(small), ","))-200)},
	}
	dest := propagation.Dest{Transport: propagation.TransportNATS, Name: "chat.in", MessageID: "m-1"}
	for cname, newCarrier := range carriers {
		for pname, p := range props {
			prop := p.prop
			for xname, x := range contexts {
				t.Run(cname+"/"+pname+"/"+xname, func(t *testing.T) {
					want := newCarrier()
					wantErr := error(nil)
					if signed, err := signer.SignFor(x.ctx, "m-1"); err != nil {
						wantErr = err
						prop.Inject(signed, want)
					} else {
						prop.Inject(signed, want)
					}
					if (wantErr != nil) != x.noRoom || x.noRoom && !errors.Is(wantErr, propagation.ErrSignatureNoRoom) {
						t.Fatalf("test setup: SignFor: %v", wantErr)
					}
					policy := propagation.NewOutbound(propagation.AllowAll, propagation.WithSigner(signer))
					got := newCarrier()
					err := policy.Inject(x.ctx, prop, got, dest)
					if x.noRoom != errors.Is(err, propagation.ErrSignatureNoRoom) || !x.noRoom && err != nil {
						t.Fatalf("Inject: err = %v, want ErrSignatureNoRoom: %v", err, x.noRoom)
					}
					gotView, wantView := carrierView(got), carrierView(want)
					if fmt.Sprint(gotView) != fmt.Sprint(wantView) {
						t.Errorf("Inject wrote\n%.2000v\nthe signed context writes\n%.2000v", gotView, wantView)
					}
					viaContext := newCarrier()
					sent, cerr := policy.InjectContext(x.ctx, prop, viaContext, dest)
					if (cerr != nil) != (err != nil) {
						t.Errorf("InjectContext: err = %v, Inject: %v", cerr, err)
					}
					if v := carrierView(viaContext); fmt.Sprint(v) != fmt.Sprint(gotView) {
						t.Errorf("Inject wrote\n%.2000v\nInjectContext\n%.2000v", gotView, v)
					}
					// The context InjectContext returns holds what was sent:
					// the signed baggage, or the unsigned one when the
					// signature did not fit. A transport hands it to whatever
					// injects next.
					wantCtx, _ := signer.SignFor(x.ctx, "m-1")
					if fmt.Sprint(sortedMembers(sent)) != fmt.Sprint(sortedMembers(wantCtx)) {
						t.Errorf("InjectContext returned the baggage\n%.2000v\nSignFor\n%.2000v", sortedMembers(sent), sortedMembers(wantCtx))
					}
					if err := verifier.Verify(sent, "m-1"); (err == nil) == x.noRoom {
						t.Errorf("the context InjectContext returned: Verify: %v", err)
					}
					if c := policy.Counts(); c.Sent != 2 || (c.Signed == 2) == x.noRoom {
						t.Errorf("counts %+v", c)
					}

					sigs, want1 := countSignatures(gotView), 0
					if !x.noRoom {
						if p.w3c {
							want1++
						}
						if p.other {
							want1++
						}
					}
					if sigs != want1 {
						t.Errorf("%d signatures sent, want %d (one per baggage format): %.2000v", sigs, want1, gotView)
					}
					if !p.w3c || x.noRoom {
						return
					}
					// A verifier downstream accepts what was sent.
					line := strings.Join(gotView[baggageKeyOf(got)], ",")
					members := baggage.FromContext(x.ctx).Len()
					if baggage.FromContext(x.ctx).Member(otelsession.SignatureKey).Key() == "" {
						members++
					}
					if n := len(strings.Split(line, ",")); n != members {
						t.Errorf("%d members sent, want %d", n, members)
					}
					in := propagation.NewInbound(propagation.TrustNone, propagation.WithVerifier(verifier))
					_, err = in.Extract(context.Background(), otelprop.Baggage{}, otelprop.MapCarrier{"baggage": line},
						propagation.Peer{Transport: propagation.TransportNATS, Name: "chat.in", MessageID: "m-1"})
					if err != nil || in.Counts().Signed != 1 {
						t.Errorf("the receiving side: %v, counts %+v", err, in.Counts())
					}
				})
			}
		}
	}
}

func sortedMembers(ctx context.Context) []string {
	var ms []string
	for _, m := range baggage.FromContext(ctx).Members() {
		ms = append(ms, m.String())
	}
	slices.Sort(ms)
	return ms
}

func baggageKeyOf(c otelprop.TextMapCarrier) string {
	if _, ok := c.(otelprop.HeaderCarrier); ok {
		return "Baggage"
	}
	return "baggage"
}

// Past a withheld destination neither the session nor a signature goes,
// whatever the carrier already held and whatever the context carries, and
// the application's own members still do.
func TestSignedInjectSendsNoSignatureToAWithheldDestination(t *testing.T) {
	signer := mustSigner(t, testKey("k1"), signTime)
	bound := withForeign(t, otelsession.Bind(context.Background(), fullTestSession), "app.tenant", "acme")
	preSigned, err := signer.Sign(bound)
	if err != nil {
		t.Fatal(err)
	}
	policy := propagation.NewOutbound(propagation.AllowNone, propagation.WithSigner(signer))
	dest := propagation.Dest{Transport: propagation.TransportNATS, Name: "partner.feed", MessageID: "m-1"}
	for name, ctx := range map[string]context.Context{"unsigned": bound, "signed before": preSigned} {
		for _, c := range []otelprop.TextMapCarrier{
			otelprop.MapCarrier{"baggage": "app.x=1,session.sig=v1.k1.1.forged"},
			otelprop.HeaderCarrier(http.Header{"Baggage": {"app.x=1"}}),
			deletingAppendCarrier{appendCarrier{}},
		} {
			if err := policy.Inject(ctx, w3cProp, c, dest); err != nil {
				t.Fatal(err)
			}
			view := carrierView(c)
			if n := countSignatures(view); n != 0 {
				t.Errorf("%s, %T: %d signatures sent: %v", name, c, n, view)
			}
			if got := fmt.Sprint(view[baggageKeyOf(c)]); got != "[app.tenant=acme]" {
				t.Errorf("%s, %T: baggage %s, want the application's member alone", name, c, got)
			}
		}
	}
	if c := policy.Counts(); c.Signed != 0 || c.Withheld != 6 {
		t.Errorf("counts %+v", c)
	}
}

// The raw_signed baseline of the benchmarks sends what the Signer sends:
// the same members, the same signature, which a Verifier accepts.
func TestRawSignerSignsWhatTheSignerSigns(t *testing.T) {
	key := testKey("k1")
	signer := mustSigner(t, key, signTime)
	raw := sessiontest.NewRawSigner(key.ID, key.Secret, fixedClock(signTime))
	for _, id := range []string{"", "m-1"} {
		ctx := otelsession.Bind(context.Background(), fullTestSession)
		want := otelprop.MapCarrier{}
		if err := propagation.NewOutbound(propagation.AllowAll, propagation.WithSigner(signer)).Inject(ctx, w3cProp, want,
			propagation.Dest{Transport: propagation.TransportNATS, Name: "chat.in", MessageID: id}); err != nil {
			t.Fatal(err)
		}
		signed, err := raw.Sign(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		got := otelprop.MapCarrier{}
		w3cProp.Inject(signed, got)
		if g, w := carrierView(got), carrierView(want); fmt.Sprint(g) != fmt.Sprint(w) {
			t.Errorf("message id %q: the raw signer wrote\n%v\nthe Signer\n%v", id, g, w)
		}
		if err := mustVerifier(t, signTime, key).Verify(signed, id); err != nil {
			t.Errorf("message id %q: %v", id, err)
		}
	}
}

// A signer whose clock reads before 1970 signs nothing: the session goes
// unsigned, with an error that says why, on either path.
func TestSignedInjectWithAClockBefore1970(t *testing.T) {
	signer := mustSigner(t, testKey("k1"), time.Unix(-1, 0))
	policy := propagation.NewOutbound(propagation.AllowAll, propagation.WithSigner(signer))
	ctx := otelsession.Bind(context.Background(), fullTestSession)
	dest := propagation.Dest{Transport: propagation.TransportNATS, Name: "chat.in"}
	for _, prop := range []otelprop.TextMapPropagator{w3cProp, wrappedW3C{w3cProp}} {
		c := otelprop.MapCarrier{}
		sent, err := policy.InjectContext(ctx, prop, c, dest)
		if !errors.Is(err, propagation.ErrSignatureConfig) || !strings.Contains(err.Error(), "before 1970") {
			t.Errorf("%T: err = %v", prop, err)
		}
		if strings.Contains(c["baggage"], otelsession.SignatureKey) || !strings.Contains(c["baggage"], "session.chat_id=") {
			t.Errorf("%T: sent %q, want the session unsigned", prop, c["baggage"])
		}
		if baggage.FromContext(sent).Member(otelsession.SignatureKey).Key() != "" {
			t.Errorf("%T: the context returned holds a signature", prop)
		}
	}
	if c := policy.Counts(); c.Sent != 2 || c.Signed != 0 {
		t.Errorf("counts %+v", c)
	}
}
