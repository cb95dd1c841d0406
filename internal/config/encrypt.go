package config

import (
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"

	"github.com/redrivehq/redrive/internal/seal"
	"github.com/redrivehq/redrive/store"
)

// maxKeyFile bounds the size of a payload key file.
const maxKeyFile = 1 << 20

// encryptSettings are payload encryption at rest: the keys (a file, or the
// list itself, best from the environment) and the queues whose payloads
// are sealed.
var encryptSettings = []setting{
	{name: "payload-keys-file", help: `file of the payload encryption keys, one "id:base64key" a line (32-byte AES-256 keys, "# " comments); the first is the current key, the others still decrypt (see docs/security.md)`, apply: func(c *Serve, v string) error {
		c.payloadKeysFile = v
		return nil
	}},
	{name: "payload-keys", help: `the payload encryption keys themselves, as "id:base64key" comma-separated, the first current (prefer $REDRIVE_PAYLOAD_KEYS: flags show in ps)`, apply: func(c *Serve, v string) error {
		c.payloadKeys = v
		return nil
	}},
	{name: "encrypt-queues", help: `queues whose payloads are encrypted at rest, comma-separated, or "*" for every queue (needs payload keys)`, apply: func(c *Serve, v string) error {
		c.encryptQueues = v
		return nil
	}},
	{name: "amqp-encrypt-bodies", help: `managed RabbitMQ queues (of amqp-queues) whose message bodies travel sealed with the payload keys, comma-separated, or "*" for all: their dead letters are stored sealed and published back sealed; their consumers must open them (Go's amqp.ConsumerOptions.Bodies; see docs/security.md)`, apply: func(c *Serve, v string) error {
		c.amqpEncryptBodies = v
		return nil
	}},
	{name: "kafka-encrypt-bodies", help: `Kafka topics (of kafka-topics) whose record values travel sealed with the payload keys, comma-separated, or "*" for all: their dead letters are stored sealed and produced back sealed; their consumers must open them (Go's kafka.ConsumerOptions.Bodies; see docs/security.md)`, apply: func(c *Serve, v string) error {
		c.kafkaEncryptBodies = v
		return nil
	}},
}

// LoadPayloadKeys reads a key file (path) or a key list (list): exactly
// one of them may be given; neither gives nil.
func LoadPayloadKeys(path, list string) (*seal.Keyring, error) {
	switch {
	case path != "" && list != "":
		return nil, fmt.Errorf("payload keys: give payload-keys-file or payload-keys, not both")
	case path != "":
		f, err := os.Open(path)
		if err != nil {
			return nil, fmt.Errorf("payload-keys-file: %w", err)
		}
		defer f.Close()
		b := make([]byte, maxKeyFile+1)
		n, err := readFull(f, b)
		if err != nil {
			return nil, fmt.Errorf("payload-keys-file %s: %w", path, err)
		}
		if n > maxKeyFile {
			return nil, fmt.Errorf("payload-keys-file %s: larger than %d bytes", path, maxKeyFile)
		}
		k, err := seal.ParseKeys(b[:n])
		if err != nil {
			return nil, fmt.Errorf("payload-keys-file %s: %w", path, err)
		}
		return k, nil
	case list != "":
		k, err := seal.ParseKeys([]byte(list))
		if err != nil {
			return nil, fmt.Errorf("payload-keys: %w", err)
		}
		return k, nil
	}
	return nil, nil
}

func readFull(f *os.File, b []byte) (int, error) {
	n, err := io.ReadFull(f, b)
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		err = nil
	}
	return n, err
}

// ParseEncryptQueues parses encrypt-queues: "*" (all) or queue names,
// comma-separated.
func ParseEncryptQueues(v string) (all bool, queues map[string]bool, err error) {
	v = strings.TrimSpace(v)
	if v == "" {
		return false, nil, nil
	}
	if v == "*" {
		return true, nil, nil
	}
	queues = map[string]bool{}
	for _, q := range strings.Split(v, ",") {
		q = strings.TrimSpace(q)
		if q == "" {
			continue
		}
		if err := store.CheckName("queue", q); err != nil {
			return false, nil, fmt.Errorf("encrypt-queues: %w", err)
		}
		queues[q] = true
	}
	return false, queues, nil
}

// resolveEncrypt reads the payload keys and builds the policy.
func resolveEncrypt(c *Serve) error {
	keys, err := LoadPayloadKeys(c.payloadKeysFile, c.payloadKeys)
	if err != nil {
		return err
	}
	all, queues, err := ParseEncryptQueues(c.encryptQueues)
	if err != nil {
		return err
	}
	if (all || len(queues) > 0) && keys == nil {
		return fmt.Errorf("encrypt-queues needs payload keys (payload-keys-file or $REDRIVE_PAYLOAD_KEYS)")
	}
	if keys != nil {
		c.Payloads = &seal.Policy{Keys: keys, All: all, Queues: queues}
	}
	if c.AMQPBodies, err = resolveBodies("amqp-encrypt-bodies", c.amqpEncryptBodies, keys, "amqp-queues", c.AMQP.ManagedNames()); err != nil {
		return err
	}
	if c.KafkaBodies, err = resolveBodies("kafka-encrypt-bodies", c.kafkaEncryptBodies, keys, "kafka-topics", c.Kafka.TopicNames()); err != nil {
		return err
	}
	return nil
}

// resolveBodies builds the policy of setting, a list of names among
// those of managed (the setting managedSetting) or "*"; when it is
// empty, one that seals nothing but opens with keys (a keeper then opens
// a sealed dead letter that the store seals whole), nil without keys.
// It is an error without keys, or naming a queue or topic serve does
// not manage.
func resolveBodies(setting, v string, keys *seal.Keyring, managedSetting string, managed []string) (*seal.Bodies, error) {
	all, names, err := seal.ParseNames(setting, v, nil)
	if err != nil {
		return nil, err
	}
	if !all && len(names) == 0 {
		if keys == nil {
			return nil, nil
		}
		return &seal.Bodies{Keys: keys}, nil
	}
	if keys == nil {
		return nil, fmt.Errorf("%s needs payload keys (payload-keys-file or $REDRIVE_PAYLOAD_KEYS)", setting)
	}
	for n := range names {
		if !slices.Contains(managed, n) {
			return nil, fmt.Errorf("%s: %q is not among %s (%s)", setting, n, managedSetting, strings.Join(managed, ","))
		}
	}
	return &seal.Bodies{Keys: keys, All: all, Names: names}, nil
}

// PayloadCodec returns the stores' payload codec: nil without keys.
func (c *Serve) PayloadCodec() store.PayloadCodec {
	if c.Payloads == nil {
		return nil
	}
	return c.Payloads
}

// PayloadCodecFromEnv is the payload codec of the commands that open the
// store themselves (the CLI): $REDRIVE_PAYLOAD_KEYS_FILE or
// $REDRIVE_PAYLOAD_KEYS, and $REDRIVE_ENCRYPT_QUEUES, as serve reads
// them. Without keys it is nil: sealed payloads then read as
// undecryptable.
func PayloadCodecFromEnv(getenv func(string) string) (store.PayloadCodec, error) {
	c := &Serve{payloadKeysFile: getenv("REDRIVE_PAYLOAD_KEYS_FILE"), payloadKeys: getenv("REDRIVE_PAYLOAD_KEYS"),
		encryptQueues: getenv("REDRIVE_ENCRYPT_QUEUES")}
	if err := resolveEncrypt(c); err != nil {
		return nil, err
	}
	return c.PayloadCodec(), nil
}
