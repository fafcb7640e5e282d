package propagation

import (
	"context"
	"net/url"
	"strings"

	"go.opentelemetry.io/otel/baggage"

	"github.com/sessionwire/sessionwire/otelsession"
)

// Egress is an allowlist of URLs that may receive session members, for
// [AllowURLs]. Its zero value allows none: third-party APIs see no session
// unless the user names them. Other baggage members and trace context are not
// its concern.
type Egress struct {
	// Hosts lists host names, optionally with a port ("notify.internal",
	// "127.0.0.1:8443"); a name that starts with a dot (".internal") allows
	// every subdomain of it. A host without a port allows every port.
	// Matching ignores case.
	Hosts []string
	// Prefixes lists URL prefixes ("https://api.internal/v1/"): the scheme
	// and host must match exactly and the path must start with the prefix's
	// path at a "/" boundary.
	Prefixes []string
}

// Allows reports whether u may receive session members.
func (e Egress) Allows(u *url.URL) bool {
	if u == nil {
		return false
	}
	host := strings.ToLower(u.Hostname())
	hostPort := strings.ToLower(u.Host)
	for _, h := range e.Hosts {
		h = strings.ToLower(h)
		switch {
		case strings.HasPrefix(h, "."):
			if strings.HasSuffix(host, h) {
				return true
			}
		case h == host || h == hostPort:
			return true
		}
	}
	for _, p := range e.Prefixes {
		if prefixMatches(p, u) {
			return true
		}
	}
	return false
}

func prefixMatches(prefix string, u *url.URL) bool {
	p, err := url.Parse(prefix)
	if err != nil || p.Host == "" {
		return false
	}
	if !strings.EqualFold(p.Scheme, u.Scheme) || !strings.EqualFold(p.Host, u.Host) {
		return false
	}
	path := u.EscapedPath()
	pp := p.EscapedPath()
	if pp == "" || pp == "/" {
		return true
	}
	if !strings.HasPrefix(path, pp) || hasDotSegment(u.Path) {
		// A server resolves "/v1/../admin" to "/admin", outside the prefix.
		return false
	}
	return strings.HasSuffix(pp, "/") || len(path) == len(pp) || path[len(pp)] == '/'
}

// WithoutSession returns a copy of ctx for sending to a destination the
// session must not reach: every baggage member in the session namespace
// (otelsession.OwnedKey: fields, the signature, strays in any spelling) is
// removed, and local state never travels anyway. Everything else in ctx is
// unchanged. [Outbound.Inject] calls it for every destination it refuses.
func WithoutSession(ctx context.Context) context.Context {
	b := baggage.FromContext(ctx)
	if b.Len() == 0 {
		return ctx
	}
	if !hasSession(b) {
		owned := false
		for _, m := range b.Members() {
			if otelsession.OwnedKey(m.Key()) {
				owned = true
				break
			}
		}
		if !owned {
			return ctx
		}
	}
	return otelsession.Reset(ctx)
}

func hasDotSegment(p string) bool {
	for seg := range strings.SplitSeq(p, "/") {
		if seg == "." || seg == ".." {
			return true
		}
	}
	return false
}
