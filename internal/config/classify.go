package config

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/redrivehq/redrive/failure"
	"github.com/redrivehq/redrive/internal/strictjson"
)

// Bounds of the classification settings.
const (
	// maxClassifyRules bounds the message rules of one queue (its own and
	// the default's together).
	maxClassifyRules = 100
	// maxRulePattern bounds the pattern of one message rule, in bytes.
	maxRulePattern = 1024
)

// classifyPrefix starts the name of every classification setting:
// --classify-status is "status" in a "classify" object of the config file.
const classifyPrefix = "classify-"

// Classify is how serve classifies failures: the default
// classification of every queue, and each queue's own on top of it.
type Classify struct {
	// Status overrides the HTTP status table for every queue
	// (--classify-status).
	Status map[int]failure.Class
	// Rules classify errors by message for every queue, first match wins
	// (--classify-rules).
	Rules []failure.Rule
	// Common appends failure.CommonMessageRules to the rules
	// (--classify-common-rules).
	Common bool

	// Queues holds the classification of each served queue that the
	// config file gives a "classify" object: the default's with the
	// queue's own on top.
	Queues map[string]QueueClassify
	// Classifier and queueClassifiers are the compiled classifiers;
	// Classifier is nil when nothing is configured (the built-in
	// classification).
	Classifier       *failure.Classifier
	QueueClassifiers map[string]*failure.Classifier
}

// QueueClassify is the classification of one queue, resolved.
type QueueClassify struct {
	Status map[int]failure.Class
	Rules  []failure.Rule
	Common bool
}

// config returns the failure.Config of a resolved classification.
func (q QueueClassify) config() failure.Config {
	cfg := failure.Config{Status: q.Status, Rules: slices.Clone(q.Rules)}
	if q.Common {
		cfg.Rules = append(cfg.Rules, failure.CommonMessageRules()...)
	}
	return cfg
}

// defaults returns the default classification as a queue's.
func (c *Classify) defaults() QueueClassify {
	return QueueClassify{Status: c.Status, Rules: c.Rules, Common: c.Common}
}

// ForQueue returns the classification in force on queue.
func (c *Classify) ForQueue(queue string) (QueueClassify, bool) {
	if q, ok := c.Queues[queue]; ok {
		return q, true
	}
	return c.defaults(), false
}

// classifySettings are the settings of the default classification: flags
// --classify-*, variables REDRIVE_CLASSIFY_*, and the "classify" object of
// the config file (also allowed in each queue of its "queues" object).
var classifySettings = []setting{
	{name: "classify-status", help: `HTTP statuses classified otherwise than by the built-in table, e.g. "404=transient,409=permanent" (classes: transient, rate_limited, permanent, needs_auth, unknown)`, apply: func(c *Serve, v string) error {
		m, err := parseStatusOverrides(v)
		c.Classify.Status = m
		return err
	}},
	{name: "classify-rules", help: `rules classifying errors by their message, first match wins, as a JSON array, e.g. [{"contains":"quota exceeded","class":"rate_limited"},{"regexp":"^E[0-9]+:","class":"permanent"}]`, apply: func(c *Serve, v string) error {
		rules, err := parseMessageRules(v)
		c.Classify.Rules = rules
		return err
	}},
	{name: "classify-common-rules", def: "false", bool: true, help: `after the configured rules, also try the common message rules ("timeout", "connection refused": transient; "not found", "invalid argument": permanent; ...)`, apply: func(c *Serve, v string) error {
		b, err := parseBool(v)
		c.Classify.Common = b
		return err
	}},
}

// parseStatusOverrides parses "404=transient,409=permanent". An empty value
// means no overrides.
func parseStatusOverrides(v string) (map[int]failure.Class, error) {
	var m map[int]failure.Class
	for part := range strings.SplitSeq(v, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		code, name, ok := strings.Cut(part, "=")
		if !ok {
			return nil, fmt.Errorf("%q: want status=class, e.g. 404=transient", part)
		}
		n, err := strconv.Atoi(strings.TrimSpace(code))
		if err != nil || n < 100 || n > 599 {
			return nil, fmt.Errorf("%q: %q is not an HTTP status code (want 100 to 599)", part, strings.TrimSpace(code))
		}
		class, err := failure.ParseClass(strings.TrimSpace(name))
		if err != nil {
			return nil, fmt.Errorf("%q: unknown class %q (want transient, rate_limited, permanent, needs_auth or unknown)", part, strings.TrimSpace(name))
		}
		if _, dup := m[n]; dup {
			return nil, fmt.Errorf("status %d is given twice", n)
		}
		if m == nil {
			m = map[int]failure.Class{}
		}
		m[n] = class
	}
	return m, nil
}

