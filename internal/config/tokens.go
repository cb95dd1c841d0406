package config

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/redrivehq/redrive/internal/strictjson"
	"github.com/redrivehq/redrive/server"
)

// maxTokens bounds the tokens of serve's configuration.
const maxTokens = 1000

// tokenSettings are the named tokens of the API: the "tokens" object of
// the config file, or --tokens and $REDRIVE_TOKENS as a list.
var tokenSettings = []setting{
	{name: "tokens", help: `named API tokens, each with a role (read, worker, operate or admin) and the SHA-256 of the token (made by "redrive token new"): a JSON object {"alice": {"role": "read", "sha256": "<64 hex digits>"}}, or a comma-separated list name:role:sha256`, apply: func(c *Serve, v string) error {
		ts, err := ParseTokens(v)
		c.Tokens = ts
		return err
	}},
}

// tokenSpec is one token of the "tokens" object.
type tokenSpec struct {
	Role   string `json:"role"`
	SHA256 string `json:"sha256"`
}

// ParseTokens parses the "tokens" setting: a JSON object of token names
// to {"role", "sha256"}, or a comma-separated list of name:role:sha256
// (the environment's and the flag's form). Names are unique and not
// "admin", the name of --token's token.
func ParseTokens(v string) ([]server.Token, error) {
	v = strings.TrimSpace(v)
	if v == "" {
		return nil, nil
	}
	type named struct {
		name string
		spec tokenSpec
	}
	var list []named
	if v[0] == '{' {
		if err := strictjson.Check([]byte(v), nil); err != nil {
			return nil, err
		}
		var m map[string]json.RawMessage
		if err := json.Unmarshal([]byte(v), &m); err != nil {
			return nil, fmt.Errorf("not a JSON object of token names to {\"role\", \"sha256\"}: %w", err)
		}
		names := make([]string, 0, len(m))
		for n := range m {
			names = append(names, n)
		}
		slices.Sort(names)
		for _, n := range names {
			var s tokenSpec
			if err := strictjson.Decode(m[n], &s); err != nil {
				return nil, fmt.Errorf("token %q: want {\"role\": \"read|worker|operate|admin\", \"sha256\": \"...\"}: %w", n, err)
			}
			list = append(list, named{n, s})
		}
	} else {
		for _, item := range strings.Split(v, ",") {
			parts := strings.Split(strings.TrimSpace(item), ":")
			if len(parts) != 3 {
				return nil, fmt.Errorf("%q: want name:role:sha256", item)
			}
			list = append(list, named{parts[0], tokenSpec{Role: parts[1], SHA256: parts[2]}})
		}
	}
	if len(list) > maxTokens {
		return nil, fmt.Errorf("%d tokens: at most %d", len(list), maxTokens)
	}
	var out []server.Token
	seen := map[string]bool{}
	hashes := map[[32]byte]string{}
	for _, n := range list {
		if err := server.CheckTokenName(n.name); err != nil {
			return nil, err
		}
		if n.name == server.LegacyTokenName {
			return nil, fmt.Errorf("token name %q is the name of --token's token: choose another", n.name)
		}
		if seen[n.name] {
			return nil, fmt.Errorf("token %q is given twice", n.name)
		}
		seen[n.name] = true
		role, err := server.ParseRole(n.spec.Role)
		if err != nil {
			return nil, fmt.Errorf("token %q: %w", n.name, err)
		}
		sum, err := server.ParseTokenHash(n.spec.SHA256)
		if err != nil {
			return nil, fmt.Errorf("token %q: sha256 %w", n.name, err)
		}
		if other, dup := hashes[sum]; dup {
			return nil, fmt.Errorf("tokens %q and %q have the same sha256: one token, two names", other, n.name)
		}
		hashes[sum] = n.name
		out = append(out, server.Token{Name: n.name, Role: role, SHA256: sum})
	}
	if len(out) == 0 {
		return nil, errors.New("no token: leave the setting out instead")
	}
	return out, nil
}
