package main

import (
	"fmt"
	"net/url"
	"os"
	"regexp"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/redrivehq/redrive/internal/config"
	"github.com/redrivehq/redrive/retry"
	"github.com/redrivehq/redrive/rhttp"
)

// newPolicyCmd is `redrive policy`: retry policies.
func newPolicyCmd(g *globalOptions) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "policy",
		Short: "Inspect retry policies",
		Args:  cobra.NoArgs,
	}
	cmd.AddCommand(newPolicyExplainCmd(g))
	return cmd
}

// policyFlags maps each retry.Policy field to its flag, so that errors
// from Policy.Validate name what the user typed.
var policyFlags = map[string]string{
	"MaxRetries":    "--max-retries",
	"Initial":       "--initial",
	"Multiplier":    "--multiplier",
	"MaxDelay":      "--max-delay",
	"Jitter":        "--jitter",
	"JitterFactor":  "--jitter-factor",
	"JitterMax":     "--jitter-max",
	"MaxRetryAfter": "--max-retry-after",
}

var policyFieldRE = regexp.MustCompile(`\b(MaxRetries|Initial|Multiplier|MaxDelay|Jitter|JitterFactor|JitterMax|MaxRetryAfter)\b`)

// newPolicyExplainCmd is `redrive policy explain`: the schedule a policy
// produces.
func newPolicyExplainCmd(g *globalOptions) *cobra.Command {
	// p holds the short flags (--max-retries, --initial, ...); those given
	// override the policy that serve's settings make.
	p := retry.DefaultPolicy()
	jitter := p.Jitter.String()
	var queue, dependency, target string
	cmd := &cobra.Command{
		Use:   "explain",
		Short: "Print the retry schedule a policy produces, the classification and the breaker",
		Long: `Print the retry schedule a policy produces: one row per retry with its base
delay, the range jitter gives it and the cumulative time since the first
failure.

The policy is the one serve would use: its --retry-* flags, REDRIVE_RETRY_*
variables and config file (--config or $REDRIVE_CONFIG, its "retry" object),
with --queue the policy of that queue of the file's "queues" object. The
short flags (--max-retries, --initial, ...) override it. With none of them,
redrive's defaults: 3 retries, 1s initial, x2, 30s cap, +-10% proportional
jitter, Retry-After honoured up to 1h.

Then the classification of failures on the queue (--classify-* settings,
and the queue's "classify" object in the config file) and a breaker's
settings (--breaker-* settings and --breaker-dependencies): with
--dependency that dependency's, with --url the breaker an http job to that
URL goes through, else the default one.

With --json, print the policy and its schedule, durations in milliseconds,
the classification and the breaker.`,
		Example: `  redrive policy explain
  redrive policy explain --max-retries 5 --initial 500ms --jitter full
  redrive policy explain --jitter additive --jitter-max 250ms --json
  redrive policy explain --config serve.json --queue webhooks
  redrive policy explain --retry-max-retries 10 --retry-max 5m
  redrive policy explain --config serve.json --queue webhooks --url https://api.pay.example/charge
  redrive policy explain --classify-status 404=transient --breaker-failures 10 --dependency payments`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := config.Load(cmd.Flags(), os.Getenv)
			if err != nil {
				return &usageError{cmd: cmd, err: err}
			}
			base := cfg.Retry
			if queue != "" {
				if qp, ok := cfg.QueueRetry[queue]; ok {
					base = qp
				} else {
					fmt.Fprintf(cmd.ErrOrStderr(), "note: queue %s has no retry policy of its own in the config: it gets the default policy\n", shellQuote(queue))
				}
			}
			j, err := retry.ParseJitter(jitter)
			if err != nil {
				return flagErrorf(cmd, "invalid --jitter %q: want none, proportional, full, equal, decorrelated or additive", jitter)
			}
			p.Jitter = j
			// The short flags given win over the settings.
			f := cmd.Flags()
			for name, set := range map[string]func(){
				"max-retries": func() { base.MaxRetries = p.MaxRetries }, "initial": func() { base.Initial = p.Initial },
				"multiplier": func() { base.Multiplier = p.Multiplier }, "max-delay": func() { base.MaxDelay = p.MaxDelay },
				"jitter": func() { base.Jitter = p.Jitter }, "jitter-factor": func() { base.JitterFactor = p.JitterFactor },
				"jitter-max": func() { base.JitterMax = p.JitterMax }, "max-retry-after": func() { base.MaxRetryAfter = p.MaxRetryAfter },
			} {
				if f.Changed(name) {
					set()
				}
			}
			p := base
			if err := validatePolicy(p); err != nil {
				return &usageError{cmd: cmd, err: err}
			}
			if dependency != "" && target != "" {
				return flagErrorf(cmd, "give --dependency or --url, not both")
			}
			cls, ownCls := cfg.Classify.ForQueue(queue)
			dep, configured, hostNote, err := explainBreaker(cfg, dependency, target)
			if err != nil {
				return &usageError{cmd: cmd, err: err}
			}
			out := cmd.OutOrStdout()
			if g.JSON {
				o := explainJSON(p)
				cj := config.ClassifyToJSON(queue, ownCls, cls)
				bj := config.BreakerToJSON(dep, configured)
				o.Classification, o.Breaker = &cj, &bj
				return writeJSON(out, o)
			}
			var b strings.Builder
			b.WriteString(p.Explain())
			what := "default"
			if queue != "" {
				what = "queue " + shellQuote(queue)
				if !ownCls {
					what += ", the default"
				}
			}
			fmt.Fprintf(&b, "classification (%s):\n", what)
			for _, line := range config.DescribeClassify(cls) {
				fmt.Fprintf(&b, "  %s\n", line)
			}
			fmt.Fprintf(&b, "breaker %s%s:\n", shellQuote(dep.Name), hostNote)
			for _, line := range config.DescribeBreaker(dep.Config) {
				fmt.Fprintf(&b, "  %s\n", line)
			}
			_, err = fmt.Fprint(out, b.String())
			return err
		},
	}
	f := cmd.Flags()
	f.IntVar(&p.MaxRetries, "max-retries", p.MaxRetries, "retries after the first attempt (3 means 4 attempts)")
	f.DurationVar(&p.Initial, "initial", p.Initial, "delay before the first retry")
	f.Float64Var(&p.Multiplier, "multiplier", p.Multiplier, "growth factor of the delay from one retry to the next (>= 1)")
	f.DurationVar(&p.MaxDelay, "max-delay", p.MaxDelay, "cap on the delay before jitter (>= --initial)")
	f.StringVar(&jitter, "jitter", jitter, "jitter: none, proportional, full, equal, decorrelated or additive")
	f.Float64Var(&p.JitterFactor, "jitter-factor", p.JitterFactor, "spread of proportional jitter, 0 to 1 (0.1 = +-10%)")
	f.DurationVar(&p.JitterMax, "jitter-max", p.JitterMax, "largest amount additive jitter adds")
	f.DurationVar(&p.MaxRetryAfter, "max-retry-after", p.MaxRetryAfter, "clamp on a server's Retry-After")
	f.StringVar(&queue, "queue", "", "the policy and classification of this queue (its \"retry\" and \"classify\" objects in the config file's \"queues\")")
	f.StringVar(&dependency, "dependency", "", "show the breaker of this dependency (default: the default breaker)")
	f.StringVar(&target, "url", "", "show the breaker an http job to this URL goes through")
	config.AddPolicyFlags(f)
	return cmd
}

