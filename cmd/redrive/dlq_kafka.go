package main

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/redrivehq/redrive/internal/config"
	"github.com/redrivehq/redrive/kafka"
)

// kafkaBrokersEnv is the default of --kafka-brokers.
const kafkaBrokersEnv = "REDRIVE_KAFKA_BROKERS"

// kafkaConnectTimeout bounds the first exchange with the brokers: an
// address nobody answers on fails the command instead of hanging it.
const kafkaConnectTimeout = 30 * time.Second

const kafkaHelp = `
With --kafka-topic NAME the command works on the Kafka dead-letter topic
NAME-dlt of the main topic NAME, on the seed brokers of --kafka-brokers
(host:port,...; default $` + kafkaBrokersEnv + `), instead of the store's dead
jobs. A dead-letter topic is append-only: a redrive does not remove what it
republishes, it moves a cursor (the committed offsets of the consumer group
redrive-dlt-NAME) past what it read; the dead letters after the cursor are
the pending ones. Records leave the topic only by its retention
(retention.ms, retention.bytes).`

// kafkaRedriveHelp is the part of `dlq redrive`'s help about Kafka.
const kafkaRedriveHelp = `
With --kafka-topic, say which dead letters to redrive: --all (every pending
one), --max N (the first N pending, partition by partition), or offset
ranges with --from and --to (PARTITION:OFFSET,..., --to excluded: --from
0:120,1:40 --to 0:200 reads partition 0 from offset 120 to 199 and
partition 1 from 40 to its end). --reason and --class redrive only the dead
letters with that reason or failure class; the others are skipped and stay
pending (count, ls and the next redrive see them). Without --from, the
cursor moves past the dead letters redriven; with --from, it does not move.
--discard moves the cursor past the selected dead letters without
redriving them (they will not run again; the topic keeps them until its
retention). --rate bounds the redrive (default 100 records/s).`

// kafkaPurgeRefusal is what `dlq purge --kafka-topic` says.
const kafkaPurgeRefusal = "a Kafka dead-letter topic is append-only: its records cannot be purged. They leave it when the " +
	"topic's retention expires them (set retention.ms or retention.bytes on %s-dlt); a redrive moves the cursor past what it " +
	"republished, so `dlq count --kafka-topic` counts only the dead letters after it as pending"

// kafkaDLQ is the dead-letter topic a dlq subcommand works on.
type kafkaDLQ struct {
	// topic is the main topic; dlt the operations on its DLT.
	topic string
	dlt   *kafka.DLT
	adm   *kadm.Client
	// partitions is the DLT's partition count.
	partitions int32
}

// close releases the DLT's clients.
func (k *kafkaDLQ) close() {
	k.dlt.Close()
	k.adm.Close()
}

// kafkaAction is a dlq subcommand's work on a DLT, returned by its
// prepare step once the flags are checked.
type kafkaAction func(ctx context.Context, k *kafkaDLQ) error

// withKafka adds --kafka-brokers and --kafka-topic to a dlq subcommand:
// with them, prepare checks the flags (the flags in allowed are the only
// others it takes), then the brokers are reached and the action runs on
// the topic's DLT; without, the command works as before (the store's dead
// jobs, or a RabbitMQ DLQ with --amqp-queue).
func withKafka(cmd *cobra.Command, allowed []string, prepare func(cmd *cobra.Command, args []string) (kafkaAction, error)) *cobra.Command {
	var brokers, topic string
	f := cmd.Flags()
	f.StringVar(&brokers, "kafka-brokers", "", "seed brokers of --kafka-topic, host:port,... (default $"+kafkaBrokersEnv+")")
	f.StringVar(&topic, "kafka-topic", "", "work the Kafka dead-letter topic of this main topic (NAME-dlt) instead of the store's dead jobs")
	cmd.Long += "\n" + kafkaHelp
	next := cmd.RunE
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		if !cmd.Flags().Changed("kafka-topic") {
			if cmd.Flags().Changed("kafka-brokers") {
				return flagErrorf(cmd, "--kafka-brokers needs --kafka-topic: which main topic's dead-letter topic?")
			}
			return next(cmd, args)
		}
		if err := checkKafkaFlags(cmd, allowed); err != nil {
			return err
		}
		if strings.TrimSpace(topic) == "" {
			return flagErrorf(cmd, "--kafka-topic is empty: name the main topic whose dead-letter topic to work on")
		}
		if err := (kafka.Topology{Topic: topic, Tiers: []time.Duration{time.Second}}).Validate(); err != nil {
			return flagErrorf(cmd, "--kafka-topic: %v", err)
		}
		action, err := prepare(cmd, args)
		if err != nil {
			return err
		}
		seeds, err := kafkaBrokers(brokers, cmd.Flags().Changed("kafka-brokers"))
		if err != nil {
			return flagErrorf(cmd, "%v", err)
		}
		log, err := kafkaLogger(cmd)
		if err != nil {
			return err
		}
		k, err := openKafkaDLQ(cmd.Context(), seeds, topic, log)
		if err != nil {
			return err
		}
		defer k.close()
		return action(cmd.Context(), k)
	}
	return cmd
}

