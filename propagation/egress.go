package propagation

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strings"

	"go.opentelemetry.io/otel/baggage"

	"github.com/sessionwire/sessionwire/otelsession"
)

// Egress is the allowlist of destinations that may receive session members.
// Its zero value allows none: third-party APIs see no session unless the user
// names them. Other baggage members and trace context are not its concern.
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
// session must not reach: the session's baggage members are removed (local
// state never travels anyway). Everything else in ctx is unchanged.
func WithoutSession(ctx context.Context) context.Context {
	if !hasSession(baggage.FromContext(ctx)) {
		return ctx
	}
	return otelsession.Reset(ctx)
}

// StripSessionHeader removes session members from the baggage headers of h,
// which some other code (otelhttp in front of a transport, say) may already
// have injected. Members that are not session fields are kept; a header line
// the OTel parser cannot read at all is dropped, since it cannot be proven
// free of a session.
func StripSessionHeader(h http.Header) error {
	lines := h.Values(baggageHeader)
	if len(lines) == 0 {
		return nil
	}
	var kept []string
	var parseErr error
	for _, line := range lines {
		b, err := baggage.Parse(line)
		if err != nil && parseErr == nil {
			parseErr = fmt.Errorf("strip session from outgoing baggage: %w", err)
		}
		for _, m := range b.Members() {
			if isSessionKey(m.Key()) {
				b = b.DeleteMember(m.Key())
			}
		}
		if s := b.String(); s != "" {
			kept = append(kept, s)
		}
	}
	h.Del(baggageHeader)
	for _, s := range kept {
		h.Add(baggageHeader, s)
	}
	return parseErr
}

// isSessionKey reports whether key belongs to the session: any field key,
// the working directory or the async-delivery capability.
func isSessionKey(key string) bool {
	if _, ok := otelsession.FieldByKey(key); ok {
		return true
	}
	return key == otelsession.CwdKey || key == otelsession.AsyncDeliveryKey || key == otelsession.SignatureKey
}

func hasDotSegment(p string) bool {
	for seg := range strings.SplitSeq(p, "/") {
		if seg == "." || seg == ".." {
			return true
		}
	}
	return false
}