// validatePolicy is Policy.Validate with the fields named by their flags.
func validatePolicy(p retry.Policy) error {
	err := p.Validate()
	if err == nil {
		return nil
	}
	var lines []string
	for line := range strings.SplitSeq(err.Error(), "\n") {
		line = strings.TrimPrefix(line, "retry: invalid policy: ")
		lines = append(lines, policyFieldRE.ReplaceAllStringFunc(line, func(f string) string { return policyFlags[f] }))
	}
	if len(lines) == 1 {
		return fmt.Errorf("invalid policy: %s", lines[0])
	}
	return fmt.Errorf("invalid policy:\n  %s", strings.Join(lines, "\n  "))
}

// policyJSON is a retry.Policy as `policy explain --json` writes it.
type policyJSON struct {
	MaxRetries      int     `json:"max_retries"`
	MaxAttempts     int     `json:"max_attempts"`
	InitialMS       float64 `json:"initial_ms"`
	Multiplier      float64 `json:"multiplier"`
	MaxDelayMS      float64 `json:"max_delay_ms"`
	Jitter          string  `json:"jitter"`
	JitterFactor    float64 `json:"jitter_factor"`
	JitterMaxMS     float64 `json:"jitter_max_ms"`
	MaxRetryAfterMS float64 `json:"max_retry_after_ms"`
}