// formatStatusOverrides is the inverse of parseStatusOverrides, codes in
// order.
func formatStatusOverrides(m map[int]failure.Class) string {
	parts := make([]string, 0, len(m))
	for _, code := range slices.Sorted(maps.Keys(m)) {
		parts = append(parts, fmt.Sprintf("%d=%s", code, m[code]))
	}
	return strings.Join(parts, ",")
}

// ruleJSON is a message rule as the settings spell it.
type ruleJSON struct {
	Contains string `json:"contains,omitempty"`
	Regexp   string `json:"regexp,omitempty"`
	Class    string `json:"class"`
}

// parseMessageRules parses a JSON array of rules, each with exactly one of
// contains and regexp, and a class. An empty value means no rules. Every
// rule is checked as failure.NewClassifier would (the regexp compiles), and
// an error names the rule by its 1-based number.
func parseMessageRules(v string) ([]failure.Rule, error) {
	if strings.TrimSpace(v) == "" {
		return nil, nil
	}
	var raw []json.RawMessage
	if err := json.Unmarshal([]byte(v), &raw); err != nil {
		return nil, fmt.Errorf(`want a JSON array of rules such as [{"contains":"quota exceeded","class":"rate_limited"}]: %v`, err)
	}
	if err := strictjson.Check([]byte(v), nil); err != nil {
		return nil, err
	}
	if len(raw) > maxClassifyRules {
		return nil, fmt.Errorf("%d rules, the limit is %d", len(raw), maxClassifyRules)
	}
	rules := make([]failure.Rule, 0, len(raw))
	for i, r := range raw {
		rule, err := parseMessageRule(r)
		if err != nil {
			return nil, fmt.Errorf("rule %d: %w", i+1, err)
		}
		rules = append(rules, rule)
	}
	return rules, nil
}

func parseMessageRule(raw json.RawMessage) (failure.Rule, error) {
	var r ruleJSON
	if err := strictjson.Decode(raw, &r); err != nil {
		return failure.Rule{}, fmt.Errorf(`want an object {"contains" or "regexp": pattern, "class": class}, got %s: %v`, clipJSON(raw), err)
	}
	switch {
	case r.Contains == "" && r.Regexp == "":
		return failure.Rule{}, errors.New(`want one of "contains" and "regexp", non-empty`)
	case r.Contains != "" && r.Regexp != "":
		return failure.Rule{}, errors.New(`both "contains" and "regexp" are set; use one per rule`)
	case len(r.Contains)+len(r.Regexp) > maxRulePattern:
		return failure.Rule{}, fmt.Errorf("pattern of %d bytes, the limit is %d", len(r.Contains)+len(r.Regexp), maxRulePattern)
	}
	class, err := failure.ParseClass(r.Class)
	if err != nil {
		return failure.Rule{}, fmt.Errorf("class %q: want transient, rate_limited, permanent, needs_auth or unknown", r.Class)
	}
	rule := failure.Rule{Class: class, Contains: r.Contains, Regexp: r.Regexp}
	if _, err := failure.NewClassifier(failure.Config{Rules: []failure.Rule{rule}}); err != nil {
		if _, msg, ok := strings.Cut(err.Error(), ": "); ok {
			// "failure: rule 0 (regexp ...): invalid regexp: ..." without
			// the rule's index, which is the caller's.
			if _, m, ok := strings.Cut(msg, "): "); ok {
				msg = m
			}
			return failure.Rule{}, errors.New(msg)
		}
		return failure.Rule{}, err
	}
	return rule, nil
}

// formatRules is the JSON array of rules, as --classify-rules takes it.
func formatRules(rules []failure.Rule) string {
	out := make([]ruleJSON, len(rules))
	for i, r := range rules {
		out[i] = ruleJSON{Contains: r.Contains, Regexp: r.Regexp, Class: r.Class.String()}
	}
	b, _ := json.Marshal(out)
	return string(b)
}

