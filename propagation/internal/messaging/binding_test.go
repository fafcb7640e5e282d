package messaging

import (
	"strings"
	"testing"
)

// Binding's string reads back one way only: no two destinations (parts and
// id) of one transport, nor two transports, bind the same string, whatever
// bytes the parts hold.
func TestBindingIsUnambiguous(t *testing.T) {
	if got, want := Binding("amqp", "m-1", "chat", "in"), "amqp\x004:chat\x002:in\x00m-1"; got != want {
		t.Errorf("Binding = %q, want %q", got, want)
	}
	if got, want := Binding("nats", "", strings.Repeat("s", 123)), "nats\x00123:"+strings.Repeat("s", 123)+"\x00"; got != want {
		t.Errorf("Binding = %q, want %q", got, want)
	}
	type dest struct {
		transport, id string
		parts         []string
	}
	seen := map[string]dest{}
	for _, d := range []dest{
		{"amqp", "c", []string{"a", "b"}},
		{"amqp", "", []string{"a\x00b", "c"}},
		{"amqp", "", []string{"a", "b\x00c"}},
		{"amqp", "b\x00c", []string{"a", ""}},
		{"amqp", "c", []string{"a\x00b", ""}},
		{"amqp", "", []string{"a\x00b\x00c", ""}},
		{"amqp", "", []string{"", "a\x00b\x00c"}},
		{"amqp", "a\x00b\x00c", []string{"", ""}},
		{"amqp", "", []string{"1:a", "b"}},
		{"amqp", "", []string{"a", "1:b"}},
		{"amqp", "", []string{"", ""}},
		{"nats", "c", []string{"a\x00b"}},
		{"nats", "b\x00c", []string{"a"}},
		{"nats", "", []string{"a\x00b\x00c"}},
		{"nats", "1:a\x00b", []string{""}},
		{"nats", "", []string{""}},
		{"nats", "", []string{"amqp"}},
		{"kafka", "", []string{"a"}},
		{"", "", nil},
	} {
		b := Binding(d.transport, d.id, d.parts...)
		if b == "" {
			t.Errorf("%+v binds \"\", what HTTP binds", d)
		}
		if other, ok := seen[b]; ok {
			t.Errorf("%+v and %+v both bind %q", d, other, b)
		}
		seen[b] = d
	}
	key := strings.Repeat("k", 200)
	if n := testing.AllocsPerRun(100, func() { _ = Binding("amqp", "m-1", "chat", key) }); n != 1 {
		t.Errorf("Binding allocates %v times, want 1", n)
	}
}
