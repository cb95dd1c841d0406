package server

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"net/http"
	"regexp"
)

// Role is what a token may do through the API and the dashboard. Each role
// includes the ones below it, except RoleWorker: the worker protocol is the
// worker's and the admin's alone (see Allows).
type Role int

// The roles, from least to most.
const (
	// RoleNone marks a route that needs no token at all (health checks,
	// the dashboard's page and assets).
	RoleNone Role = iota
	// RoleRead sees everything the API and the dashboard show, and
	// changes nothing.
	RoleRead
	// RoleWorker is RoleRead plus the worker protocol (/v1/worker/...):
	// leasing jobs, whose payloads it gets whole, secrets included, and
	// reporting their outcomes. It is for worker processes in other
	// languages, and may not enqueue nor change anything else. RoleOperate
	// does not include it: an operate token may not read secrets
	// (reveal=true is the admin's), so it may not lease jobs either.
	RoleWorker
	// RoleOperate is RoleRead plus enqueue, cancel (of a job that is not
	// dead), redrive, run now, priority, pause and resume (queues and
	// operations), breakers and limits.
	RoleOperate
	// RoleAdmin is RoleOperate plus editing payloads (a redrive with a
	// payload), purge, canceling a dead job, export, replay and
	// schedules.
	RoleAdmin
)

// String returns the role's name: read, worker, operate or admin ("none"
// for RoleNone).
func (r Role) String() string {
	switch r {
	case RoleRead:
		return "read"
	case RoleWorker:
		return "worker"
	case RoleOperate:
		return "operate"
	case RoleAdmin:
		return "admin"
	}
	return "none"
}

// ParseRole parses a role's name: read, worker, operate or admin.
func ParseRole(s string) (Role, error) {
	switch s {
	case "read":
		return RoleRead, nil
	case "worker":
		return RoleWorker, nil
	case "operate":
		return RoleOperate, nil
	case "admin":
		return RoleAdmin, nil
	}
	return RoleNone, fmt.Errorf("role %q: want read, worker, operate or admin", s)
}

// Token is one named token of the API: its name (shown by the dashboard
// and recorded by the audit log), its role, and the SHA-256 of its secret
// (the secret itself is never kept). Tokens made by NewToken carry 256
// random bits, so a fast hash is as strong as a slow one: no one can
// search that space, and checking a request costs no more than a hash.
type Token struct {
	Name   string
	Role   Role
	SHA256 [sha256.Size]byte
}

// LegacyTokenName is the name of Options.Token, the single token of
// --token, which is an admin token.
const LegacyTokenName = "admin"

// tokenNameRE is what a token's name may be: it is shown in the
// dashboard, written in the audit log and carried in the session cookie.
var tokenNameRE = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)

// CheckTokenName reports whether name may name a token: 1 to 64 letters,
// digits, _ or -.
func CheckTokenName(name string) error {
	if !tokenNameRE.MatchString(name) {
		return fmt.Errorf("token name %q: want 1 to 64 letters, digits, _ or -", name)
	}
	return nil
}

// tokenPrefix starts every token NewToken makes, so that a leaked one is
// recognizable (by secret scanners, in logs).
const tokenPrefix = "rdt_"

// NewToken returns a new random token (256 bits, base64url, after the
// prefix rdt_) and its SHA-256, as Token.SHA256 wants it.
func NewToken() (secret string, sum [sha256.Size]byte, err error) {
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", sum, fmt.Errorf("server: no random bytes: %w", err)
	}
	secret = tokenPrefix + base64.RawURLEncoding.EncodeToString(b[:])
	return secret, sha256.Sum256([]byte(secret)), nil
}

// ParseTokenHash parses the hex SHA-256 of a token.
func ParseTokenHash(s string) ([sha256.Size]byte, error) {
	var sum [sha256.Size]byte
	b, err := hex.DecodeString(s)
	if err != nil || len(b) != sha256.Size {
		return sum, fmt.Errorf("%q: want the SHA-256 of the token as 64 hex digits", s)
	}
	copy(sum[:], b)
	return sum, nil
}

// principal is who a request comes from: the token's name and role. A
// server without tokens sees every request as an anonymous admin.
type principal struct {
	name string
	role Role
}

// anonymous is the principal of every request to a server without tokens.
var anonymous = principal{name: "", role: RoleAdmin}

type principalKey struct{}

func withPrincipal(ctx context.Context, p principal) context.Context {
	return context.WithValue(ctx, principalKey{}, p)
}

// principalOf returns the request's principal; requests the auth layer
// has not seen (a server without tokens) are anonymous admins.
func principalOf(ctx context.Context) principal {
	if p, ok := ctx.Value(principalKey{}).(principal); ok {
		return p
	}
	return anonymous
}

// lookupToken finds the token whose secret is tok, comparing hashes in
// constant time and going through every token whatever it finds.
func (a *api) lookupToken(tok string) (Token, bool) {
	sum := sha256.Sum256([]byte(tok))
	var found Token
	ok := false
	for _, t := range a.tokens {
		if subtle.ConstantTimeCompare(sum[:], t.SHA256[:]) == 1 {
			found, ok = t, true
		}
	}
	return found, ok
}

// tokenNamed returns the token of that name.
func (a *api) tokenNamed(name string) (Token, bool) {
	for _, t := range a.tokens {
		if t.Name == name {
			return t, true
		}
	}
	return Token{}, false
}

