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

// offsets returns each partition's start and end offsets.
func (k *kafkaDLQ) offsets(ctx context.Context) (starts, ends map[int32]int64, err error) {
	name := k.dlt.Name()
	starts, ends = map[int32]int64{}, map[int32]int64{}
	for _, l := range []struct {
		list func(context.Context, ...string) (kadm.ListedOffsets, error)
		into map[int32]int64
	}{{k.adm.ListStartOffsets, starts}, {k.adm.ListEndOffsets, ends}} {
		res, err := l.list(ctx, name)
		if err == nil {
			err = res.Error()
		}
		if err != nil {
			return nil, nil, fmt.Errorf("kafka: dead-letter topic %s: %w", name, err)
		}
		res.Each(func(o kadm.ListedOffset) { l.into[o.Partition] = o.Offset })
	}
	return starts, ends, nil
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

// kafkaList is `dlq ls --kafka-topic`: the pending dead letters (or those
// from --from), read without moving anything.
func kafkaList(g *globalOptions) func(*cobra.Command, []string) (kafkaAction, error) {
	return func(cmd *cobra.Command, _ []string) (kafkaAction, error) {
		f := cmd.Flags()
		limit, _ := f.GetInt("limit")
		if limit == 0 {
			limit = 20
		}
		if limit < 0 || limit > kafka.MaxPeek {
			return nil, flagErrorf(cmd, "--limit must be from 1 to %d", kafka.MaxPeek)
		}
		fromS, _ := f.GetString("from")
		from, _, err := parseKafkaRange(fromS, "", f.Changed("from"), false)
		if err != nil {
			return nil, flagErrorf(cmd, "%v", err)
		}
		return func(ctx context.Context, k *kafkaDLQ) error {
			if err := k.checkPartitions(cmd, "from", from); err != nil {
				return err
			}
			n, err := k.dlt.Count(ctx)
			if err != nil {
				return err
			}
			dead, err := k.dlt.Peek(ctx, limit, from)
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			if g.JSON {
				if dead == nil {
					dead = []kafka.DeadLetter{}
				}
				return writeJSON(out, dead)
			}
			if len(dead) == 0 {
				switch {
				case from != nil:
					_, err = fmt.Fprintf(out, "No dead letters in %s from %s.\n", k.dlt.Name(), formatKafkaOffsets(from))
				case n.Total > 0:
					_, err = fmt.Fprintf(out, "No dead letters pending in %s (%s in all, redriven already: --from PARTITION:OFFSET shows them).\n",
						k.dlt.Name(), fmtCount(n.Total))
				default:
					_, err = fmt.Fprintf(out, "No dead letters in %s.\n", k.dlt.Name())
				}
				return err
			}
			err = writeTable(out, []string{"PARTITION/OFFSET", "KEY", "KIND", "REASON", "CLASS", "ATTEMPTS", "DEAD AT", "ERROR"}, func(row func(...any)) {
				for _, d := range dead {
					deadAt := "-"
					if !d.DeadAt.IsZero() {
						deadAt = fmtTime(d.DeadAt)
					}
					reason := d.Reason
					if d.Problem != "" {
						reason += " (unreadable headers)"
					}
					row(fmt.Sprintf("%d/%d", d.Partition, d.Offset), fmtKafkaKey(d.Key), d.Kind, reason, d.Class, d.Attempts, deadAt,
						oneLine(d.Error, 60))
				}
			})
			if err != nil {
				return err
			}
			if from == nil && n.Pending > int64(len(dead)) {
				_, err = fmt.Fprintf(out, "showing the first %d of %s pending dead letters in %s (%s in all); --limit shows more (at most %d), "+
					"--from PARTITION:OFFSET reads from given offsets, --json shows their histories\n",
					len(dead), fmtCount(n.Pending), k.dlt.Name(), fmtCount(n.Total), kafka.MaxPeek)
			}
			return err
		}, nil
	}
}

// kafkaCount is `dlq count --kafka-topic`: the dead letters the DLT
// holds, and how many of them are pending (not redriven yet).
func kafkaCount(g *globalOptions) func(*cobra.Command, []string) (kafkaAction, error) {
	return func(cmd *cobra.Command, _ []string) (kafkaAction, error) {
		return func(ctx context.Context, k *kafkaDLQ) error {
			n, err := k.dlt.Count(ctx)
			if err != nil {
				return err
			}
			if g.JSON {
				return writeJSON(cmd.OutOrStdout(), n)
			}
			_, err = fmt.Fprintf(cmd.OutOrStdout(), "%s dead letter(s) in %s, %s pending (not redriven yet)\n",
				fmtCount(n.Total), k.dlt.Name(), fmtCount(n.Pending))
			return err
		}, nil
	}
}

// kafkaRedrive is `dlq redrive --kafka-topic (--all | --max N | --from
// P:OFF,... [--to P:OFF,...])`.
func kafkaRedrive(g *globalOptions) func(*cobra.Command, []string) (kafkaAction, error) {
	return func(cmd *cobra.Command, args []string) (kafkaAction, error) {
		f := cmd.Flags()
		all, _ := f.GetBool("all") // --all-matching, its old name, sets it too
		maxN, _ := f.GetInt("max")
		rate, _ := f.GetFloat64("rate")
		note, _ := f.GetString("note")
		yes, _ := f.GetBool("yes")
		reason, _ := f.GetString("reason")
		class, _ := f.GetString("class")
		fromS, _ := f.GetString("from")
		toS, _ := f.GetString("to")
		discard, _ := f.GetBool("discard")
		ranged := f.Changed("from") || f.Changed("to")
		switch {
		case discard && f.Changed("from"):
			return nil, flagErrorf(cmd, "--discard moves the redrive cursor, which --from does not: select with --all, --max N, --reason or --class")
		case len(args) > 0:
			return nil, flagErrorf(cmd, "a Kafka dead-letter topic has no job ids: select dead letters with --all, --max N, or offsets (--from/--to PARTITION:OFFSET,...)")
		case !all && maxN == 0 && !ranged:
			return nil, flagErrorf(cmd, "say which dead letters to redrive: --all (every pending one), --max N (the first N pending), or offsets with --from/--to PARTITION:OFFSET,...")
		case all && (maxN != 0 || ranged):
			return nil, flagErrorf(cmd, "--all redrives every pending dead letter: give it alone, or select with --max N or --from/--to")
		case maxN < 0:
			return nil, flagErrorf(cmd, "--max must be positive")
		case rate < 0:
			return nil, flagErrorf(cmd, "--rate must not be negative")
		}
		from, to, err := parseKafkaRange(fromS, toS, f.Changed("from"), f.Changed("to"))
		if err != nil {
			return nil, flagErrorf(cmd, "%v", err)
		}
		if rate == 0 {
			rate = 100
		}
		var filter []string
		if reason != "" {
			filter = append(filter, "reason="+quoteIfNeeded(reason))
		}
		if class != "" {
			filter = append(filter, "class="+quoteIfNeeded(class))
		}
		return func(ctx context.Context, k *kafkaDLQ) error {
			if err := k.checkPartitions(cmd, "from", from); err != nil {
				return err
			}
			if err := k.checkPartitions(cmd, "to", to); err != nil {
				return err
			}
			// How many at most: the pending ones, or the range's records.
			var n int64
			if from == nil {
				c, err := k.dlt.Count(ctx)
				if err != nil {
					return err
				}
				n = c.Pending
			} else {
				starts, ends, err := k.offsets(ctx)
				if err != nil {
					return err
				}
				for p, off := range from {
					end := ends[p]
					if t, ok := to[p]; ok {
						end = min(end, t)
					}
					n += max(0, end-max(off, starts[p]))
				}
			}
			// Exact unless filters skip some, or --to bounds the pending
			// ones (n counts all of them).
			exact := len(filter) == 0 && (from != nil || to == nil)
			if maxN > 0 && n > int64(maxN) {
				n = int64(maxN)
				exact = len(filter) == 0
			}
			out := cmd.OutOrStdout()
			if n == 0 {
				if g.JSON {
					return writeJSON(out, kafka.RedriveResult{})
				}
				where := "pending in " + k.dlt.Name()
				if from != nil {
					where = "in " + k.dlt.Name() + " at " + describeKafkaRange(from, to)
				}
				_, err := fmt.Fprintf(out, "No dead letters %s: nothing to redrive.\n", where)
				return err
			}
			what := fmtCount(n) + " dead letter(s)"
			if !exact {
				what = "up to " + what
			}
			if len(filter) > 0 {
				what += " matching " + strings.Join(filter, " ")
			}
			where := k.dlt.Name()
			if from != nil {
				where += " (" + describeKafkaRange(from, to) + ")"
			}
			question := fmt.Sprintf("Redrive %s from %s back to %s?", what, where, k.topic)
			if discard {
				question = fmt.Sprintf("Discard %s of %s (they will not run again)?", what, where)
			}
			if err := confirm(cmd, yes, question); err != nil {
				return err
			}
			bar := newProgressBar(cmd, g, "redrive")
			res, err := k.dlt.Redrive(ctx, kafka.RedriveOptions{From: from, To: to, Reason: reason, Class: class, Max: maxN, Rate: rate,
				Discard: discard, Note: note, Progress: func(done int) { bar.update(int64(done), n, "") }})
			bar.finish()
			if err != nil {
				return fmt.Errorf("redrive stopped after %d dead letter(s): %w", res.Redriven+res.Discarded, err)
			}
			if g.JSON {
				return writeJSON(out, res)
			}
			msg := fmt.Sprintf("redriven %d dead letter(s) from %s back to %s", res.Redriven, k.dlt.Name(), k.topic)
			if discard {
				msg = fmt.Sprintf("discarded %d dead letter(s) of %s", res.Discarded, k.dlt.Name())
			}
			if len(filter) > 0 || res.Skipped > 0 {
				msg += fmt.Sprintf("; skipped %d not matching %s", res.Skipped, strings.Join(filter, " "))
			}
			switch {
			case from != nil:
				msg += "; the redrive cursor did not move (--from)"
			case res.Skipped > 0:
				msg += "; the skipped ones stay pending"
			}
			_, err = fmt.Fprintln(out, msg)
			return err
		}, nil
	}
}

// kafkaDLQCommands adds the Kafka mode to the dlq subcommands; the RabbitMQ
// mode (amqpDLQCommands, which adds count) comes first.
func kafkaDLQCommands(g *globalOptions, dlq *cobra.Command) {
	byName := map[string]*cobra.Command{}
	for _, c := range dlq.Commands() {
		byName[c.Name()] = c
	}
	if c := byName["ls"]; c != nil {
		if fl := c.Flags().Lookup("limit"); fl != nil {
			fl.Usage += fmt.Sprintf(" (with --kafka-topic: default 20, at most %d)", kafka.MaxPeek)
		}
		c.Flags().String("from", "", "with --kafka-topic: peek from these offsets, PARTITION:OFFSET,... (e.g. 0:120,1:40; default: the pending ones)")
		withKafka(c, []string{"limit", "from"}, kafkaList(g))
	}
	if c := byName["redrive"]; c != nil {
		f := c.Flags()
		if fl := f.Lookup("max"); fl != nil {
			fl.Usage = "with --amqp-queue or --kafka-topic: redrive this many dead messages from the head of the DLQ (of a Kafka DLT: the first pending)"
		}
		if fl := f.Lookup("rate"); fl != nil {
			fl.Usage = strings.Replace(fl.Usage, "(0: no bound)", "(0: no bound; with --amqp-queue or --kafka-topic: 100)", 1)
		}
		f.String("from", "", "with --kafka-topic: redrive from these offsets, PARTITION:OFFSET,... (e.g. 0:120,1:40); only the partitions named")
		f.String("to", "", "with --kafka-topic: stop before these offsets, PARTITION:OFFSET,... (e.g. 0:200)")
		f.Bool("discard", false, "with --kafka-topic: move the redrive cursor past the selected dead letters without redriving them")
		withKafka(c, []string{"all", "all-matching", "max", "rate", "note", "yes", "reason", "class", "from", "to", "discard"}, kafkaRedrive(g))
		c.Long += "\n" + kafkaRedriveHelp
	}
	if c := byName["purge"]; c != nil {
		// Refused whatever the other flags say, before any broker.
		var topic string
		c.Flags().String("kafka-brokers", "", "(with --kafka-topic: refused, a Kafka dead-letter topic is append-only)")
		c.Flags().StringVar(&topic, "kafka-topic", "", "refused: a Kafka dead-letter topic is append-only (see its retention)")
		next := c.RunE
		c.RunE = func(cmd *cobra.Command, args []string) error {
			if cmd.Flags().Changed("kafka-topic") {
				return flagErrorf(cmd, kafkaPurgeRefusal, topic)
			}
			if cmd.Flags().Changed("kafka-brokers") {
				return flagErrorf(cmd, "--kafka-brokers needs --kafka-topic, and a Kafka dead-letter topic cannot be purged anyway")
			}
			return next(cmd, args)
		}
	}
	if c := byName["count"]; c != nil {
		c.Short = "Count dead jobs (or a RabbitMQ DLQ's messages, or a Kafka DLT's records)"
		withKafka(c, nil, kafkaCount(g))
	}
	for _, c := range byName {
		if fl := c.Flags().Lookup("log-format"); fl != nil {
			fl.Usage = strings.Replace(fl.Usage, "with --amqp-queue:", "with --amqp-queue or --kafka-topic:", 1)
		}
	}
}
