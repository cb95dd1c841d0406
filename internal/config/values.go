package config

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/redrivehq/redrive/download"
	"github.com/redrivehq/redrive/httpjob"
)

// Log formats of --log-format.
const (
	LogFormatAuto = "auto"
	LogFormatText = "text"
	LogFormatJSON = "json"
)

// ParseLogFormat parses a --log-format value: text, json or auto ("" is
// auto).
func ParseLogFormat(v string) (string, error) {
	switch f := strings.ToLower(strings.TrimSpace(v)); f {
	case "", LogFormatAuto:
		return LogFormatAuto, nil
	case LogFormatText, LogFormatJSON:
		return f, nil
	}
	return "", fmt.Errorf("%q: want text, json or auto", v)
}

// RedactURL hides the password of a URL; a key=value connection string
// is reduced to its host and database.
func RedactURL(s string) string {
	if u, err := url.Parse(s); err == nil && u.Scheme != "" {
		return u.Redacted()
	}
	cfg, err := pgx.ParseConfig(s)
	if err != nil {
		return "(connection string)"
	}
	return fmt.Sprintf("host=%s dbname=%s", cfg.Host, cfg.Database)
}

// ParseKafkaBrokers parses a comma-separated list of host:port.
func ParseKafkaBrokers(v string) ([]string, error) {
	var out []string
	for b := range strings.SplitSeq(v, ",") {
		b = strings.TrimSpace(b)
		if b == "" {
			continue
		}
		host, port, err := net.SplitHostPort(b)
		if n, perr := strconv.Atoi(port); err != nil || host == "" || perr != nil || n < 1 || n > 65535 {
			return nil, fmt.Errorf("%q: want host:port (e.g. localhost:9092)", clipArg(b))
		}
		out = append(out, b)
	}
	if len(out) == 0 {
		return nil, errors.New("no broker: want host:port,... (e.g. localhost:9092)")
	}
	return out, nil
}

// Kinds are the kinds serve's worker handles, for the attempt
// histograms' kind label.
func (cfg *Serve) Kinds() []string {
	kinds := []string{httpjob.Kind}
	if cfg.Download.Dir != "" {
		kinds = append(kinds, download.Kind)
	}
	return kinds
}

// clipArg shortens a value quoted in an error to one line of at most 64
// characters.
func clipArg(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	if r := []rune(s); len(r) > 64 {
		s = string(r[:63]) + "…"
	}
	return s
}

// ms is a duration in milliseconds.
func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
