package main

import (
	"flag"
	"fmt"
	"math"
	"net"
	"net/netip"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	sessionprop "github.com/sessionwire/sessionwire/propagation"
)

// flagExamples gives every flag an example for --help. A flag without one
// fails TestHelpExplainsEveryFlag: a new user should never have to guess
// what a value looks like.
var flagExamples = map[string]string{
	"role":              "--role worker --nats-url nats://10.0.0.5:4222",
	"nats-url":          "--nats-url nats://nats-1:4222,nats://nats-2:4222,nats://nats-3:4222",
	"session-store":     "--session-store env   (the same load with the original bug)",
	"listen":            "--listen 0.0.0.0:8080",
	"grpc-listen":       "--role load --downstream=grpc --grpc-listen 0.0.0.0:9091",
	"ingress-url":       "--role load --ingress-url http://gw-1:8080",
	"platform-url":      "--role router --platform-url http://load-1:9090/platforms",
	"downstream-url":    "--role worker --downstream-url http://load-1:9090/downstream   (or grpc://load-1:9091)",
	"downstream":        "--downstream=grpc   (workers call the downstream service over gRPC)",
	"messages":          "--messages 600",
	"conversations":     "--messages 600 --conversations 120",
	"workers":           "--workers 4",
	"concurrency":       "--concurrency 32",
	"think":             "--think 5ms   (0s: no simulated work)",
	"ack-wait":          "--ack-wait 10s",
	"timeout":           "--timeout 300s",
	"chaos":             "--chaos --workers 3",
	"fault":             "--nats-cluster 3 --fault nats-restart",
	"nats-cluster":      "--nats-cluster 3",
	"replicas":          "--replicas 3",
	"update-replicas":   "--replicas 3 --update-replicas",
	"max-wait":          "--max-wait 6h   (every role the same: a platform may be down that long with nothing lost)",
	"node-name":         "(internal: set by the gateway for the NATS servers it starts)",
	"node-port":         "(internal)",
	"node-cluster-port": "(internal)",
	"node-routes":       "(internal)",
	"node-store":        "(internal)",
	"json":              "--json > summary.json   (progress still goes to standard error)",
	"seed":              "--seed 7   (another interleaving of the same load)",
	"rate":              "--rate 100 --duration 60s",
	"duration":          "--rate 100 --duration 60s",
	"signing-key-id":    "--signing-key-id 2026-12   (with SESSIONWIRE_SIGNING_KEY set)",
	"trust":             "--trust 10.1.0.0/16,192.168.0.0/24",

	// A key rotation's (see the README, "Rotating the signing key").
	"previous-signing-key-id": "--signing-key-id 2026-12 --previous-signing-key-id 2026-11   (with SESSIONWIRE_SIGNING_KEY and SESSIONWIRE_PREVIOUS_SIGNING_KEY set)",
}

// helpText is what --help prints: what the program does, an example of
// each flag, and the exit statuses.
func helpText() string {
	var c config
	fs, _, _ := newFlagSet(&c)
	var b strings.Builder
	b.WriteString(`usage: gateway [flags]

Runs a whole distributed chat gateway on this machine (an HTTP ingress, NATS
JetStream, workers that run a tool as a child process and call a downstream
service, a router, stand-in chat platforms), sends it a load of interleaved
conversations and prints what was sent, delivered, misrouted, refused and lost.
Progress goes to standard error (redrawn in place on a terminal, a plain line
every few seconds otherwise); the summary to standard output.

  gateway                                   3,000 messages in one burst
  gateway --rate 100 --duration 60s         an open-loop load: 100 messages/s for a minute
  gateway --session-store env               the same load with the original bug
  gateway --chaos --workers 3               workers as processes, killed and restarted
  gateway --nats-cluster 3 --fault nats-kill   a NATS node lost mid-run
  gateway --json                            the summary as JSON, for scripts

Flags:
`)
	fs.VisitAll(func(f *flag.Flag) {
		kind, usage := flag.UnquoteUsage(f)
		if kind != "" {
			kind = " " + kind
		}
		fmt.Fprintf(&b, "  --%s%s\n      %s", f.Name, kind, usage)
		if f.DefValue != "" && f.DefValue != "0" && f.DefValue != "false" && f.DefValue != "0s" {
			fmt.Fprintf(&b, " (default %s)", f.DefValue)
		}
		fmt.Fprintf(&b, "\n      e.g. %s\n", flagExamples[f.Name])
	})
	b.WriteString(`
Exit status: 0 when every message was delivered to its own chat and thread,
1 when anything was misrouted, lost, shown twice or never posted (or the
gateway could not start), 2 when the command line makes no sense (nothing is
started), 130 when interrupted (Ctrl-C: the summary of what happened so far is
printed and every child process is stopped).
`)
	return b.String()
}