// checkKafkaFlags refuses the flags a Kafka DLT does not take.
func checkKafkaFlags(cmd *cobra.Command, allowed []string) error {
	ok := map[string]bool{"kafka-brokers": true, "kafka-topic": true, "log-format": true}
	for _, n := range allowed {
		ok[n] = true
	}
	var bad error
	cmd.LocalNonPersistentFlags().VisitAll(func(fl *pflag.Flag) {
		if !fl.Changed || ok[fl.Name] || bad != nil {
			return
		}
		if strings.HasPrefix(fl.Name, "amqp-") {
			bad = flagErrorf(cmd, "--%s and --kafka-topic: give a RabbitMQ DLQ or a Kafka dead-letter topic, not both", fl.Name)
			return
		}
		bad = flagErrorf(cmd, "--%s applies to the store's dead jobs, not to a Kafka dead-letter topic (--kafka-topic)", fl.Name)
	})
	return bad
}

// kafkaBrokers returns the seed brokers of --kafka-brokers (flag true:
// given on the command line), else of $REDRIVE_KAFKA_BROKERS.
func kafkaBrokers(v string, flag bool) ([]string, error) {
	src := "--kafka-brokers"
	if !flag {
		v, src = os.Getenv(kafkaBrokersEnv), "$"+kafkaBrokersEnv
		if strings.TrimSpace(v) == "" {
			return nil, fmt.Errorf("--kafka-topic needs the brokers: set --kafka-brokers or $%s (host:port,...)", kafkaBrokersEnv)
		}
	}
	seeds, err := config.ParseKafkaBrokers(v)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", src, err)
	}
	return seeds, nil
}

// kafkaLogger returns the logger of the brokers' client: warnings and
// errors on standard error, in the format of --log-format (or
// $REDRIVE_LOG_FORMAT).
func kafkaLogger(cmd *cobra.Command) (*slog.Logger, error) {
	lf := os.Getenv(logFormatEnv)
	if fl := cmd.Flags().Lookup("log-format"); fl != nil && fl.Changed {
		lf = fl.Value.String()
	}
	format, err := config.ParseLogFormat(lf)
	if err != nil {
		return nil, flagErrorf(cmd, "--log-format %w", err)
	}
	return slog.New(newLogHandler(cmd.ErrOrStderr(), format, slog.LevelWarn)), nil
}

// kgoSlog sends the kgo client's warnings and errors to a slog logger.
type kgoSlog struct{ log *slog.Logger }

func (l kgoSlog) Level() kgo.LogLevel { return kgo.LogLevelWarn }

func (l kgoSlog) Log(level kgo.LogLevel, msg string, keyvals ...any) {
	switch level {
	case kgo.LogLevelError:
		l.log.Error("kafka: "+msg, keyvals...)
	case kgo.LogLevelWarn:
		l.log.Warn("kafka: "+msg, keyvals...)
	}
}

// openKafkaDLQ reaches the brokers and checks that topic's DLT exists.
func openKafkaDLQ(ctx context.Context, brokers []string, topic string, log *slog.Logger) (*kafkaDLQ, error) {
	name := kafka.Topology{Topic: topic}.DLT()
	opts := []kgo.Opt{kgo.WithLogger(kgoSlog{log}), kgo.ClientID("redrive-cli")}
	dlt, err := kafka.NewDLT(brokers, topic, kafka.DLTOptions{ClientOptions: opts})
	if err != nil {
		return nil, err
	}
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(brokers...)}, opts...)...)
	if err != nil {
		dlt.Close()
		return nil, fmt.Errorf("kafka: %w", err)
	}
	k := &kafkaDLQ{topic: topic, dlt: dlt, adm: kadm.NewClient(cl)}
	bodies, err := brokerBodies(os.Getenv)
	if err != nil {
		k.close()
		return nil, err
	}
	dlt.SetBodies(bodies)
	cctx, cancel := context.WithTimeout(ctx, kafkaConnectTimeout)
	defer cancel()
	listed, err := k.adm.ListTopics(cctx, name)
	if err == nil {
		if td, ok := listed[name]; !ok || errors.Is(td.Err, kerr.UnknownTopicOrPartition) {
			err = fmt.Errorf("no dead-letter topic %s on %s: is %q the main topic of a redrive consumer? (its consumer creates %s when it starts)",
				name, strings.Join(brokers, ","), topic, name)
		} else if td.Err != nil {
			err = fmt.Errorf("kafka: topic %s: %w", name, td.Err)
		} else {
			k.partitions = int32(len(td.Partitions))
		}
	} else if cctx.Err() != nil && ctx.Err() == nil {
		err = fmt.Errorf("kafka: no answer from the brokers %s within %s: %w", strings.Join(brokers, ","), kafkaConnectTimeout, err)
	} else {
		err = fmt.Errorf("kafka: brokers %s: %w", strings.Join(brokers, ","), err)
	}
	if err != nil {
		k.close()
		return nil, err
	}
	return k, nil
}

