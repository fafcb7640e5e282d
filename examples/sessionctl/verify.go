package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"os"
	"strings"
	"time"

	"go.opentelemetry.io/otel/baggage"
	otelprop "go.opentelemetry.io/otel/propagation"

	"github.com/sessionwire/sessionwire/otelsession"
	"github.com/sessionwire/sessionwire/propagation"
	"github.com/sessionwire/sessionwire/propagation/amqpsession"
	"github.com/sessionwire/sessionwire/propagation/kafkasession"
	"github.com/sessionwire/sessionwire/propagation/natssession"
)

const verifyUsage = `usage: sessionctl [--json] verify (--key-file FILE | --key-env VARIABLE) [--key-id ID]
                          [--nats-subject S | --kafka-topic T | --amqp-exchange E --amqp-routing-key K]
                          [--message-id ID] [--max-age DURATION] (LINE [LINE...] | -)

Checks the signature (session.sig) of the session in one or more baggage
header lines with a key, as a service that trusts no peer would, and shows the
signature's key id, when it was issued and how old it is, what it covers, and
why it fails. Exit status 0 only when the session would be accepted on its
signature alone.

The key's secret is read from a file (its whole content, one trailing newline
removed) or from an environment variable, never from the command line, where
other users of the machine could read it in the process list.

A signature on a queue's message is bound to where it was published and to
its id, when it has one: give the subject (topic, or exchange and routing
key) and --message-id as the message carried them. Without them the
signature is checked as over HTTP, bound to nothing.

  sessionctl verify --key-env SESSIONWIRE_SIGNING_KEY "$BAGGAGE_HEADER"
  sessionctl verify --key-file /run/secrets/session-key --key-id 2026-12 \
      --nats-subject gw.jobs.telegram --message-id job-7f3a "$NATS_BAGGAGE_HEADER"`

// verifyOpts are verify's flags.
type verifyOpts struct {
	keyFile, keyEnv, keyID, messageID          *string
	natsSubject, kafkaTopic, exchange, routing *string
	maxAge                                     *time.Duration
}

func verifyFlags(fs *flag.FlagSet) verifyOpts {
	return verifyOpts{
		keyFile:     fs.String("key-file", "", "read the key's secret from `FILE`, e.g. --key-file /run/secrets/session-key"),
		keyEnv:      fs.String("key-env", "", "read the key's secret from the environment `VARIABLE`, e.g. --key-env SESSIONWIRE_SIGNING_KEY"),
		keyID:       fs.String("key-id", "", "the key's `ID`, e.g. --key-id 2026-12 (default: the id the signature names, so only the secret is checked)"),
		messageID:   fs.String("message-id", "", "the message's `ID` (NATS: its Nats-Msg-Id; Kafka: its message-id header; AMQP: its MessageId), with its destination, e.g. --message-id job-7f3a"),
		natsSubject: fs.String("nats-subject", "", "the NATS `SUBJECT` the message was published to, e.g. --nats-subject gw.jobs.telegram"),
		kafkaTopic:  fs.String("kafka-topic", "", "the Kafka `TOPIC` the record was produced to, e.g. --kafka-topic chat.in"),
		exchange:    fs.String("amqp-exchange", "", "the AMQP `EXCHANGE` the message was published to (\"\" for the default one), e.g. --amqp-exchange chat"),
		routing:     fs.String("amqp-routing-key", "", "the AMQP routing `KEY` it was published with, e.g. --amqp-routing-key in"),
		maxAge:      fs.Duration("max-age", propagation.DefaultMaxAge, "how old a signature may be, e.g. --max-age 10m"),
	}
}

