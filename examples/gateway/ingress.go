package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/trace"

	"github.com/sessionwire/sessionwire/otelsession"
	"github.com/sessionwire/sessionwire/propagation/natssession"
)

// Each platform posts its own shape; the ingress turns it into a session.
type (
	telegramUpdate struct {
		MessageID int64 `json:"message_id"`
		Chat      struct {
			ID   int64  `json:"id"`
			Type string `json:"type"` // private, group, supergroup or channel
		} `json:"chat"`
		MessageThreadID int64 `json:"message_thread_id,omitempty"` // a forum topic
		From            struct {
			ID        int64  `json:"id"`
			FirstName string `json:"first_name"`
		} `json:"from"`
		Text       string `json:"text"`
		Background bool   `json:"background,omitempty"`
	}
	discordMessage struct {
		ID        string `json:"id"`
		GuildID   string `json:"guild_id,omitempty"`  // the scope; a direct message has none
		ChannelID string `json:"channel_id"`          // a thread is a channel…
		ParentID  string `json:"parent_id,omitempty"` // …under a parent channel
		Author    struct {
			ID       string `json:"id"`
			Username string `json:"username"`
		} `json:"author"`
		Content    string `json:"content"`
		Background bool   `json:"background,omitempty"`
	}
	slackEvent struct {
		Team        string `json:"team"` // the workspace: the scope
		Channel     string `json:"channel"`
		ChannelType string `json:"channel_type,omitempty"` // channel, group (private), im or mpim
		ThreadTS    string `json:"thread_ts,omitempty"`
		TS          string `json:"ts"` // the message: the reply anchor
		User        string `json:"user"`
		Text        string `json:"text"`
		Background  bool   `json:"background,omitempty"`
	}
	// An API-server request: a finite, stateless channel. It cannot receive
	// a completion after its request ends.
	apiRequest struct {
		RequestID  string `json:"request_id"`
		User       string `json:"user"`
		Input      string `json:"input"`
		Background bool   `json:"background,omitempty"`
	}
)

// What the platforms post to a webhook. Telegram posts an Update, holding
// the message (or something else: an edit, a button press); Slack's Events
// API posts an event_callback envelope holding the event, and, once, a
// url_verification challenge when the endpoint is configured. The ingress
// takes these, and the bare message too (as the load driver posts it).
type (
	telegramWebhook struct {
		UpdateID      *int64          `json:"update_id"`
		Message       *telegramUpdate `json:"message"`
		ChannelPost   *telegramUpdate `json:"channel_post"`
		EditedMessage json.RawMessage `json:"edited_message"`
		telegramUpdate
	}
	slackWebhook struct {
		Type      string `json:"type"` // url_verification, event_callback; "" for a bare event
		Challenge string `json:"challenge"`
		TeamID    string `json:"team_id"`
		Event     *struct {
			Type    string `json:"type"`
			Subtype string `json:"subtype"`
			BotID   string `json:"bot_id"`
			slackEvent
		} `json:"event"`
		slackEvent
	}
)

// ignored is a webhook delivery the gateway answers 200 and does nothing
// with: a platform retries anything else, and this would never succeed.
type ignored struct{ why string }

func (i ignored) Error() string { return "ignored: " + i.why }

// challenge is Slack's url_verification: the ingress answers it with the
// challenge, which proves to Slack that the endpoint is the app's.
type challenge struct{ value string }

func (c challenge) Error() string { return "slack url_verification" }

// message is the update's message, or why there is none to answer.
func (w *telegramWebhook) message() (*telegramUpdate, error) {
	switch {
	case w.UpdateID == nil:
		return &w.telegramUpdate, nil // the bare message
	case w.Message != nil:
		return w.Message, nil
	case w.ChannelPost != nil:
		return w.ChannelPost, nil
	case w.EditedMessage != nil:
		return nil, ignored{"an edit of a message (the original was answered)"}
	}
	return nil, ignored{"an update without a message (only messages are answered)"}
}

