package failure

import (
	"errors"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"
)

// Rule classifies errors whose message matches a pattern. Rules are the last
// resort before Unknown: they only see errors that no explicit wrapper,
// HTTP status or known Go/network error type classified.
//
// Exactly one of Contains and Regexp must be set.
type Rule struct {
	// Class is the class of a matching error. Any failure class is
	// allowed, Unknown included (to stop later rules from matching); None
	// (the zero value) is refused.
	Class Class
	// Contains matches when err.Error() contains it, ignoring case.
	Contains string
	// Regexp matches when the Go regular expression finds a match in
	// err.Error(). It is case-sensitive unless it starts with (?i).
	Regexp string
}

// pattern returns the rule's pattern, whichever field holds it.
func (r Rule) pattern() string {
	if r.Contains != "" {
		return r.Contains
	}
	return r.Regexp
}

// Config configures a Classifier. The zero Config classifies like the
// package-level Classify.
type Config struct {
	// Status overrides StatusClass for the listed codes (100-599). An
	// override of 503 also disables the rule that makes a 503 carrying a
	// Retry-After RateLimited.
	Status map[int]Class
	// Rules are tried in order against the error's message; the first
	// match wins.
	Rules []Rule
}

// CommonMessageRules returns rules for errors that carry no type or status,
// only a message: the substrings job systems commonly list as retryable
// and non-retryable, retryable patterns first (so "timeout: not found" is
// transient):
//
//	"context deadline exceeded", "connection refused", "timeout",
//	"temporary failure", "upstream timeout"            Transient
//	"rate limited", "upstream rate limit"              RateLimited
//	"invalid argument", "not found", "conflict",
//	"schema invalid"                                   Permanent
//	"authentication failed", "authorization failed"    NeedsAuth
//
// Lists of that kind usually know only retryable and non-retryable: here
// the rate-limit patterns are RateLimited rather than Transient (still
// retried, and reported as what they are), and the authentication and
// authorization patterns NeedsAuth rather than Permanent (still not
// retried, but dead-lettered with reason needs_auth so an operator knows
// to fix credentials). All patterns are case-insensitive substrings. Each call
// returns a new slice that the caller may modify.
func CommonMessageRules() []Rule {
	return []Rule{
		{Class: Transient, Contains: "context deadline exceeded"},
		{Class: Transient, Contains: "connection refused"},
		{Class: Transient, Contains: "timeout"},
		{Class: Transient, Contains: "temporary failure"},
		{Class: RateLimited, Contains: "rate limited"},
		{Class: Transient, Contains: "upstream timeout"},
		{Class: RateLimited, Contains: "upstream rate limit"},
		{Class: Permanent, Contains: "invalid argument"},
		{Class: Permanent, Contains: "not found"},
		{Class: Permanent, Contains: "conflict"},
		{Class: Permanent, Contains: "schema invalid"},
		{Class: NeedsAuth, Contains: "authentication failed"},
		{Class: NeedsAuth, Contains: "authorization failed"},
	}
}

// Classifier classifies errors according to a Config. Build one with
// NewClassifier; it is immutable and safe for concurrent use. A nil
// *Classifier is valid and behaves like the package-level Classify.
type Classifier struct {
	status  map[int]Class
	rules   []compiledRule
	anyFold bool // some rule is a Contains rule
}

type compiledRule struct {
	class  Class
	lower  string         // lower-cased Contains, or ""
	re     *regexp.Regexp // compiled Regexp, or nil
	reason string         // ReasonRulePrefix + pattern
}

// NewClassifier validates and compiles cfg. It reports every invalid
// status override (code outside 100-599, undefined class) and every invalid
// rule (undefined class, neither or both of Contains and Regexp set, a
// regexp that does not compile), naming the rule by index and pattern.
// cfg is copied: changing it afterwards does not affect the Classifier.
func NewClassifier(cfg Config) (*Classifier, error) {
	var errs []error
	c := &Classifier{}
	if len(cfg.Status) > 0 {
		c.status = make(map[int]Class, len(cfg.Status))
		for _, code := range slices.Sorted(maps.Keys(cfg.Status)) {
			class := cfg.Status[code]
			switch {
			case code < 100 || code > 599:
				errs = append(errs, fmt.Errorf("failure: status override %d: not an HTTP status code (want 100-599)", code))
			case class == None:
				errs = append(errs, fmt.Errorf("failure: status override %d: no class (None is not a failure class)", code))
			case class > NeedsAuth:
				errs = append(errs, fmt.Errorf("failure: status override %d: undefined class %d", code, uint8(class)))
			default:
				c.status[code] = class
			}
		}
	}
	for i, r := range cfg.Rules {
		cr, err := compileRule(r)
		if err != nil {
			errs = append(errs, fmt.Errorf("failure: rule %d %s: %w", i, describeRule(r), err))
			continue
		}
		if cr.lower != "" {
			c.anyFold = true
		}
		c.rules = append(c.rules, cr)
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return c, nil
}

func describeRule(r Rule) string {
	switch {
	case r.Contains != "" && r.Regexp != "":
		return fmt.Sprintf("(contains %q, regexp %q)", r.Contains, r.Regexp)
	case r.Contains != "":
		return fmt.Sprintf("(contains %q)", r.Contains)
	case r.Regexp != "":
		return fmt.Sprintf("(regexp %q)", r.Regexp)
	}
	return "(empty)"
}

func compileRule(r Rule) (compiledRule, error) {
	if r.Class == None {
		return compiledRule{}, errors.New("no class (None is not a failure class; Unknown stops later rules)")
	}
	if r.Class > NeedsAuth {
		return compiledRule{}, fmt.Errorf("undefined class %d", uint8(r.Class))
	}
	switch {
	case r.Contains == "" && r.Regexp == "":
		return compiledRule{}, errors.New("neither Contains nor Regexp is set")
	case r.Contains != "" && r.Regexp != "":
		return compiledRule{}, errors.New("both Contains and Regexp are set; use one per rule")
	}
	cr := compiledRule{class: r.Class, reason: ReasonRulePrefix + r.pattern()}
	if r.Contains != "" {
		cr.lower = strings.ToLower(r.Contains)
		return cr, nil
	}
	re, err := regexp.Compile(r.Regexp)
	if err != nil {
		return compiledRule{}, fmt.Errorf("invalid regexp: %w", err)
	}
	cr.re = re
	return cr, nil
}

// match returns the first rule matching msg, or nil.
func (c *Classifier) match(msg string) *compiledRule {
	var lower string
	if c.anyFold {
		lower = strings.ToLower(msg)
	}
	for i := range c.rules {
		r := &c.rules[i]
		if r.re != nil {
			if r.re.MatchString(msg) {
				return r
			}
		} else if strings.Contains(lower, r.lower) {
			return r
		}
	}
	return nil
}

// statusClass returns the class of an HTTP status code and whether it came
// from an override.
func (c *Classifier) statusClass(code int) (Class, bool) {
	if c != nil {
		if class, ok := c.status[code]; ok {
			return class, true
		}
	}
	return StatusClass(code), false
}