// classifyKeys lists the keys of a "classify" object of the config file.
func classifyKeys() string {
	var names []string
	for _, s := range classifySettings {
		names = append(names, classifyKey(s.name))
	}
	return strings.Join(names, ", ")
}

// classifyKey is the key of a classification setting in a "classify"
// object: "classify-common-rules" is "common_rules".
func classifyKey(name string) string {
	return strings.ReplaceAll(strings.TrimPrefix(name, classifyPrefix), "-", "_")
}

// classifyObject reads a "classify" object of the config file into the
// settings' textual values, keyed as in the file: "status" may be a string
// ("404=transient") or an object of codes to classes, "rules" an array of
// rules, "common_rules" a boolean.
func classifyObject(v json.RawMessage) (map[string]string, error) {
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(v, &obj); err != nil || obj == nil {
		return nil, fmt.Errorf("want an object of classification settings (%s), got %s", classifyKeys(), clipJSON(v))
	}
	out := make(map[string]string, len(obj))
	seen := map[string]string{}
	for k, rv := range obj {
		name := classifyPrefix + normalizeKey(k)
		if !isSetting(classifySettings, name) {
			return nil, fmt.Errorf("unknown classification setting %q%s (known: %s)", k, didYouMean(k, splitKeys(classifyKeys())), classifyKeys())
		}
		if prev, dup := seen[name]; dup {
			return nil, fmt.Errorf("%s: given twice (also as %s)", k, prev)
		}
		seen[name] = k
		rv = bytes.TrimSpace(rv)
		switch name {
		case "classify-status":
			if len(rv) > 0 && rv[0] == '{' {
				var m map[string]string
				if err := json.Unmarshal(rv, &m); err != nil {
					return nil, fmt.Errorf(`%s: want an object of status codes to classes, e.g. {"404": "transient"}, got %s`, k, clipJSON(rv))
				}
				codes := slices.Sorted(maps.Keys(m))
				parts := make([]string, 0, len(m))
				for _, code := range codes {
					if strings.ContainsAny(code, ",=") || strings.ContainsAny(m[code], ",=") {
						return nil, fmt.Errorf("%s: %q: %q is not a status code and a class", k, code, m[code])
					}
					parts = append(parts, code+"="+m[code])
				}
				out[k] = strings.Join(parts, ",")
				continue
			}
		case "classify-rules":
			if len(rv) > 0 && rv[0] == '[' {
				out[k] = string(rv)
				continue
			}
		case "classify-common-rules":
			if string(rv) == "true" || string(rv) == "false" {
				out[k] = string(rv)
				continue
			}
		}
		s, ok := scalarValue(rv)
		if !ok {
			return nil, fmt.Errorf("%s: want a string, got %s", k, clipJSON(rv))
		}
		out[k] = s
	}
	return out, nil
}

// isSetting reports whether ss holds a setting named name.
func isSetting(ss []setting, name string) bool {
	for _, s := range ss {
		if s.name == name {
			return true
		}
	}
	return false
}

