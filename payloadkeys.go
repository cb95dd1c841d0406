package redrive

import "github.com/redrivehq/redrive/internal/seal"

// PayloadKeys are the AES-256-GCM keys payloads and broker message
// bodies are sealed with: the current key seals, every key opens (see
// docs/security.md, "Payload encryption at rest"). Build them with
// ParsePayloadKeys. Its methods: Current (the id of the sealing key),
// IDs, Seal(queue, plaintext) and Open(queue, sealed), the envelope a
// store keeps a sealed payload in.
type PayloadKeys = seal.Keyring

// ParsePayloadKeys reads a key list, the form of serve's
// payload-keys-file and $REDRIVE_PAYLOAD_KEYS: one "id:base64key" a line
// or comma-separated (32-byte keys in standard base64), '#' comments,
// the first key the current one. Errors name the line, never a key.
func ParsePayloadKeys(list []byte) (*PayloadKeys, error) { return seal.ParseKeys(list) }

// SealedBodies says which broker queues (RabbitMQ work queues, Kafka
// main topics) carry their message bodies sealed, and with which keys:
// Keys (nil seals and opens nothing), All (every queue) or Names (a set
// of names). The amqp and kafka packages take it (PublisherOptions and
// ConsumerOptions.Bodies, kafka.SealRecord): a body is sealed by the
// publisher, marked with the header HeaderSealed, carried unchanged
// through retry tiers and the dead-letter queue, and opened by the
// consumer before the handler sees it.
type SealedBodies = seal.Bodies

// HeaderSealed is the header (RabbitMQ, Kafka) that marks a message
// whose body is sealed; its value is the key id.
const HeaderSealed = seal.HeaderSealed
