package config

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
	"unicode"
	"unicode/utf8"
)

// TestServeKafkaConfig: kept topics from flags, the environment and the
// config file, each served as a store queue with the policy of its name.
func TestServeKafkaConfig(t *testing.T) {
	c, err := loadConfig(t, map[string]string{"REDRIVE_KAFKA_BROKERS": "k1:9092, k2:9093"},
		"--kafka-topics", "scans,orders=3", "--queues", "default,orders=7", "--kafka-group", "workers")
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(c.Kafka.Brokers, ",") != "k1:9092,k2:9093" || c.Kafka.Group != "workers" {
		t.Errorf("brokers %v group %q", c.Kafka.Brokers, c.Kafka.Group)
	}
	if got := strings.Join(c.Kafka.TopicNames(), ","); got != "orders,scans" {
		t.Errorf("topics %s", got)
	}
	// The topics are served by the store's worker too (their dead
	// letters live there); --queues' concurrency wins.
	if c.Queues["scans"] != c.Workers || c.Queues["orders"] != 7 || c.Queues["default"] != c.Workers || c.Kafka.Topics["orders"] != 3 {
		t.Errorf("served queues %v, topics %v", c.Queues, c.Kafka.Topics)
	}

	file := writeFile(t, "redrive.json", `{"kafka-brokers": "localhost:9092", "kafka-topics": "scans",
		"queues": {"default": 1, "scans": {"retry": {"base": "2s", "max-retries": 5}}}}`)
	c, err = loadConfig(t, nil, "--config", file)
	if err != nil {
		t.Fatal(err)
	}
	if p, ok := c.QueueRetry["scans"]; !ok || p.Initial != 2*time.Second || p.MaxRetries != 5 {
		t.Errorf("scans' policy %+v (set %v), want base 2s, 5 retries", p, ok)
	}
	if c.Kafka.Group != "" || len(c.Kafka.Topics) != 1 {
		t.Errorf("from the file: %+v", c.Kafka)
	}
	// Brokers alone keep nothing.
	if c, err = loadConfig(t, nil, "--kafka-brokers", "localhost:9092"); err != nil || len(c.Kafka.Topics) != 0 {
		t.Errorf("brokers alone: %v %+v", err, c.Kafka)
	}
}

func TestServeKafkaConfigErrors(t *testing.T) {
	for _, tc := range []struct {
		env  map[string]string
		args []string
		want string
	}{
		{args: []string{"--kafka-topics", "scans"}, want: "kafka-topics: keeping Kafka dead-letter topics needs --kafka-brokers"},
		{args: []string{"--kafka-brokers", "http://h/"}, want: `--kafka-brokers: "http://h/": want host:port`},
		{env: map[string]string{"REDRIVE_KAFKA_BROKERS": "h:99999"}, want: `REDRIVE_KAFKA_BROKERS: "h:99999": want host:port`},
		{args: []string{"--kafka-topics", "a b"}, want: `--kafka-topics: kafka: topology: topic "a b"`},
		{args: []string{"--kafka-topics", "a,a"}, want: `queue "a" is listed twice`},
		{args: []string{"--kafka-topics", strings.Repeat("t", 220)}, want: "--kafka-topics: queue name is 220 bytes long, the limit is 200"},
		{args: []string{"--kafka-topics", "a=0"}, want: `--kafka-topics: queue "a": 0: want 1 to 10000`},
		{args: []string{"--kafka-group", "g\x01"}, want: "--kafka-group: \"g\\x01\" contains a control character"},
		{env: map[string]string{"REDRIVE_KAFKA_GROUP": strings.Repeat("g", 250)}, want: "REDRIVE_KAFKA_GROUP: 250 bytes long"},
	} {
		_, err := loadConfig(t, tc.env, tc.args...)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v %v: err = %v, want %q", tc.env, tc.args, err, tc.want)
		}
	}
}

// kafkaFlags are the Kafka settings FuzzKafkaSettings sets, in the order
// of its arguments.
var kafkaFlags = []string{"kafka-brokers", "kafka-topics", "kafka-group"}

