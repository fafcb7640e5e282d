package propagation_test

import (
	"context"
	"net/url"
	"testing"

	"go.opentelemetry.io/otel/baggage"

	"github.com/sessionwire/sessionwire/otelsession"
	"github.com/sessionwire/sessionwire/propagation"
)

func TestEgressAllows(t *testing.T) {
	hosts := func(h ...string) propagation.Egress { return propagation.Egress{Hosts: h} }
	prefixes := func(p ...string) propagation.Egress { return propagation.Egress{Prefixes: p} }
	cases := []struct {
		name   string
		egress propagation.Egress
		url    string
		want   bool
	}{
		{"zero value allows nothing", propagation.Egress{}, "https://notify.internal/", false},
		{"nil URL", hosts("notify.internal"), "", false},

		// Hosts.
		{"exact host", hosts("notify.internal"), "https://notify.internal/send", true},
		{"host without port allows every port", hosts("notify.internal"), "http://notify.internal:8080/", true},
		{"other host", hosts("notify.internal"), "https://api.example.com/", false},
		{"host is not a suffix match", hosts("notify.internal"), "https://evilnotify.internal/", false},
		{"host is not a subdomain match", hosts("internal"), "https://notify.internal/", false},
		{"host as a prefix of a longer name", hosts("notify.internal"), "https://notify.internal.evil.com/", false},
		{"host with port allows that port", hosts("127.0.0.1:8443"), "https://127.0.0.1:8443/x", true},
		{"host with port refuses another port", hosts("127.0.0.1:8443"), "https://127.0.0.1:9443/x", false},
		{"host with port refuses the implicit default port", hosts("notify.internal:443"), "https://notify.internal/", false},
		{"IPv6 host", hosts("::1"), "http://[::1]:8080/", true},
		{"IPv6 host with port", hosts("[::1]:8080"), "http://[::1]:8080/", true},
		{"case is ignored in the list", hosts("Notify.INTERNAL"), "https://notify.internal/", true},
		{"case is ignored in the URL", hosts("notify.internal"), "https://NOTIFY.Internal/", true},
		{"trailing dot is another name", hosts("notify.internal"), "https://notify.internal./", false},
		{"userinfo does not change the host", hosts("notify.internal"), "https://notify.internal@evil.com/", false},

		// Dot-suffix.
		{"dot-suffix allows a subdomain", hosts(".internal"), "https://notify.internal/", true},
		{"dot-suffix allows a deeper subdomain", hosts(".internal"), "https://a.b.internal:8443/", true},
		{"dot-suffix does not allow the bare name", hosts(".internal"), "https://internal/", false},
		{"dot-suffix is at a label boundary", hosts(".internal"), "https://evilinternal/", false},
		{"dot-suffix does not match a longer name", hosts(".internal"), "https://notify.internal.evil.com/", false},
		{"dot-suffix ignores case", hosts(".Internal"), "https://NOTIFY.INTERNAL/", true},

		// Prefixes.
		{"prefix without a path allows the whole origin", prefixes("https://api.internal"), "https://api.internal/any/path", true},
		{"prefix path", prefixes("https://api.internal/v1"), "https://api.internal/v1/send", true},
		{"prefix path itself", prefixes("https://api.internal/v1"), "https://api.internal/v1", true},
		{"prefix path at a / boundary only", prefixes("https://api.internal/v1"), "https://api.internal/v10/send", false},
		{"prefix path ending in /", prefixes("https://api.internal/v1/"), "https://api.internal/v1/send", true},
		{"prefix path ending in / refuses the bare path", prefixes("https://api.internal/v1/"), "https://api.internal/v1", false},
		{"prefix path refuses another path", prefixes("https://api.internal/v1/"), "https://api.internal/admin", false},
		{"prefix with dot segments leaving it", prefixes("https://api.internal/v1/"), "https://api.internal/v1/../admin", false},
		{"prefix with encoded dot segments leaving it", prefixes("https://api.internal/v1/"), "https://api.internal/v1/%2e%2e/admin", false},
		{"prefix host is not a name prefix", prefixes("https://api.internal"), "https://api.internal.evil.com/", false},
		{"prefix host is not a name prefix, with path", prefixes("https://api.internal/v1"), "https://api.internal.evil.com/v1", false},
		{"prefix scheme must match", prefixes("https://api.internal/v1"), "http://api.internal/v1", false},
		{"prefix scheme and host ignore case", prefixes("HTTPS://API.internal/v1"), "https://api.INTERNAL/v1/x", true},
		{"prefix path is case-sensitive", prefixes("https://api.internal/v1"), "https://api.internal/V1/x", false},
		{"prefix port must match", prefixes("https://api.internal:8443/v1"), "https://api.internal/v1", false},
		{"prefix with port", prefixes("https://api.internal:8443/v1"), "https://api.internal:8443/v1/x", true},
		{"prefix that is not a URL allows nothing", prefixes("api.internal/v1"), "https://api.internal/v1", false},

		{"either list may allow", propagation.Egress{Hosts: []string{"a.internal"}, Prefixes: []string{"https://b.internal/v1"}}, "https://b.internal/v1/x", true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var u *url.URL
			if tc.url != "" {
				var err error
				if u, err = url.Parse(tc.url); err != nil {
					t.Fatal(err)
				}
			}
			if got := tc.egress.Allows(u); got != tc.want {
				t.Errorf("%+v.Allows(%s) = %v, want %v", tc.egress, tc.url, got, tc.want)
			}
		})
	}
}

func TestWithoutSession(t *testing.T) {
	ctx := otelsession.Bind(context.Background(), otelsession.Session{ChatID: "c", UISessionID: "tab", Cwd: "/w", Stateless: true})
	app, _ := baggage.NewMemberRaw("app.tenant", "acme")
	b, _ := baggage.FromContext(ctx).SetMember(app)
	ctx = baggage.ContextWithBaggage(ctx, b)

	out := propagation.WithoutSession(ctx)
	for _, m := range baggage.FromContext(out).Members() {
		if isSessionMemberKey(m.Key()) {
			t.Errorf("member %s left in the outgoing context", m.Key())
		}
	}
	if got := baggage.FromContext(out).Member("app.tenant").Value(); got != "acme" {
		t.Errorf("app.tenant = %q, want it kept", got)
	}
	if v, _ := otelsession.Lookup(ctx, otelsession.FieldChatID); v != "c" {
		t.Errorf("the caller's context lost its session: chat id %q", v)
	}
}