// binding is what the signature must be bound to, as the transport's
// consumer binds it, and a description of it for people; "" for a
// signature bound to nothing (HTTP, a child process's environment).
func (o verifyOpts) binding(fs *flag.FlagSet) (bound, where string, err error) {
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	amqp := set["amqp-exchange"] || set["amqp-routing-key"]
	n := 0
	for _, b := range []bool{set["nats-subject"], set["kafka-topic"], amqp} {
		if b {
			n++
		}
	}
	id := *o.messageID
	switch {
	case n > 1:
		return "", "", errors.New("give one destination: --nats-subject, --kafka-topic, or --amqp-exchange with --amqp-routing-key")
	case set["nats-subject"]:
		return natssession.Binding(*o.natsSubject, id), fmt.Sprintf("NATS subject %q, Nats-Msg-Id %q", *o.natsSubject, id), nil
	case set["kafka-topic"]:
		return kafkasession.Binding(*o.kafkaTopic, id), fmt.Sprintf("Kafka topic %q, message-id %q", *o.kafkaTopic, id), nil
	case amqp:
		return amqpsession.Binding(*o.exchange, *o.routing, id),
			fmt.Sprintf("AMQP exchange %q, routing key %q, MessageId %q", *o.exchange, *o.routing, id), nil
	case id != "":
		return "", "", errors.New("--message-id alone binds nothing: a queue's signature is bound to where the message " +
			"was published too; give --nats-subject, --kafka-topic, or --amqp-exchange with --amqp-routing-key beside it")
	}
	return "", "", nil
}

func init() {
	register("verify", command{
		summary: "check a session's signature with a key: key id, age, what it covers, why it fails",
		usage:   verifyUsage,
		flags:   func(fs *flag.FlagSet) { verifyFlags(fs) },
		run:     runVerify,
	})
}

// verifyReport is what verify prints.
type verifyReport struct {
	Signature  string    `json:"signature,omitempty"`   // the session.sig value as received
	KeyID      string    `json:"key_id,omitempty"`      // the key the signature names
	VerifyKey  string    `json:"verify_key_id"`         // the key it was checked with
	IssuedAt   time.Time `json:"issued_at,omitzero"`    // as the signature says
	AgeSeconds float64   `json:"age_seconds,omitempty"` // negative: issued in the future
	MaxAge     string    `json:"max_age"`
	MessageID  string    `json:"message_id,omitempty"`
	BoundTo    string    `json:"bound_to,omitempty"` // the destination and id the signature must be bound to
	// Covers lists what the MAC is computed over: every remote session key,
	// present, Cleared or absent (an absent one is covered as absent).
	Covers   []coveredKey `json:"covers"`
	Verified bool         `json:"verified"`
	Reason   string       `json:"reason,omitempty"` // why not
	Problems []string     `json:"problems,omitempty"`
	Notes    []string     `json:"notes,omitempty"` // how the input was read
}

type coveredKey struct {
	Key   string `json:"key"`
	State string `json:"state"` // set, cleared, absent
	Value string `json:"value,omitempty"`
}