// resolveClassify compiles the default classification and that of each
// served queue the config file (at path) gives a "classify" object, its own
// settings on top of the default: its status overrides replace the
// default's for the same codes, its rules come before the default's, and
// its common_rules, when given, replace the default's. Every queue's
// classification is checked, also for a queue not served.
func resolveClassify(c *Serve, path string, queues map[string]map[string]string) error {
	def := c.Classify.defaults()
	if len(def.Rules) > maxClassifyRules {
		return fmt.Errorf("classify-rules: %d rules, the limit is %d", len(def.Rules), maxClassifyRules)
	}
	cl, err := compileClassify(def)
	if err != nil {
		return fmt.Errorf("classify: %w", err) // the settings' checks should prevent it
	}
	c.Classify.Classifier = cl
	byName := map[string]setting{}
	for _, s := range classifySettings {
		byName[s.name] = s
	}
	for _, q := range slices.Sorted(maps.Keys(queues)) {
		vals := queues[q]
		where := fmt.Sprintf("%s: queues: queue %q: classify.", path, q)
		scratch := &Serve{}
		keys := slices.Sorted(maps.Keys(vals))
		common := def.Common
		for _, k := range keys {
			s, ok := byName[classifyPrefix+normalizeKey(k)]
			if !ok {
				return fmt.Errorf("%s: queues: queue %q: classify: unknown setting %q%s (known: %s)", path, q, k, didYouMean(k, splitKeys(classifyKeys())), classifyKeys())
			}
			if err := s.apply(scratch, vals[k]); err != nil {
				return fmt.Errorf("%s%s: %w", where, k, err)
			}
			if s.name == "classify-common-rules" {
				common = scratch.Classify.Common
			}
		}
		own := scratch.Classify
		merged := QueueClassify{Common: common, Rules: append(slices.Clone(own.Rules), def.Rules...)}
		if len(def.Status)+len(own.Status) > 0 {
			merged.Status = maps.Clone(def.Status)
			if merged.Status == nil {
				merged.Status = map[int]failure.Class{}
			}
			maps.Copy(merged.Status, own.Status)
		}
		if len(merged.Rules) > maxClassifyRules {
			return fmt.Errorf("%srules: %d rules with the default's, the limit is %d", where, len(merged.Rules), maxClassifyRules)
		}
		qc, err := compileClassify(merged)
		if err != nil {
			return fmt.Errorf("%s: queues: queue %q: classify: %w", path, q, err)
		}
		if _, served := c.Queues[q]; !served {
			continue
		}
		if c.Classify.Queues == nil {
			c.Classify.Queues = map[string]QueueClassify{}
			c.Classify.QueueClassifiers = map[string]*failure.Classifier{}
		}
		c.Classify.Queues[q] = merged
		c.Classify.QueueClassifiers[q] = qc
	}
	return nil
}

// compileClassify builds the classifier of a classification; nil when it
// configures nothing, which classifies as the failure package does.
func compileClassify(q QueueClassify) (*failure.Classifier, error) {
	if len(q.Status) == 0 && len(q.Rules) == 0 && !q.Common {
		return nil, nil
	}
	return failure.NewClassifier(q.config())
}

// DescribeClassify explains a classification for `policy explain`, one line
// per override and rule, in the order they apply.
func DescribeClassify(q QueueClassify) []string {
	var lines []string
	for _, code := range slices.Sorted(maps.Keys(q.Status)) {
		lines = append(lines, fmt.Sprintf("HTTP %d: %s (built-in: %s)", code, q.Status[code], failure.StatusClass(code)))
	}
	if len(q.Status) == 0 {
		lines = append(lines, "HTTP statuses: the built-in table (429 rate_limited; 408, 5xx transient; 401, 403 needs_auth; other 4xx permanent)")
	} else {
		lines = append(lines, "other HTTP statuses: the built-in table")
	}
	for i, r := range q.Rules {
		lines = append(lines, fmt.Sprintf("rule %d: message %s: %s", i+1, describeMessageRule(r), r.Class))
	}
	if q.Common {
		lines = append(lines, fmt.Sprintf("then the %d common message rules (--classify-common-rules)", len(failure.CommonMessageRules())))
	}
	if len(q.Rules) == 0 && !q.Common {
		lines = append(lines, "no message rules: an error nothing else recognises is unknown (retried)")
	} else {
		lines = append(lines, "a message no rule matches: unknown (retried)")
	}
	return lines
}

func describeMessageRule(r failure.Rule) string {
	if r.Contains != "" {
		return "contains " + strconv.Quote(r.Contains) + " (any case)"
	}
	return "matches /" + r.Regexp + "/"
}

// ClassifyJSON is a classification as `policy explain --json` writes it.
type ClassifyJSON struct {
	Queue       string            `json:"queue,omitempty"`
	OwnConfig   bool              `json:"own_config"`
	Status      map[string]string `json:"status"`
	Rules       []ruleJSON        `json:"rules"`
	CommonRules bool              `json:"common_rules"`
}

// ClassifyToJSON is the classification q of queue (own: the queue has
// one of its own) as `policy explain --json` writes it.
func ClassifyToJSON(queue string, own bool, q QueueClassify) ClassifyJSON {
	out := ClassifyJSON{Queue: queue, OwnConfig: own, Status: map[string]string{}, Rules: []ruleJSON{}, CommonRules: q.Common}
	for code, class := range q.Status {
		out.Status[strconv.Itoa(code)] = class.String()
	}
	for _, r := range q.Rules {
		out.Rules = append(out.Rules, ruleJSON{Contains: r.Contains, Regexp: r.Regexp, Class: r.Class.String()})
	}
	return out
}