// message is the envelope's message event, or why there is none to answer.
func (w *slackWebhook) message() (*slackEvent, error) {
	switch w.Type {
	case "":
		return &w.slackEvent, nil // the bare event
	case "url_verification":
		return nil, challenge{w.Challenge}
	case "event_callback":
	default:
		return nil, ignored{fmt.Sprintf("a %q envelope (only event_callback carries messages)", w.Type)}
	}
	e := w.Event
	switch {
	case e == nil:
		return nil, fmt.Errorf("slack event_callback without an event")
	case e.Type != "message":
		return nil, ignored{fmt.Sprintf("a %q event (only messages are answered)", e.Type)}
	case e.BotID != "" || e.Subtype == "bot_message":
		return nil, ignored{"a bot's message (answering it could loop)"}
	case e.Subtype != "" && e.Subtype != "thread_broadcast" && e.Subtype != "file_share":
		return nil, ignored{fmt.Sprintf("a %q message (only new messages are answered)", e.Subtype)}
	}
	m := e.slackEvent
	if m.Team == "" {
		m.Team = w.TeamID // the workspace, when the event itself does not name it
	}
	return &m, nil
}

// decodeOne decodes the body's one JSON value into v: anything after it is
// an error, as a body the platform did not send whole.
func decodeOne(dec *json.Decoder, v any) error {
	if err := dec.Decode(v); err != nil {
		return err
	}
	if _, err := dec.Token(); err != io.EOF {
		return errors.New("data after the JSON value")
	}
	return nil
}

// nonZero is a Telegram id as text, or "" for a missing one (0).
func nonZero(id int64) string {
	if id == 0 {
		return ""
	}
	return strconv.FormatInt(id, 10)
}

// telegramChats and slackChannels name a platform's kind of chat in the
// session's words: "dm" for a direct message (whose reply a scoped platform
// posts for its user, having no scope), "group" or "channel".
var (
	telegramChats = map[string]string{"private": "dm", "group": "group", "supergroup": "group", "channel": "channel"}
	slackChannels = map[string]string{"im": "dm", "mpim": "group", "channel": "channel", "group": "channel"} // a Slack "group" is a private channel
)

// errUnknownPlatform: the path names no platform the ingress knows.
var errUnknownPlatform = errors.New("unknown platform")

// maxMessageBytes bounds a message's body.
const maxMessageBytes = 64 << 10

// normalise decodes a platform's message into a session and a job.
func normalise(platform string, body []byte) (otelsession.Session, job, error) {
	dec := json.NewDecoder(bytes.NewReader(body))
	var s otelsession.Session
	var j job
	switch platform {
	case "telegram":
		var w telegramWebhook
		if err := decodeOne(dec, &w); err != nil {
			return s, j, fmt.Errorf("decode a telegram update: %w", err)
		}
		m, err := w.message()
		if err != nil {
			return s, j, err
		}
		// Telegram's ids are never 0: a 0 is a field the update lacked.
		s = otelsession.Session{Platform: "telegram", ChatID: nonZero(m.Chat.ID), ChatType: telegramChats[m.Chat.Type],
			UserID: nonZero(m.From.ID), UserName: m.From.FirstName, MessageID: nonZero(m.MessageID),
			ThreadID: nonZero(m.MessageThreadID)} // a forum topic, if any
		j = job{ID: s.MessageID, Text: m.Text, Background: m.Background}
	case "discord":
		var m discordMessage
		if err := decodeOne(dec, &m); err != nil {
			return s, j, fmt.Errorf("decode a discord message: %w", err)
		}
		s = otelsession.Session{Platform: "discord", ScopeID: m.GuildID, ChatID: m.ChannelID, ParentChatID: m.ParentID,
			ChatType: "channel", UserID: m.Author.ID, UserName: m.Author.Username, MessageID: m.ID}
		switch {
		case m.ParentID != "":
			s.ChatType, s.ThreadID = "thread", m.ChannelID
		case m.GuildID == "":
			// Discord sends a direct message without a guild: its reply
			// is posted for its user (the router's user binding).
			s.ChatType = "dm"
		}
		j = job{ID: m.ID, Text: m.Content, Background: m.Background}
	case "slack":
		var w slackWebhook
		if err := decodeOne(dec, &w); err != nil {
			return s, j, fmt.Errorf("decode a slack event: %w", err)
		}
		m, err := w.message()
		if err != nil {
			return s, j, err
		}
		s = otelsession.Session{Platform: "slack", ScopeID: m.Team, ChatID: m.Channel, ThreadID: m.ThreadTS,
			ChatType: slackChannels[m.ChannelType], UserID: m.User, MessageID: m.TS}
		j = job{ID: m.TS, Text: m.Text, Background: m.Background}
	case "api":
		var m apiRequest
		if err := decodeOne(dec, &m); err != nil {
			return s, j, fmt.Errorf("decode an API request: %w", err)
		}
		s = otelsession.Session{Platform: "api_server", ChatID: m.RequestID, UserID: m.User, MessageID: m.RequestID, Stateless: true}
		j = job{ID: m.RequestID, Text: m.Input, Background: m.Background}
	default:
		return s, j, fmt.Errorf("%w %q (want telegram, discord, slack or api)", errUnknownPlatform, platform)
	}
	s.SessionKey = strings.Join([]string{"agent", "main", s.Platform, s.ChatID, s.ThreadID}, ":")
	s.Source = "gateway"
	switch {
	case j.ID == "":
		return s, j, fmt.Errorf("%s message without an id", platform)
	case s.ChatID == "":
		return s, j, fmt.Errorf("%s message without a chat", platform)
	}
	j.Route = s
	if err := s.Validate(); err != nil {
		return s, j, err
	}
	j.Key = messageKey(s.Platform, s.ScopeID, s.ChatID, j.ID)
	return s, j, nil
}

