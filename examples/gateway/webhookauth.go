package main

import (
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"
)

// webhookAuth is how the ingress knows a post comes from the platform it
// names: without it, anyone who can reach the ingress can post as any chat,
// and the gateway would sign that session and answer there. Each secret is
// the platform's own mechanism; an empty one checks nothing (the demo).
type webhookAuth struct {
	// telegramToken is the secret_token given to Telegram's setWebhook:
	// Telegram sends it in X-Telegram-Bot-Api-Secret-Token.
	telegramToken string
	// slackSecret is the Slack app's signing secret: Slack signs
	// "v0:<X-Slack-Request-Timestamp>:<body>" with it (HMAC-SHA256) in
	// X-Slack-Signature.
	slackSecret string
	// bearer is what a relay posting Discord messages (Discord delivers them
	// over its gateway's WebSocket, not to a webhook) or an API client sends
	// in Authorization: Bearer.
	bearer string
	now    func() time.Time
}

// Where the secrets come from, for every role that posts or takes posts.
const (
	envTelegramToken = "SESSIONWIRE_TELEGRAM_SECRET_TOKEN"
	envSlackSecret   = "SESSIONWIRE_SLACK_SIGNING_SECRET"
	envIngressToken  = "SESSIONWIRE_INGRESS_TOKEN"
)

func webhookAuthFromEnv() webhookAuth {
	return webhookAuth{telegramToken: os.Getenv(envTelegramToken), slackSecret: os.Getenv(envSlackSecret),
		bearer: os.Getenv(envIngressToken)}
}

// missing names the platforms whose posts are not checked.
func (a webhookAuth) missing() []string {
	var m []string
	if a.telegramToken == "" {
		m = append(m, "telegram ("+envTelegramToken+")")
	}
	if a.slackSecret == "" {
		m = append(m, "slack ("+envSlackSecret+")")
	}
	if a.bearer == "" {
		m = append(m, "discord and api ("+envIngressToken+")")
	}
	return m
}

// slackMaxAge is how old a Slack request may be, as Slack's own
// verification advises: a captured one cannot be replayed later.
const slackMaxAge = 5 * time.Minute

// errUnauthenticated: a post that does not prove it comes from its platform.
var errUnauthenticated = errors.New("not from the platform")

// check reports whether the post of body to platform carries its
// platform's proof. A platform with no secret set is not checked.
func (a webhookAuth) check(platform string, h http.Header, body []byte) error {
	switch platform {
	case "telegram":
		if a.telegramToken != "" && !equal(h.Get("X-Telegram-Bot-Api-Secret-Token"), a.telegramToken) {
			return fmt.Errorf("%w: X-Telegram-Bot-Api-Secret-Token missing or wrong", errUnauthenticated)
		}
	case "slack":
		if a.slackSecret == "" {
			return nil
		}
		ts := h.Get("X-Slack-Request-Timestamp")
		secs, err := strconv.ParseInt(ts, 10, 64)
		if err != nil {
			return fmt.Errorf("%w: X-Slack-Request-Timestamp missing or not a number", errUnauthenticated)
		}
		if age := a.clock().Sub(time.Unix(secs, 0)); age > slackMaxAge || age < -slackMaxAge {
			return fmt.Errorf("%w: X-Slack-Request-Timestamp is %v away from now (at most %v)", errUnauthenticated, age.Round(time.Second), slackMaxAge)
		}
		if !equal(h.Get("X-Slack-Signature"), slackSignature(a.slackSecret, ts, body)) {
			return fmt.Errorf("%w: X-Slack-Signature missing or wrong", errUnauthenticated)
		}
	case "discord", "api":
		token, ok := strings.CutPrefix(h.Get("Authorization"), "Bearer ")
		if a.bearer != "" && (!ok || !equal(token, a.bearer)) {
			return fmt.Errorf("%w: Authorization: Bearer missing or wrong", errUnauthenticated)
		}
	}
	return nil
}

// sign adds to a post what check asks of it: what the platform (or the
// relay) sends, for the load driver.
func (a webhookAuth) sign(platform string, h http.Header, body []byte) {
	switch platform {
	case "telegram":
		if a.telegramToken != "" {
			h.Set("X-Telegram-Bot-Api-Secret-Token", a.telegramToken)
		}
	case "slack":
		if a.slackSecret != "" {
			ts := strconv.FormatInt(a.clock().Unix(), 10)
			h.Set("X-Slack-Request-Timestamp", ts)
			h.Set("X-Slack-Signature", slackSignature(a.slackSecret, ts, body))
		}
	case "discord", "api":
		if a.bearer != "" {
			h.Set("Authorization", "Bearer "+a.bearer)
		}
	}
}

func (a webhookAuth) clock() time.Time {
	if a.now != nil {
		return a.now()
	}
	return time.Now()
}

// slackSignature is Slack's request signature: "v0=" and the hex of
// HMAC-SHA256(secret, "v0:" + timestamp + ":" + body).
func slackSignature(secret, ts string, body []byte) string {
	m := hmac.New(sha256.New, []byte(secret))
	m.Write([]byte("v0:" + ts + ":"))
	m.Write(body)
	return "v0=" + hex.EncodeToString(m.Sum(nil))
}

// equal compares in constant time: how long a wrong guess takes says
// nothing of the secret.
func equal(got, want string) bool {
	return subtle.ConstantTimeCompare([]byte(got), []byte(want)) == 1
}
