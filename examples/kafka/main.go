// Command kafka shows a session crossing Kafka: conversations produce records
// with franz-go (kgo), each bound to its own session, and a consumer-group
// worker handles each record in exactly that record's session.
//
// With no flags it starts franz-go's in-process Kafka cluster (kfake) on
// 127.0.0.1; -brokers points it at a real cluster instead. It prints what the
// worker saw for every record and exits 1 if any record was handled in the
// wrong session.
//
//	go run ./examples/kafka
//	go run ./examples/kafka -brokers 127.0.0.1:9092 -topic sessionwire-demo
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.opentelemetry.io/otel"
	otelprop "go.opentelemetry.io/otel/propagation"

	"github.com/sessionwire/sessionwire/examples/internal/exampleflag"
	"github.com/sessionwire/sessionwire/otelsession"
	"github.com/sessionwire/sessionwire/propagation"
	"github.com/sessionwire/sessionwire/propagation/kafkasession"
)

func main() {
	brokers := flag.String("brokers", "", "comma-separated Kafka brokers (default: an in-process kfake cluster)")
	topic := flag.String("topic", "chat-in", "topic to produce to and consume from")
	exampleflag.Parse("kafka", `Shows a session crossing Kafka: conversations produce records with franz-go,
each bound to its own session, and a consumer-group worker handles each
record in exactly that record's session. With no -brokers it runs franz-go's
in-process cluster (kfake) on 127.0.0.1. It prints what the worker saw for
every record; exit status 1 if any record was handled in the wrong session.`,
		"kafka",
		"kafka -brokers 127.0.0.1:9092 -topic sessionwire-demo")
	if !validTopic(*topic) {
		exampleflag.Fail("kafka", "-topic %q is not a Kafka topic name (1 to 249 of a-z, A-Z, 0-9, '.', '_' and '-'; not '.' or '..')", *topic)
	}
	var seeds []string
	for b := range strings.SplitSeq(*brokers, ",") {
		if b = strings.TrimSpace(b); b != "" {
			seeds = append(seeds, b)
		}
	}
	if *brokers != "" && len(seeds) == 0 {
		exampleflag.Fail("kafka", "-brokers %q names no broker (host:port, comma-separated)", *brokers)
	}
	if err := run(seeds, *topic, 4, 3); err != nil {
		fmt.Fprintln(os.Stderr, "kafka:", err)
		os.Exit(1)
	}
}

// validTopic is Kafka's rule for a topic name.
func validTopic(t string) bool {
	if t == "" || len(t) > 249 || t == "." || t == ".." {
		return false
	}
	for _, c := range t {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

// run produces and consumes on the brokers given, or on an in-process
// cluster when seeds is empty.
func run(seeds []string, topic string, conversations, messages int) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	otel.SetTextMapPropagator(otelprop.NewCompositeTextMapPropagator(otelprop.TraceContext{}, otelprop.Baggage{}))
	if len(seeds) == 0 {
		cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(3, topic))
		if err != nil {
			return fmt.Errorf("start the in-process Kafka cluster: %w", err)
		}
		defer cluster.Close()
		seeds = cluster.ListenAddrs()
	}

	// The session may go to this topic and nowhere else; the worker trusts
	// it because only the gateway can produce to it.
	pub := kafkasession.NewPublisher(kafkasession.WithOutbound(
		propagation.NewOutbound(propagation.AllowNames(propagation.TransportKafka, topic))))
	worker := kafkasession.NewConsumer(propagation.NewInbound(propagation.TrustAll), kafkasession.WithConsumerGroup("workers"))

	producer, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.AllowAutoTopicCreation())
	if err != nil {
		return fmt.Errorf("kafka producer: %w", err)
	}
	defer producer.Close()
	// Say at once when no broker answers, rather than after every produce
	// has waited out the run's 30 s.
	pingCtx, cancelPing := context.WithTimeout(ctx, 10*time.Second)
	err = producer.Ping(pingCtx)
	cancelPing()
	if err != nil {
		return fmt.Errorf("cannot reach a Kafka broker at %s (%w); start one, or leave out -brokers for an in-process cluster",
			strings.Join(seeds, ","), err)
	}
	for m := range messages {
		for c := range conversations {
			chat := fmt.Sprintf("chat-%d", c+1)
			r := &kgo.Record{Topic: topic, Key: []byte(chat), Value: []byte(chat), Headers: []kgo.RecordHeader{
				{Key: kafkasession.MessageIDHeader, Value: fmt.Appendf(nil, "%s-m%d", chat, m+1)}}}
			session := otelsession.Session{Platform: "telegram", ChatID: chat, UserID: "user-" + chat}
			pctx, span := pub.Inject(otelsession.Bind(ctx, session), r)
			err := producer.ProduceSync(pctx, r).FirstErr()
			span.End()
			if err != nil {
				return fmt.Errorf("produce to %s at %s: %w", topic, strings.Join(seeds, ","), err)
			}
		}
	}

	consumer, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.ConsumerGroup("workers"), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		return fmt.Errorf("kafka consumer: %w", err)
	}
	defer consumer.Close()
	// The worker's own context has a session, which no record may inherit.
	base := otelsession.Bind(context.Background(), otelsession.Session{Platform: "worker", ChatID: "worker"})
	wrong := 0
	for seen := 0; seen < conversations*messages; {
		fetches := consumer.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("%d of %d records consumed: %w", seen, conversations*messages, err)
		}
		if err := fetches.Err(); err != nil {
			return fmt.Errorf("consume from %s: %w", topic, err)
		}
		fetches.EachRecord(func(r *kgo.Record) {
			seen++
			rctx, span, err := worker.Extract(base, r)
			defer span.End()
			chat, _ := otelsession.Lookup(rctx, otelsession.FieldChatID)
			ok := err == nil && chat == string(r.Value)
			if !ok {
				wrong++
			}
			id := kafkasession.NewRecordCarrier(r).Get(kafkasession.MessageIDHeader)
			fmt.Printf("partition %d offset %d %-12s session chat=%s ok=%v\n", r.Partition, r.Offset, id, chat, ok)
		})
	}
	if wrong > 0 {
		return fmt.Errorf("%d records handled in the wrong session", wrong)
	}
	fmt.Printf("%d records, every one in its own session\n", conversations*messages)
	return nil
}