// ingressDeadline bounds how long the ingress retries queueing a message
// before it answers 503 and leaves the retry to the platform.
const ingressDeadline = 8 * time.Second

// ingress is the gateway role: POST /v1/{platform}/messages binds the
// message's session and queues it.
func ingress(tracer trace.Tracer, pub *natssession.Publisher, js jetstream.JetStream, auth webhookAuth) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/{platform}/messages", func(w http.ResponseWriter, r *http.Request) {
		platform := r.PathValue("platform")
		// The platform's proof covers the body as sent (Slack signs it):
		// read it whole, check it, then decode it.
		body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxMessageBytes))
		if err != nil {
			code := http.StatusBadRequest
			if tooLarge := (*http.MaxBytesError)(nil); errors.As(err, &tooLarge) {
				code = http.StatusRequestEntityTooLarge
			}
			http.Error(w, "gateway: read the message: "+err.Error(), code)
			return
		}
		if err := auth.check(platform, r.Header, body); err != nil {
			// Nothing is queued: whoever sent it cannot show it is the platform.
			http.Error(w, "gateway: "+platform+" post refused: "+err.Error(), http.StatusUnauthorized)
			return
		}
		s, j, err := normalise(platform, body)
		var skip ignored
		var ch challenge
		switch {
		case errors.As(err, &ch):
			w.Header().Set("Content-Type", "application/json")
			_ = json.NewEncoder(w).Encode(map[string]string{"challenge": ch.value})
			return
		case errors.As(err, &skip):
			// 200, or the platform would post it again and again.
			fmt.Fprintln(w, "gateway: "+skip.Error())
			return
		}
		if err != nil {
			// Nothing is queued. A platform retries a 5xx, never a 4xx: the
			// same message would be refused again.
			code := http.StatusBadRequest
			if errors.Is(err, errUnknownPlatform) {
				code = http.StatusNotFound
			}
			http.Error(w, "gateway: "+err.Error(), code)
			return
		}
		// A request never inherits a session: Reset, then bind this one.
		ctx := otelsession.Bind(otelsession.Reset(r.Context()), s)
		ctx, span := tracer.Start(ctx, "ingress "+platform)
		defer span.End()
		encoded, err := json.Marshal(j)
		if err != nil {
			http.Error(w, "gateway: encode the job: "+err.Error(), http.StatusInternalServerError)
			return
		}
		msg := &nats.Msg{Subject: jobsSubject + platform, Data: encoded, Header: nats.Header{}}
		msg.Header.Set(jetstream.MsgIDHeader, "job-"+j.Key) // a retried post is queued once
		// Retried with the same id while a leader is elected after a node
		// loss, within the poster's patience (the load driver waits 10 s).
		if err := retry(ctx, ingressDeadline, func(ctx context.Context) error {
			_, err := pub.PublishJetStream(ctx, js, msg)
			return err
		}); err != nil {
			http.Error(w, "gateway: queue the message: "+err.Error(), http.StatusServiceUnavailable)
			return
		}
		w.WriteHeader(http.StatusAccepted)
	})
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		// Unhealthy while NATS is away: a load balancer then sends posts
		// elsewhere instead of waiting 8 s for each 503.
		if js != nil && !js.Conn().IsConnected() {
			http.Error(w, "gateway: not connected to NATS", http.StatusServiceUnavailable)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	})
	return mux
}
