package main

import (
	"context"
	"fmt"
	"strings"

	"github.com/redrivehq/redrive/kafka"
	"github.com/spf13/cobra"
)

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
			audit, err := openBrokerAudit(ctx, g, cmd)
			if err != nil {
				return err
			}
			defer audit.Close()
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
					reason += sealedNote(d.Sealed, d.ValueError)
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
			audit, err := openBrokerAudit(ctx, g, cmd)
			if err != nil {
				return err
			}
			defer audit.Close()
			if err := k.checkPartitions(cmd, "to", to); err != nil {
				return err
			}
			// How many at most: the pending ones, or the range's dead
			// letters (records, not offsets).
			var n int64
			if from == nil {
				c, err := k.dlt.Count(ctx)
				if err != nil {
					return err
				}
				n = c.Pending
			} else {
				var err error
				if n, err = k.dlt.CountRange(ctx, from, to); err != nil {
					return err
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
			target := map[string]any{"kafka_topic": k.topic, "dlt": k.dlt.Name(), "all": all, "max": maxN, "rate": rate}
			for key, v := range map[string]string{"from": fromS, "to": toS, "reason": reason, "class": class} {
				if v != "" {
					target[key] = v
				}
			}
			if discard {
				target["discard"] = true
			}
			audit.record(cmd, "dlq redrive", target, int64(res.Redriven+res.Discarded), note, err)
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
		withKafka(c, addBrokerAuditFlags(c, []string{"all", "all-matching", "max", "rate", "note", "yes", "reason", "class", "from", "to", "discard"}), kafkaRedrive(g))
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