// routeRoles is the role each route needs. Every route of routes and
// dashboardRoutes has one: TestRouteRoles checks each route of the
// OpenAPI document against every role.
var routeRoles = map[string]Role{
	"POST /v1/jobs":                     RoleOperate,
	"POST /v1/jobs/batch":               RoleOperate,
	"POST /v1/jobs/cancel":              RoleOperate,
	"GET /v1/jobs":                      RoleRead,
	"GET /v1/jobs/{id}":                 RoleRead,
	"POST /v1/jobs/{id}/cancel":         RoleOperate, // and admin for a dead job (cancelJob)
	"POST /v1/jobs/{id}/priority":       RoleOperate,
	"POST /v1/jobs/{id}/run":            RoleOperate,
	"GET /v1/dlq":                       RoleRead,
	"DELETE /v1/dlq":                    RoleAdmin,
	"GET /v1/dlq/groups":                RoleRead,
	"POST /v1/dlq/redrive":              RoleOperate, // and admin with a payload (redrive)
	"GET /v1/dlq/export":                RoleAdmin,
	"GET /v1/operations":                RoleRead,
	"GET /v1/operations/{id}":           RoleRead,
	"DELETE /v1/operations/{id}":        RoleOperate,
	"POST /v1/operations/{id}/pause":    RoleOperate,
	"POST /v1/operations/{id}/resume":   RoleOperate,
	"POST /v1/operations/{id}/cancel":   RoleOperate,
	"POST /v1/replay":                   RoleAdmin,
	"POST /v1/dlq/export":               RoleAdmin,
	"GET /v1/stats":                     RoleRead,
	"GET /v1/stats/series":              RoleRead,
	"GET /v1/queues":                    RoleRead,
	"GET /v1/workers":                   RoleRead,
	"POST /v1/queues/{name}/pause":      RoleOperate,
	"POST /v1/queues/{name}/resume":     RoleOperate,
	"GET /v1/schedules":                 RoleRead,
	"GET /v1/schedules/{name}":          RoleRead,
	"DELETE /v1/schedules/{name}":       RoleAdmin,
	"POST /v1/schedules/{name}/pause":   RoleAdmin,
	"POST /v1/schedules/{name}/resume":  RoleAdmin,
	"POST /v1/schedules/{name}/trigger": RoleAdmin,
	"GET /v1/breakers":                  RoleRead,
	"GET /v1/limits":                    RoleRead,
	"PUT /v1/limits/{name}":             RoleOperate,
	"POST /v1/breakers/{name}/open":     RoleOperate,
	"POST /v1/breakers/{name}/reset":    RoleOperate,
	"DELETE /v1/breakers/{name}":        RoleOperate,
	"GET /v1/amqp/queues":               RoleRead,
	"GET /v1/kafka/topics":              RoleRead,
	"GET /v1/openapi.json":              RoleRead,
	"GET /healthz":                      RoleNone,
	"GET /readyz":                       RoleNone,
	"GET /v1/jobs/count":                RoleRead,
	"GET /v1/dlq/count":                 RoleRead,
	"GET /v1/audit":                     RoleRead,

	"POST /v1/workflows":             RoleOperate,
	"POST /v1/workflows/batch":       RoleOperate,
	"GET /v1/workflows":              RoleRead,
	"GET /v1/workflows/{id}":         RoleRead,
	"POST /v1/workflows/{id}/cancel": RoleOperate,
	"POST /v1/workflows/{id}/jobs":   RoleOperate,
	// The worker protocol (worker.go).
	"POST /v1/worker/lease":             RoleWorker,
	"POST /v1/worker/heartbeat":         RoleWorker,
	"POST /v1/worker/cancels":           RoleWorker,
	"POST /v1/worker/outcomes":          RoleWorker,
	"POST /v1/worker/jobs/{id}/outcome": RoleWorker,
	"POST /v1/worker/stop":              RoleWorker,

	"GET /{$}":        RoleNone,
	"GET /ui/":        RoleNone,
	"POST /ui/login":  RoleNone,
	"POST /ui/logout": RoleNone,
}

// Allows reports whether a token of role r may use a route that needs
// role need: r at or above need, except that a route of the worker
// protocol (need RoleWorker) is the worker's and the admin's alone.
func (r Role) Allows(need Role) bool {
	if need == RoleWorker {
		return r == RoleWorker || r == RoleAdmin
	}
	return r >= need
}

// forbidden is the answer to a request whose token's role does not allow
// need.
func forbidden(p principal, need Role, what string) *apiError {
	named := need.String()
	if need == RoleWorker {
		named = "worker (or admin)"
	}
	return &apiError{status: http.StatusForbidden, code: "forbidden",
		msg: fmt.Sprintf("%s needs the %s role: the token %q has the %s role", what, named, p.name, p.role)}
}

// require refuses, 403 forbidden, a request whose principal's role does
// not allow need.
func (a *api) require(pattern string, need Role, next http.Handler) http.Handler {
	if need <= RoleRead {
		// Every token may read; the auth layer has already refused
		// requests without one.
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if p := principalOf(r.Context()); !p.role.Allows(need) {
			writeError(w, forbidden(p, need, pattern))
			return
		}
		next.ServeHTTP(w, r)
	})
}