var roles = []string{"all", "gateway", "worker", "router", "load", "tool", "nats-node"}

// faultTimeout is --timeout's default for a run with --chaos or --fault.
const faultTimeout = 5 * time.Minute

// maxMessages bounds one run's plan, which is held in memory.
const maxMessages = 1_000_000

// finish checks the parsed flags (set: those given on the command line) and
// derives what follows from them: the open-loop message count, the trust
// policy and the signing key. Every error is a usageError.
func (c *config) finish(set map[string]bool, keyID, trust string) error {
	c.auth = webhookAuthFromEnv()
	c.key = sessionprop.Key{ID: keyID, Secret: []byte(demoKey)}
	if secret := os.Getenv("SESSIONWIRE_SIGNING_KEY"); secret != "" {
		c.key.Secret = []byte(secret)
	}
	if err := c.previousKey(); err != nil {
		return err
	}
	if c.trust = sessionprop.TrustLoopback(); trust != "loopback" {
		var prefixes []netip.Prefix
		for _, s := range strings.Split(trust, ",") {
			p, err := netip.ParsePrefix(strings.TrimSpace(s))
			if err != nil {
				return usagef("--trust %q: %q is not a network prefix such as 10.1.0.0/16 or fd00::/8 (or give --trust loopback)", trust, strings.TrimSpace(s))
			}
			if p != p.Masked() {
				return usagef("--trust %q: %s has host bits set; the network is %s", trust, p, p.Masked())
			}
			prefixes = append(prefixes, p)
		}
		c.trust = sessionprop.TrustPrefixes(prefixes...)
	}

	// A run that kills workers or breaks a node waits longer for its last
	// deliveries by default: each kill leaves jobs unacknowledged until
	// their ack wait runs out, and a node loss costs leader elections. A run
	// that stops making progress still ends early (the driver's idle rule).
	if (c.chaos || c.fault != "") && !set["timeout"] {
		c.timeout = faultTimeout
	}

	// The open loop: --rate and --duration decide the message count.
	switch {
	case math.IsNaN(c.rate) || math.IsInf(c.rate, 0) || c.rate < 0:
		return usagef("--rate must be a positive number of messages per second, not %v", c.rate)
	case c.duration < 0:
		return usagef("--duration must be positive, not %v", c.duration)
	case set["duration"] && c.rate == 0:
		return usagef("--duration is how long an open-loop load posts: give --rate too (such as --rate 100 --duration %v)", c.duration)
	case c.rate > 0 && set["messages"]:
		return usagef("choose one load: --messages N (one burst) or --rate N --duration D (open loop), not both")
	case c.rate > 0 && c.role != "all" && c.role != "load":
		return usagef("--rate drives the load: it needs --role all or load, not %s", c.role)
	}
	if c.rate > 0 {
		if c.duration == 0 {
			c.duration = 30 * time.Second
		}
		n := math.Ceil(c.rate * c.duration.Seconds())
		if n > maxMessages {
			return usagef("--rate %v for %v is %.0f messages; one run holds at most %d", c.rate, c.duration, n, maxMessages)
		}
		c.messages = max(1, int(n))
		if !set["conversations"] {
			c.conversations = min(c.conversations, c.messages)
		}
		if !set["timeout"] {
			c.timeout = max(c.timeout, c.duration+60*time.Second)
		} else if c.timeout <= c.duration {
			return usagef("--timeout %v must be longer than --duration %v: it bounds the posting and the wait for the last replies", c.timeout, c.duration)
		}
	}

	switch {
	case !slices.Contains(roles, c.role):
		return usagef("--role must be one of %s, not %q", strings.Join(roles[:5], ", "), c.role)
	case c.store != storeBaggage && c.store != storeEnv && c.store != storeOff:
		return usagef("--session-store must be baggage, env or off, not %q", c.store)
	case c.downstream != downstreamHTTP && c.downstream != downstreamGRPC:
		return usagef("--downstream must be http or grpc (how workers call the downstream service), not %q", c.downstream)
	case c.messages < 1:
		return usagef("--messages must be at least 1, not %d", c.messages)
	case c.messages > maxMessages:
		return usagef("--messages %d: one run holds at most %d", c.messages, maxMessages)
	case c.conversations < 1:
		return usagef("--conversations must be at least 1, not %d", c.conversations)
	case c.conversations > c.messages:
		return usagef("--conversations %d is more than --messages %d: every conversation needs at least one message", c.conversations, c.messages)
	case c.workers < 1 || c.concurrency < 1:
		return usagef("--workers and --concurrency must be at least 1, not %d and %d", c.workers, c.concurrency)
	case c.timeout <= 0:
		return usagef("--timeout must be positive (such as --timeout 120s), not %v: it is how long the driver waits for every delivery", c.timeout)
	case c.think < 0:
		return usagef("--think must be 0s or more, not %v", c.think)
	case c.ackWait <= 0:
		return usagef("--ack-wait must be positive (such as --ack-wait 3s), not %v", c.ackWait)
	case c.role != "all" && c.role != "tool" && c.role != "nats-node" && c.natsURL == "":
		return usagef("--role %s needs --nats-url", c.role)
	case c.natsNodes < 0 || c.natsNodes != 0 && c.natsNodes < 3:
		return usagef("--nats-cluster needs at least 3 servers (a majority must survive a lost one), not %d", c.natsNodes)
	case c.natsNodes != 0 && c.natsURL != "":
		return usagef("--nats-cluster starts its own servers: drop --nats-url")
	case c.layout.replicas < 0 || c.layout.replicas > 5:
		return usagef("--replicas must be between 0 and 5 (JetStream's limit), not %d", c.layout.replicas)
	case c.layout.maxWait < time.Minute:
		return usagef("--max-wait must be at least 1m (the publishes' retries take up to 30s), not %v", c.layout.maxWait)
	case c.fault != "" && !slices.Contains(faultNames, c.fault):
		return usagef("--fault must be one of %s, not %q", strings.Join(faultNames, ", "), c.fault)
	case strings.HasPrefix(c.fault, "nats-") && c.natsNodes == 0:
		return usagef("--fault %s kills a NATS server: it needs --nats-cluster 3", c.fault)
	case c.grpcListen != "" && (c.role != "load" || c.downstream != downstreamGRPC):
		return usagef("--grpc-listen is where the load role serves the downstream service over gRPC: give it with --role load --downstream=grpc")
	case c.grpcListen != "" && !validListen(c.grpcListen):
		return usagef("--grpc-listen must be host:port (such as 0.0.0.0:9091), not %q", c.grpcListen)
	case c.role == "router" && c.platformURL == "":
		return usagef("--role router needs --platform-url, the chat platforms' base URL (such as --platform-url http://load-1:9090/platforms)")
	case c.role == "router" && !httpURL(c.platformURL):
		return usagef("--platform-url must be an absolute http:// or https:// URL (such as http://load-1:9090/platforms), not %q", c.platformURL)
	case c.role == "worker" && c.downstreamURL == "":
		return usagef("--role worker needs --downstream-url, the downstream service's URL (such as --downstream-url http://load-1:9090/downstream, or grpc://load-1:9091)")
	case c.role == "load" && c.ingressURL == "":
		return usagef("--role load needs --ingress-url, the gateway's URL (such as --ingress-url http://gw-1:8080)")
	case c.role == "load" && !httpURL(c.ingressURL):
		return usagef("--ingress-url must be an absolute http:// or https:// URL (such as http://gw-1:8080), not %q", c.ingressURL)
	}
	if c.role == "worker" {
		if _, err := parseDownstreamURL(c.downstreamURL); err != nil {
			return usagef("--downstream-url: %v (such as http://load-1:9090/downstream, or grpc://load-1:9091)", err)
		}
	}
	return nil
}