func runVerify(e env) int {
	fs := flag.NewFlagSet("verify", flag.ContinueOnError)
	fs.SetOutput(e.stderr)
	fs.Usage = func() {}
	o := verifyFlags(fs)
	keyFile, keyEnv, keyID, maxAge := o.keyFile, o.keyEnv, o.keyID, o.maxAge
	if err := fs.Parse(e.args); err != nil {
		return e.usageError("verify", "%v", err)
	}
	bound, where, err := o.binding(fs)
	if err != nil {
		return e.usageError("verify", "%v", err)
	}
	switch {
	case len(fs.Args()) == 0:
		return e.usageError("verify", "give at least one baggage header line, or - to read them from standard input")
	case (*keyFile == "") == (*keyEnv == ""):
		return e.usageError("verify", "give the key with exactly one of --key-file or --key-env")
	case *maxAge <= 0:
		return e.usageError("verify", "--max-age must be positive, not %v", *maxAge)
	}
	var secret []byte
	if *keyFile != "" {
		b, err := os.ReadFile(*keyFile)
		if err != nil {
			fmt.Fprintf(e.stderr, "sessionctl verify: read the key: %v\n", err)
			return exitUsage
		}
		secret = []byte(strings.TrimSuffix(strings.TrimSuffix(string(b), "\n"), "\r"))
	} else {
		v, ok := e.lookupEnv(*keyEnv)
		if !ok || v == "" {
			fmt.Fprintf(e.stderr, "sessionctl verify: the environment variable %s is not set or empty\n", *keyEnv)
			return exitUsage
		}
		secret = []byte(v)
	}

	lines, code, ok := e.inputLines("verify", fs.Args())
	if !ok {
		return code
	}
	r := verifyReport{MaxAge: maxAge.String(), MessageID: *o.messageID, BoundTo: where}
	lines, r.Notes = headerValues(lines)
	var members []baggage.Member
	h := http.Header{}
	for i, line := range lines {
		h.Add("baggage", line)
		b, err := baggage.Parse(line)
		if err != nil && b.Len() == 0 {
			r.Problems = append(r.Problems, fmt.Sprintf("line %d is not baggage: %v", i+1, err))
		}
		members = append(members, b.Members()...)
	}
	raw, _ := baggage.New(members...)
	sig := raw.Member(otelsession.SignatureKey).Value()
	r.Signature = sig
	if kid, issued, err := propagation.SignatureHeader(sig); err == nil {
		r.KeyID, r.IssuedAt = kid, issued
		r.AgeSeconds = time.Since(r.IssuedAt).Truncate(time.Second).Seconds()
	}
	r.VerifyKey = *keyID
	if r.VerifyKey == "" {
		r.VerifyKey = r.KeyID
	}
	for _, s := range otelsession.Specs() {
		if !s.Signed {
			continue
		}
		m := raw.Member(s.Key)
		c := coveredKey{Key: s.Key, State: "absent"}
		switch {
		case m.Key() == "":
		case m.Value() == otelsession.ClearedValue:
			c.State = "cleared"
		default:
			c.State, c.Value = "set", m.Value()
		}
		r.Covers = append(r.Covers, c)
	}

	key := propagation.Key{ID: r.VerifyKey, Secret: secret}
	if key.ID == "" {
		key.ID = "unnamed" // no signature to take an id from: the check below says so
	}
	verifier, err := propagation.NewVerifier([]propagation.Key{key}, propagation.WithMaxAge(*maxAge))
	if err != nil {
		fmt.Fprintf(e.stderr, "sessionctl verify: the key cannot verify anything: %v\n", err)
		return exitUsage
	}
	// The whole inbound check of a service that trusts no peer: the
	// signature, and the values it covers.
	policy := propagation.NewInbound(propagation.TrustNone, propagation.WithVerifier(verifier))
	got, err := policy.Extract(context.Background(), otelprop.Baggage{}, otelprop.HeaderCarrier(h),
		propagation.Peer{Transport: "sessionctl", MessageID: bound})
	switch {
	case err != nil:
		r.Reason = explainSignature(err, r)
		for _, e := range unjoin(err) {
			r.Problems = append(r.Problems, e.Error())
		}
	case sig == "":
		r.Reason = "the session is not signed (no session.sig member): a service that trusts no peer strips an unsigned session"
	case !propagation.HasSession(baggage.FromContext(got)):
		r.Reason = "the signature was not accepted: the receiver would see no session"
	default:
		r.Verified = true
	}
	if r.Verified && len(r.Problems) > 0 {
		r.Verified, r.Reason = false, "part of the input is not baggage"
	}

	if e.asJSON {
		if err := writeJSON(e.stdout, r); err != nil {
			fmt.Fprintln(e.stderr, "sessionctl: write JSON:", err)
			return exitUsage
		}
	} else {
		printVerify(e, r)
	}
	if !r.Verified {
		return exitNo
	}
	return exitYes
}