// FuzzKafkaSettings: the Kafka settings through the flags, the
// environment and the config file get the same verdict; an error names
// the setting as its source spells it; an accepted configuration keeps
// valid brokers, topics that are Kafka topic names and store queues
// served by the worker, and a sane group.
func FuzzKafkaSettings(f *testing.F) {
	for _, s := range [][3]string{
		{"localhost:9092", "orders,scans=4", "workers"},
		{"a:1,b:2", "t", ""},
		{"", "t", ""},
		{"h", "t", "g"},
		{"h:0", "", ""},
		{"h:9092", "a b", ""},
		{"h:9092", "a,a", ""},
		{"h:9092", "x=0", "g"},
		{"[::1]:9092", "a.b_c-d", " g "},
		{"h:9092", "t", "g\x00"},
		{"", "", ""},
	} {
		f.Add(s[0], s[1], s[2])
	}
	f.Fuzz(func(t *testing.T, brokers, topics, group string) {
		vals := []string{brokers, topics, group}
		flags, env, obj := map[string]string{}, map[string]string{}, map[string]string{}
		withFile := true
		for i, name := range kafkaFlags {
			if vals[i] == "" {
				continue // an empty variable counts as unset; leave the setting out everywhere
			}
			flags[name] = vals[i]
			env[(setting{name: name}).env()] = vals[i]
			obj[name] = vals[i]
			withFile = withFile && utf8.ValidString(vals[i])
		}
		content, err := json.Marshal(obj)
		if err != nil {
			t.Fatal(err)
		}
		path := filepath.Join(t.TempDir(), "redrive.json")
		if err := os.WriteFile(path, content, 0o600); err != nil {
			t.Fatal(err)
		}
		type result struct {
			c   *Serve
			err error
		}
		results := map[string]result{}
		for _, src := range []string{"flags", "env", "file"} {
			if src == "file" && !withFile {
				continue
			}
			var c *Serve
			var err error
			switch src {
			case "flags":
				c, err = fuzzLoad(t, flags, nil)
			case "env":
				c, err = fuzzLoad(t, nil, env)
			case "file":
				c, err = fuzzLoad(t, nil, map[string]string{FileEnv: path})
			}
			results[src] = result{c, err}
			if err != nil {
				msg := err.Error()
				named := strings.HasPrefix(msg, "kafka-topics: ") // resolveKafka's, naming the setting
				for _, name := range kafkaFlags {
					named = named || strings.HasPrefix(msg, "--"+name+": ") || strings.HasPrefix(msg, (setting{name: name}).env()+": ") ||
						strings.HasPrefix(msg, path+": "+name+": ")
				}
				if !named {
					t.Fatalf("%s %q: the error names no Kafka setting: %v", src, vals, err)
				}
				continue
			}
			checkValidConfig(t, c)
			for _, b := range c.Kafka.Brokers {
				if _, err := ParseKafkaBrokers(b); err != nil {
					t.Fatalf("%s %q: accepted broker %q: %v", src, vals, b, err)
				}
			}
			if len(c.Kafka.Topics) > 0 && len(c.Kafka.Brokers) == 0 {
				t.Fatalf("%s %q: topics without brokers", src, vals)
			}
			for topic, n := range c.Kafka.Topics {
				if err := checkKafkaTopic(topic); err != nil {
					t.Fatalf("%s %q: accepted topic %q: %v", src, vals, topic, err)
				}
				if _, served := c.Queues[topic]; !served || n < 1 || n > maxConcurrency {
					t.Fatalf("%s %q: topic %q (concurrency %d) is not a served queue: %v", src, vals, topic, n, c.Queues)
				}
			}
			if g := c.Kafka.Group; len(g) > maxKafkaGroup || strings.TrimSpace(g) != g || strings.IndexFunc(g, unicode.IsControl) >= 0 {
				t.Fatalf("%s %q: accepted group %q", src, vals, g)
			}
		}
		// The three sources agree on the verdict and the configuration.
		fl := results["flags"]
		for _, src := range []string{"env", "file"} {
			o, ok := results[src]
			if !ok {
				continue
			}
			if (fl.err == nil) != (o.err == nil) {
				t.Fatalf("%q: the flags say %v, %s says %v", vals, fl.err, src, o.err)
			}
			if fl.err == nil && (strings.Join(fl.c.Kafka.Brokers, ",") != strings.Join(o.c.Kafka.Brokers, ",") ||
				strings.Join(fl.c.Kafka.TopicNames(), ",") != strings.Join(o.c.Kafka.TopicNames(), ",") || fl.c.Kafka.Group != o.c.Kafka.Group) {
				t.Fatalf("%q: the flags give %+v, %s %+v", vals, fl.c.Kafka, src, o.c.Kafka)
			}
		}
	})
}