// previousKey reads the previous signing key, which a key rotation keeps
// verifying (see the README, "Rotating the signing key"): its id from
// --previous-signing-key-id, its secret from
// SESSIONWIRE_PREVIOUS_SIGNING_KEY. Both or neither: one without the other
// is a usage error, and so is a key the current one would not be allowed
// to be (a secret shorter than 32 bytes, an id with other characters than
// letters, digits, "-" and "_") or one with the current key's id.
// Checked for the roles that sign or verify.
func (c *config) previousKey() error {
	id, secret := c.previousKeyID, os.Getenv("SESSIONWIRE_PREVIOUS_SIGNING_KEY")
	switch {
	case id == "" && secret == "", c.role == "tool" || c.role == "nats-node":
		// The tool (a worker's child, in the worker's environment) and a
		// NATS node use no key.
		return nil
	case secret == "":
		return usagef("--previous-signing-key-id %s names the key the roles signed with before a key rotation, "+
			"but its secret is not set: set SESSIONWIRE_PREVIOUS_SIGNING_KEY to that key's secret (what "+
			"SESSIONWIRE_SIGNING_KEY was until now), or drop --previous-signing-key-id once the rotation is over", id)
	case id == "":
		return usagef("SESSIONWIRE_PREVIOUS_SIGNING_KEY is set, but not --previous-signing-key-id: during a key rotation, " +
			"give the id the roles signed with until now (what --signing-key-id was, such as --previous-signing-key-id 2026-11), " +
			"or unset SESSIONWIRE_PREVIOUS_SIGNING_KEY once the rotation is over")
	case id == c.key.ID:
		return usagef("--previous-signing-key-id %s is the id of the current key too (--signing-key-id): a rotated key "+
			"needs an id of its own, which is how a signature names the key it was made with (such as "+
			"--signing-key-id 2026-12 --previous-signing-key-id 2026-11)", id)
	}
	prev := sessionprop.Key{ID: id, Secret: []byte(secret)}
	if _, err := sessionprop.NewVerifier([]sessionprop.Key{prev}); err != nil {
		return usagef("the previous signing key (SESSIONWIRE_PREVIOUS_SIGNING_KEY, --previous-signing-key-id %s) is not a key: %v "+
			"(a secret is at least %d random bytes, such as $(openssl rand -base64 32); an id is letters, digits, \"-\" and \"_\")",
			id, err, sessionprop.MinSecretBytes)
	}
	c.previous = []sessionprop.Key{prev}
	return nil
}

// httpURL reports whether s is an absolute http:// or https:// URL.
func httpURL(s string) bool {
	u, err := url.Parse(s)
	return err == nil && (u.Scheme == "http" || u.Scheme == "https") && u.Host != ""
}

// validListen reports whether addr is an address to listen on: host:port,
// the host possibly empty, the port a number of 16 bits (0: any free one).
func validListen(addr string) bool {
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	_, err = strconv.ParseUint(port, 10, 16)
	return err == nil
}