// stepJSON is one retry.Step, durations in milliseconds.
type stepJSON struct {
	Retry        int     `json:"retry"`
	AfterAttempt int     `json:"after_attempt"`
	BaseMS       float64 `json:"base_ms"`
	MinMS        float64 `json:"min_ms"`
	MaxMS        float64 `json:"max_ms"`
	CumMinMS     float64 `json:"cumulative_min_ms"`
	CumMaxMS     float64 `json:"cumulative_max_ms"`
}

// explainOutput is the JSON of `policy explain --json`.
type explainOutput struct {
	Policy   policyJSON `json:"policy"`
	Schedule []stepJSON `json:"schedule"`
	// Truncated is set when the policy has more retries than the schedule
	// shows (retry.MaxScheduleSteps).
	Truncated bool `json:"truncated"`
	// Classification is the classification of failures on the queue.
	Classification *config.ClassifyJSON `json:"classification,omitempty"`
	// Breaker is the breaker shown (--dependency, --url or the default).
	Breaker *config.BreakerJSON `json:"breaker,omitempty"`
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func explainJSON(p retry.Policy) explainOutput {
	out := explainOutput{Policy: policyJSON{
		MaxRetries: p.MaxRetries, MaxAttempts: p.MaxRetries + 1, InitialMS: ms(p.Initial), Multiplier: p.Multiplier,
		MaxDelayMS: ms(p.MaxDelay), Jitter: p.Jitter.String(), JitterFactor: p.JitterFactor,
		JitterMaxMS: ms(p.JitterMax), MaxRetryAfterMS: ms(p.MaxRetryAfter),
	}, Schedule: []stepJSON{}}
	for _, s := range p.Schedule() {
		out.Schedule = append(out.Schedule, stepJSON{Retry: s.Retry, AfterAttempt: s.AfterAttempt, BaseMS: ms(s.Base),
			MinMS: ms(s.Min), MaxMS: ms(s.Max), CumMinMS: ms(s.CumMin), CumMaxMS: ms(s.CumMax)})
	}
	out.Truncated = len(out.Schedule) < p.MaxRetries
	return out
}

// explainBreaker finds the breaker `policy explain` shows: the dependency
// named (a configured one, or one with the default settings), the breaker
// an http job to target goes through, or the default. It also returns a
// note on which http jobs use it, and whether it is configured by name.
func explainBreaker(cfg *config.Serve, dependency, target string) (config.DependencyBreaker, bool, string, error) {
	switch {
	case target != "":
		u, err := url.Parse(target)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return config.DependencyBreaker{}, false, "", fmt.Errorf("--url %q: want an http or https URL", target)
		}
		if !cfg.Breakers.HTTP {
			d := config.DependencyBreaker{Name: "none", Config: cfg.Breakers.Default}
			return d, false, " (http jobs go through no breaker: --breaker-http is off; the default settings)", nil
		}
		if name := cfg.Breakers.HTTPDependency(u); name != "" {
			d, _ := cfg.Breakers.Dependency(name)
			return d, true, fmt.Sprintf(" (dependency of http jobs to %s)", strings.Join(d.Hosts, ", ")), nil
		}
		d := config.DependencyBreaker{Name: rhttp.HostKey(u), Config: cfg.Breakers.Default}
		return d, false, " (the host's own breaker, default settings)", nil
	case dependency != "":
		d, ok := cfg.Breakers.Dependency(dependency)
		if !ok {
			return d, false, " (not configured: the default settings)", nil
		}
		if len(d.Hosts) > 0 {
			return d, true, fmt.Sprintf(" (also http jobs to %s)", strings.Join(d.Hosts, ", ")), nil
		}
		return d, true, "", nil
	}
	d := config.DependencyBreaker{Name: "default", Config: cfg.Breakers.Default}
	note := " (every dependency not configured by name"
	if cfg.Breakers.HTTP {
		note += ", and one per http host"
	}
	note += ")"
	if len(cfg.Breakers.Dependencies) > 0 {
		names := make([]string, len(cfg.Breakers.Dependencies))
		for i, dep := range cfg.Breakers.Dependencies {
			names[i] = dep.Name
		}
		note += "; configured: " + strings.Join(names, ", ")
	}
	return d, false, note, nil
}