// checkPartitions refuses offsets of partitions the DLT does not have.
func (k *kafkaDLQ) checkPartitions(cmd *cobra.Command, flag string, offs map[int32]int64) error {
	for _, p := range slices.Sorted(maps.Keys(offs)) {
		if p >= k.partitions {
			return flagErrorf(cmd, "--%s names partition %d, but %s has %d partition(s): 0 to %d", flag, p, k.dlt.Name(),
				k.partitions, k.partitions-1)
		}
	}
	return nil
}

// parseKafkaOffsets parses offsets by partition: PARTITION:OFFSET,...
// ("0:120,1:40"), each partition at most once.
func parseKafkaOffsets(s string) (map[int32]int64, error) {
	if strings.TrimSpace(s) == "" {
		return nil, errors.New("want PARTITION:OFFSET,... (e.g. 0:120,1:40), got nothing")
	}
	out := map[int32]int64{}
	for item := range strings.SplitSeq(s, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			return nil, fmt.Errorf("%q: an empty entry: want PARTITION:OFFSET,... (e.g. 0:120,1:40)", clipArg(s))
		}
		ps, offS, ok := strings.Cut(item, ":")
		if !ok {
			return nil, fmt.Errorf("%q: want PARTITION:OFFSET (e.g. 0:120)", clipArg(item))
		}
		p, err := strconv.ParseInt(strings.TrimSpace(ps), 10, 32)
		if err != nil || p < 0 {
			return nil, fmt.Errorf("%q: partition %q: want an integer from 0 to %d", clipArg(item), clipArg(ps), int32(1<<31-1))
		}
		o, err := strconv.ParseInt(strings.TrimSpace(offS), 10, 64)
		if err != nil || o < 0 {
			return nil, fmt.Errorf("%q: offset %q: want an integer from 0 to %d", clipArg(item), clipArg(offS), int64(1<<63-1))
		}
		if _, dup := out[int32(p)]; dup {
			return nil, fmt.Errorf("partition %d given twice", p)
		}
		out[int32(p)] = o
	}
	return out, nil
}

// formatKafkaOffsets formats offsets by partition as parseKafkaOffsets
// reads them, by partition.
func formatKafkaOffsets(m map[int32]int64) string {
	parts := make([]string, 0, len(m))
	for _, p := range slices.Sorted(maps.Keys(m)) {
		parts = append(parts, fmt.Sprintf("%d:%d", p, m[p]))
	}
	return strings.Join(parts, ",")
}

// parseKafkaRange parses --from and --to (set: given): nil when not
// given. --to may only name partitions --from names, past their --from
// offset.
func parseKafkaRange(from, to string, fromSet, toSet bool) (map[int32]int64, map[int32]int64, error) {
	var f, t map[int32]int64
	var err error
	if fromSet {
		if f, err = parseKafkaOffsets(from); err != nil {
			return nil, nil, fmt.Errorf("--from: %w", err)
		}
	}
	if toSet {
		if t, err = parseKafkaOffsets(to); err != nil {
			return nil, nil, fmt.Errorf("--to: %w", err)
		}
	}
	if f == nil {
		return f, t, nil
	}
	for _, p := range slices.Sorted(maps.Keys(t)) {
		start, ok := f[p]
		switch {
		case !ok:
			return nil, nil, fmt.Errorf("--to names partition %d, which --from does not: with --from, only the partitions it names are read", p)
		case t[p] <= start:
			return nil, nil, fmt.Errorf("--to %d:%d is not after --from %d:%d: nothing to read (--to excludes its offset)", p, t[p], p, start)
		}
	}
	return f, t, nil
}

// describeKafkaRange words offset ranges: "partition 0 offsets 120 to
// 199, partition 1 from offset 40".
func describeKafkaRange(from, to map[int32]int64) string {
	var parts []string
	for _, p := range slices.Sorted(maps.Keys(from)) {
		if end, ok := to[p]; ok && end == from[p]+1 {
			parts = append(parts, fmt.Sprintf("partition %d offset %d", p, from[p]))
		} else if ok {
			parts = append(parts, fmt.Sprintf("partition %d offsets %d to %d", p, from[p], end-1))
		} else {
			parts = append(parts, fmt.Sprintf("partition %d from offset %d", p, from[p]))
		}
	}
	return strings.Join(parts, ", ")
}

// fmtKafkaKey formats a record key for a table: as text when it is
// printable, else in hex.
func fmtKafkaKey(k []byte) string {
	if len(k) == 0 {
		return ""
	}
	if utf8.Valid(k) && !strings.ContainsFunc(string(k), func(r rune) bool { return !unicode.IsPrint(r) }) {
		return oneLine(string(k), 32)
	}
	if len(k) > 12 {
		return "0x" + hex.EncodeToString(k[:12]) + "…"
	}
	return "0x" + hex.EncodeToString(k)
}
