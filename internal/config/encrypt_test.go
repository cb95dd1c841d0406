package config

import (
	"bytes"
	"encoding/base64"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestPayloadKeys: serve reads the payload keys from a file or the
// environment, builds the policy of encrypt-queues, and says clearly
// what is wrong with a bad key list, naming the line.
func TestPayloadKeys(t *testing.T) {
	k := func(b byte) string { return base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{b}, 32)) }
	dir := t.TempDir()
	n := 0
	file := func(body string) string {
		n++
		p := filepath.Join(dir, fmt.Sprint("keys", n))
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	c, err := loadConfig(t, nil, "--payload-keys-file", file("# keys\nk2:"+k(2)+"\nk1:"+k(1)+"\n"), "--encrypt-queues", "pay,bill")
	if err != nil {
		t.Fatal(err)
	}
	if c.Payloads == nil || c.Payloads.Current() != "k2" || !c.Payloads.Seals("pay") || c.Payloads.Seals("other") {
		t.Fatalf("policy %+v", c.Payloads)
	}
	c, err = loadConfig(t, map[string]string{"REDRIVE_PAYLOAD_KEYS": "a:" + k(3), "REDRIVE_ENCRYPT_QUEUES": "*"})
	if err != nil || !c.Payloads.Seals("anything") || c.Payloads.Current() != "a" {
		t.Fatalf("env: %+v %v", c, err)
	}
	if c, err := loadConfig(t, nil); err != nil || c.Payloads != nil {
		t.Fatalf("no keys: %+v %v", c.Payloads, err)
	}
	for _, bad := range []struct {
		args []string
		env  map[string]string
		want string
	}{
		{[]string{"--payload-keys-file", file("k1:" + base64.StdEncoding.EncodeToString(make([]byte, 24)))}, nil, "line 1: key \"k1\": key is 24 bytes, not 32"},
		{[]string{"--payload-keys-file", file("k1:%%%")}, nil, "line 1: key \"k1\": bad base64"},
		{[]string{"--payload-keys-file", file("k1:" + k(1) + "\n\nk1:" + k(2))}, nil, `line 3: duplicate key id "k1"`},
		{[]string{"--payload-keys-file", file("# nothing\n")}, nil, "no current key"},
		{[]string{"--payload-keys-file", filepath.Join(dir, "absent")}, nil, "no such file"},
		{[]string{"--encrypt-queues", "pay"}, nil, "encrypt-queues needs payload keys"},
		{[]string{"--encrypt-queues", "a/b"}, map[string]string{"REDRIVE_PAYLOAD_KEYS": "a:" + k(3)}, "encrypt-queues"},
		{[]string{"--payload-keys-file", file("k1:" + k(1))}, map[string]string{"REDRIVE_PAYLOAD_KEYS": "a:" + k(3)}, "not both"},
	} {
		_, err := loadConfig(t, bad.env, bad.args...)
		if err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("%v %v: %v, want %q", bad.args, bad.env, err, bad.want)
		}
		if err != nil && strings.Contains(err.Error(), k(1)) {
			t.Errorf("the error shows a key: %v", err)
		}
	}
}

// TestEncryptBodies: amqp-encrypt-bodies and kafka-encrypt-bodies name
// managed queues and kept topics (or "*"), from flags or the
// environment, and are refused at start without payload keys or naming
// one serve does not manage.
func TestEncryptBodies(t *testing.T) {
	key := "REDRIVE_PAYLOAD_KEYS"
	keys := "k1:" + base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{1}, 32))
	brokers := []string{"--amqp-url", "amqp://localhost", "--amqp-queues", "orders,scans", "--kafka-brokers", "localhost:9092",
		"--kafka-topics", "clicks,views"}
	c, err := loadConfig(t, map[string]string{key: keys}, append(brokers, "--amqp-encrypt-bodies", "orders",
		"--kafka-encrypt-bodies", "*")...)
	if err != nil {
		t.Fatal(err)
	}
	if !c.AMQPBodies.Seals("orders") || c.AMQPBodies.Seals("scans") || !c.KafkaBodies.Seals("views") ||
		c.AMQPBodies.Keys.Current() != "k1" {
		t.Fatalf("bodies: %+v %+v", c.AMQPBodies, c.KafkaBodies)
	}
	c, err = loadConfig(t, map[string]string{key: keys, "REDRIVE_KAFKA_ENCRYPT_BODIES": "clicks"}, brokers...)
	if err != nil || c.AMQPBodies == nil || c.AMQPBodies.Seals("orders") || c.AMQPBodies.Keys == nil ||
		!c.KafkaBodies.Seals("clicks") || c.KafkaBodies.Seals("views") {
		t.Fatalf("env: %+v %+v %v", c.AMQPBodies, c.KafkaBodies, err)
	}
	if c, err := loadConfig(t, nil, brokers...); err != nil || c.AMQPBodies != nil || c.KafkaBodies != nil {
		t.Fatalf("no keys: %+v %+v %v", c.AMQPBodies, c.KafkaBodies, err)
	}
	for _, bad := range []struct {
		env  map[string]string
		args []string
		want string
	}{
		{nil, []string{"--amqp-encrypt-bodies", "orders"}, "amqp-encrypt-bodies needs payload keys"},
		{nil, []string{"--kafka-encrypt-bodies", "*"}, "kafka-encrypt-bodies needs payload keys"},
		{map[string]string{key: keys}, []string{"--amqp-encrypt-bodies", "payments"}, `amqp-encrypt-bodies: "payments" is not among amqp-queues`},
		{map[string]string{key: keys}, []string{"--kafka-encrypt-bodies", "orders"}, `kafka-encrypt-bodies: "orders" is not among kafka-topics`},
		{map[string]string{key: keys}, []string{"--amqp-encrypt-bodies", "orders,*"}, `"*" stands alone`},
	} {
		_, err := loadConfig(t, bad.env, append(append([]string{}, brokers...), bad.args...)...)
		if err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("%v: %v, want %q", bad.args, err, bad.want)
		}
	}
}
