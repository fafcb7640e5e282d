package main

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"go.opentelemetry.io/otel/trace/noop"
)

// Slack's own example, from "Verifying requests from Slack".
func TestSlackSignatureIsSlacks(t *testing.T) {
	body := "token=xyzz0WbapA4vBCDEFasx0q6G&team_id=T1DC2JH3J&team_domain=testteamnow&channel_id=G8PSS9T3V&channel_name=foobar" +
		"&user_id=U2CERLKJA&user_name=roadrunner&command=%2Fwebhook-collect&text=&response_url=https%3A%2F%2Fhooks.slack.com%2Fcommands" +
		"%2FT1DC2JH3J%2F397700885554%2F96rGlfmibIGlgcZRskXaIFfN&trigger_id=398738663015.47445629121.803a0bc887a14d10d2c447fce8b6703c"
	assert.Equal(t, "v0=a2114d57b48eac39b9ad189dd8316235a7b4a8d21a10bd27519666489c69b503",
		slackSignature("8f742231b10e8888abcd99yyyzzz85a5", "1531420618", []byte(body)))
}

func TestWebhookAuth(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	a := webhookAuth{telegramToken: "tg-secret", slackSecret: "slack-secret", bearer: "relay-token", now: func() time.Time { return now }}
	body := []byte(`{"id":"1"}`)
	signed := func(platform string) http.Header {
		h := http.Header{}
		a.sign(platform, h, body)
		return h
	}
	for _, p := range []string{"telegram", "slack", "discord", "api"} {
		assert.NoError(t, a.check(p, signed(p), body), "%s: signed as the platform signs", p)
		assert.ErrorIs(t, a.check(p, http.Header{}, body), errUnauthenticated, "%s: nothing", p)
		assert.NoError(t, webhookAuth{}.check(p, http.Header{}, body), "%s: no secret set, nothing checked", p)
	}
	for name, c := range map[string]struct {
		platform string
		h        http.Header
		body     string
		says     string
	}{
		"telegram, another token": {"telegram", http.Header{"X-Telegram-Bot-Api-Secret-Token": {"tg-secreT"}}, "", "Secret-Token"},
		"slack, body changed":     {"slack", signed("slack"), `{"id":"2"}`, "X-Slack-Signature"},
		"slack, replayed later": {"slack", func() http.Header {
			h := signed("slack")
			h.Set("X-Slack-Request-Timestamp", "1799999000") // 1,000 s earlier, signed then
			h.Set("X-Slack-Signature", slackSignature("slack-secret", "1799999000", body))
			return h
		}(), "", "away from now"},
		"discord, another token": {"discord", http.Header{"Authorization": {"Bearer relay-tokeN"}}, "", "Bearer"},
		"api, not a bearer":      {"api", http.Header{"Authorization": {"relay-token"}}, "", "Bearer"},
	} {
		b := body
		if c.body != "" {
			b = []byte(c.body)
		}
		err := a.check(c.platform, c.h, b)
		assert.ErrorIs(t, err, errUnauthenticated, name)
		assert.ErrorContains(t, err, c.says, name)
	}
}

// With its secrets set, the ingress queues nothing a forger posts: a 401,
// before the body is even read as a message. Slack's challenge too is
// answered only to Slack.
func TestIngressRefusesUnprovenPosts(t *testing.T) {
	a := webhookAuth{telegramToken: "tg-secret", slackSecret: "slack-secret", bearer: "relay-token"}
	h := ingress(noop.NewTracerProvider().Tracer("test"), nil, nil, a)
	post := func(platform, body string, sign bool) *httptest.ResponseRecorder {
		req := httptest.NewRequest(http.MethodPost, "/v1/"+platform+"/messages", strings.NewReader(body))
		if sign {
			a.sign(platform, req.Header, []byte(body))
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		return rec
	}
	for _, c := range []struct{ platform, body string }{
		{"telegram", `{"update_id":1,"message":{"message_id":7,"chat":{"id":5},"text":"hi"}}`},
		{"slack", `{"type":"url_verification","challenge":"abc"}`},
		{"discord", `{"id":"1","guild_id":"G","channel_id":"C","content":"hi"}`},
		{"api", `{"request_id":"r-1","input":"hi"}`},
	} {
		rec := post(c.platform, c.body, false)
		assert.Equal(t, http.StatusUnauthorized, rec.Code, "%s: %s", c.platform, rec.Body)
		assert.Contains(t, rec.Body.String(), c.platform+" post refused: not from the platform")
	}
	// Proven, they get past the check (here to what needs no queue).
	assert.Equal(t, `{"challenge":"abc"}`+"\n", post("slack", `{"type":"url_verification","challenge":"abc"}`, true).Body.String())
	rec := post("telegram", `{"update_id":2,"edited_message":{"message_id":7}}`, true)
	assert.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
}

// The whole gateway with every platform's secret set: the load driver
// proves each post as the platform would, and everything is delivered.
func TestSecuredIngressDeliversEverything(t *testing.T) {
	c := testConfig(t, "--messages", "60", "--conversations", "12")
	c.auth = webhookAuth{telegramToken: "tg-secret", slackSecret: "slack-secret", bearer: "relay-token"}
	s := runTopology(t, c)
	assert.True(t, s.ok(), "%s", s)
	assert.Equal(t, s.Expected, s.Delivered)
	assert.Zero(t, s.NotPosted)
}