// explainSignature turns the policy's error into a sentence for someone who
// has never read the signature format.
func explainSignature(err error, r verifyReport) string {
	switch {
	case errors.Is(err, propagation.ErrUnknownKey):
		return fmt.Sprintf("the signature names key %q, and the key given is %q: sign and verify with the same key id, or pass --key-id", r.KeyID, r.VerifyKey)
	case errors.Is(err, propagation.ErrSignatureExpired):
		if r.AgeSeconds < 0 {
			return fmt.Sprintf("the signature was issued %v in the future: the signer's clock is ahead", time.Duration(-r.AgeSeconds)*time.Second)
		}
		return fmt.Sprintf("the signature is %v old, older than --max-age %s: a captured session cannot be replayed after that", time.Duration(r.AgeSeconds)*time.Second, r.MaxAge)
	case errors.Is(err, propagation.ErrBadSignature) && strings.Contains(err.Error(), "malformed"):
		return "the session.sig value is not a signature of the form v1.<key id>.<unix seconds>.<MAC>"
	case errors.Is(err, propagation.ErrBadSignature):
		why := "the MAC does not match: the secret differs, or a covered member was changed, added or removed"
		if r.BoundTo == "" {
			why += ", or the signature is bound to a queue's message (give where it was published and its id: " +
				"--nats-subject, --kafka-topic or --amqp-exchange with --amqp-routing-key, and --message-id)"
		} else {
			why += ", or the signature belongs to another message than the one on " + r.BoundTo
		}
		return why
	}
	return "the session itself is refused before its signature matters (see the problems)"
}

func printVerify(e env, r verifyReport) {
	w := e.stdout
	if r.Signature == "" {
		fmt.Fprintln(w, "signature      (none)")
	} else {
		fmt.Fprintf(w, "signature      %s\n", r.Signature)
	}
	if r.KeyID != "" {
		fmt.Fprintf(w, "key id         %s (checked with key %q)\n", r.KeyID, r.VerifyKey)
		age := time.Duration(r.AgeSeconds) * time.Second
		when := fmt.Sprintf("%v ago", age)
		if age < 0 {
			when = fmt.Sprintf("%v in the future", -age)
		}
		fmt.Fprintf(w, "issued         %s (%s; the limit is %s)\n", r.IssuedAt.Format(time.RFC3339), when, r.MaxAge)
	}
	if r.BoundTo != "" {
		fmt.Fprintf(w, "bound to       %s (the signature must be bound to it)\n", r.BoundTo)
	} else {
		fmt.Fprintln(w, "bound to       (nothing: checked as a signature not bound to a message, as over HTTP)")
	}
	var set, cleared, absent []string
	for _, c := range r.Covers {
		switch c.State {
		case "set":
			set = append(set, c.Key)
		case "cleared":
			cleared = append(cleared, c.Key)
		default:
			absent = append(absent, c.Key)
		}
	}
	fmt.Fprintf(w, "covers         the key id, the issue time, what it is bound to and every session key as it travels:\n")
	fmt.Fprintf(w, "                 set (%d): %s\n", len(set), orNone(set))
	fmt.Fprintf(w, "                 cleared (%d): %s\n", len(cleared), orNone(cleared))
	fmt.Fprintf(w, "                 absent (%d, covered as absent: adding one breaks the signature)\n", len(absent))
	fmt.Fprintln(w, "               other baggage members are not covered and may change freely")
	if r.Verified {
		fmt.Fprintln(w, "\nverified: a service that trusts no peer would accept this session")
	} else {
		fmt.Fprintf(w, "\nnot verified: %s\n", r.Reason)
		for _, p := range r.Problems {
			fmt.Fprintf(w, "  - %s\n", p)
		}
	}
	printSection(w, "notes", r.Notes)
}

func orNone(s []string) string {
	if len(s) == 0 {
		return "none"
	}
	return strings.Join(s, ", ")
}
