package config

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/minio/minio-go/v7/pkg/credentials"

	"github.com/redrivehq/redrive/download"
	"github.com/redrivehq/redrive/internal/strictjson"
)

// Download is what `serve --download-dir` sets up: the built-in
// download kind, which writes the files its jobs fetch under Dir.
type Download struct {
	// Dir is the absolute directory downloads are written under; empty:
	// the kind is off, and serve refuses download jobs at enqueue.
	Dir string
	// MaxBytes bounds one file (0: the kind's default); a payload's
	// max_bytes may only lower it.
	MaxBytes int64
	// Sources are the S3-compatible stores download jobs read s3://
	// URLs from, by name (--download-sources).
	Sources map[string]download.S3Source
	// CheckpointBytes is the bytes between two checkpoints (0: the
	// kind's default).
	CheckpointBytes int64
	// RecordSHA256 hashes every file to record its digest.
	RecordSHA256 bool
}

// DownloadDirSetting names the setting that turns the download kind on,
// in the refusal of download jobs while it is off.
const DownloadDirSetting = "--download-dir (or $REDRIVE_DOWNLOAD_DIR)"

// downloadSettings are the settings of the built-in download kind.
var downloadSettings = []setting{
	{name: "download-dir", help: "directory the built-in download kind writes its files under (created if missing; empty: the kind is off and download jobs are refused at enqueue); http jobs' --http-allow-private and --http-allow-link-local apply to downloads too", apply: func(c *Serve, v string) error {
		if v != "" && strings.TrimSpace(v) == "" {
			return errors.New("a path of white space only")
		}
		if strings.ContainsRune(v, 0) {
			return errors.New("the path contains a NUL byte")
		}
		c.Download.Dir = v
		return nil
	}},
	{name: "download-sources", help: `S3-compatible stores that download jobs read s3://bucket/key URLs from, naming one in their payload's "source": a JSON object of source names to {"endpoint" (required, e.g. "https://s3.eu-west-1.amazonaws.com" or "http://127.0.0.1:9000"), "region" (default us-east-1), "addressing" ("path", the default, or "virtual-host"), and the credentials, never in a payload: "access_key_env" and "secret_key_env" (and "session_token_env"), names of serve's environment variables holding them; or "profile" (and "credentials_file") of the shared AWS credentials file; or "anonymous": true; with none of these, the standard AWS variables (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN) then the AWS_PROFILE (or default) profile of ~/.aws/credentials}, e.g. {"lake":{"endpoint":"http://127.0.0.1:9000","access_key_env":"LAKE_ACCESS_KEY","secret_key_env":"LAKE_SECRET_KEY"}}`, apply: func(c *Serve, v string) error {
		srcs, err := parseDownloadSources(v)
		c.Download.Sources = srcs
		return err
	}},
	{name: "download-checkpoint-bytes", def: "0", help: "bytes a download writes between two checkpoints (fsync of the partial file and its sidecar), the most re-fetched after a machine restart (0: the kind's default, 64 MiB)", apply: func(c *Serve, v string) error {
		n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
		if err != nil || n < 0 {
			return fmt.Errorf("%q: want a whole number of bytes, 0 or more", v)
		}
		c.Download.CheckpointBytes = n
		return nil
	}},
	{name: "download-record-sha256", def: "false", bool: true, help: "hash every downloaded file and record its SHA-256 in the job's history (default: hash only when the job gives a sha256 or the S3 store a checksum, which saves most of the CPU)", apply: func(c *Serve, v string) error {
		b, err := parseBool(v)
		c.Download.RecordSHA256 = b
		return err
	}},
	{name: "download-max-bytes", def: "0", help: "largest file one download job may write, in bytes (0: the kind's default); a job's max_bytes may only lower it", apply: func(c *Serve, v string) error {
		n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
		if err != nil || n < 0 {
			return fmt.Errorf("%q: want a whole number of bytes, 0 or more", v)
		}
		c.Download.MaxBytes = n
		return nil
	}},
}

// resolveDownload checks the download directory once every source is
// merged: it must be a directory this process can write to, created
// (with its parents) when missing. src names where the setting came from
// ("--download-dir", "REDRIVE_DOWNLOAD_DIR", "redrive.json: download-dir").
func resolveDownload(c *Serve, src string) error {
	if c.Download.Dir == "" {
		return nil
	}
	if src == "" {
		src = "download-dir"
	}
	dir, err := checkDownloadDir(c.Download.Dir)
	if err != nil {
		return fmt.Errorf("%s: %w", src, err)
	}
	c.Download.Dir = dir
	return nil
}

// checkDownloadDir makes dir absolute, creates it when missing and checks
// that it is a directory that files can be created in.
func checkDownloadDir(dir string) (string, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return "", fmt.Errorf("%s: %w", dir, err)
	}
	fi, err := os.Stat(abs)
	switch {
	case errors.Is(err, os.ErrNotExist):
		if err := os.MkdirAll(abs, 0o750); err != nil {
			return "", fmt.Errorf("%s does not exist and cannot be created: %w", abs, pathCause(err))
		}
	case err != nil:
		return "", fmt.Errorf("%s: %w", abs, pathCause(err))
	case !fi.IsDir():
		return "", fmt.Errorf("%s is not a directory", abs)
	}
	// Writable: the kind writes a temporary file and renames it.
	f, err := os.CreateTemp(abs, ".redrive-check-*")
	if err != nil {
		return "", fmt.Errorf("%s is not writable: %w", abs, pathCause(err))
	}
	name := f.Name()
	f.Close()
	if err := os.Remove(name); err != nil {
		return "", fmt.Errorf("%s: remove the check file %s: %w", abs, name, err)
	}
	return abs, nil
}

// pathCause is the cause of a file system error without the path, which
// the message already names.
func pathCause(err error) error {
	if pe, ok := errors.AsType[*os.PathError](err); ok {
		return pe.Err
	}
	return err
}

// maxDownloadSources bounds the sources of --download-sources.
const maxDownloadSources = 100

// sourceNameRE is what a source's name may be.
var sourceNameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$`)

// envNameRE is what an environment variable's name may be.
var envNameRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,127}$`)

// sourceSpec is one source of the download-sources setting.
type sourceSpec struct {
	Endpoint        string `json:"endpoint"`
	Region          string `json:"region"`
	Addressing      string `json:"addressing"`
	AccessKeyEnv    string `json:"access_key_env"`
	SecretKeyEnv    string `json:"secret_key_env"`
	SessionTokenEnv string `json:"session_token_env"`
	Profile         string `json:"profile"`
	CredentialsFile string `json:"credentials_file"`
	Anonymous       bool   `json:"anonymous"`
}

// sourceFields lists the fields of a source, for errors.
const sourceFields = "endpoint, region, addressing, access_key_env, secret_key_env, session_token_env, profile, credentials_file, anonymous"

// parseDownloadSources parses the download-sources setting. An error
// names the source and the field. Credentials are looked up when a job
// names the source (a source without them refuses its jobs at enqueue),
// never read from the setting itself.
func parseDownloadSources(v string) (map[string]download.S3Source, error) {
	if strings.TrimSpace(v) == "" {
		return nil, nil
	}
	var raw map[string]json.RawMessage
	if err := json.Unmarshal([]byte(v), &raw); err != nil || raw == nil {
		return nil, fmt.Errorf(`want a JSON object of source names to sources, e.g. {"lake":{"endpoint":"http://127.0.0.1:9000","access_key_env":"LAKE_ACCESS_KEY","secret_key_env":"LAKE_SECRET_KEY"}}, got %s`, clipJSON([]byte(v)))
	}
	if err := strictjson.Check([]byte(v), nil); err != nil {
		return nil, err
	}
	if len(raw) > maxDownloadSources {
		return nil, fmt.Errorf("%d sources, the limit is %d", len(raw), maxDownloadSources)
	}
	out := make(map[string]download.S3Source, len(raw))
	for _, name := range slices.Sorted(maps.Keys(raw)) {
		src, err := parseDownloadSource(name, raw[name])
		if err != nil {
			return nil, err
		}
		out[name] = src
	}
	return out, nil
}

// parseDownloadSource parses one source.
func parseDownloadSource(name string, raw json.RawMessage) (download.S3Source, error) {
	if !sourceNameRE.MatchString(name) {
		return download.S3Source{}, fmt.Errorf("source name %q: want 1 to 64 letters, digits, '_', '.' or '-', starting with a letter or digit", clipJSON([]byte(name)))
	}
	bad := func(field, format string, args ...any) (download.S3Source, error) {
		return download.S3Source{}, fmt.Errorf("source %q: %s: %s", name, field, fmt.Sprintf(format, args...))
	}
	var s sourceSpec
	if err := strictjson.Decode(raw, &s); err != nil {
		var ute *json.UnmarshalTypeError
		if errors.As(err, &ute) && ute.Field != "" {
			return bad(ute.Field, "want a %s, got a JSON %s", ute.Type, ute.Value)
		}
		return download.S3Source{}, fmt.Errorf("source %q: want an object of %s: %w", name, sourceFields, err)
	}
	if s.Endpoint == "" {
		return bad("endpoint", "required: the store's URL, e.g. https://s3.eu-west-1.amazonaws.com or http://127.0.0.1:9000")
	}
	if _, err := download.ParseS3Endpoint(s.Endpoint); err != nil {
		return bad("endpoint", "%v", err)
	}
	src := download.S3Source{Endpoint: s.Endpoint, Region: s.Region, Anonymous: s.Anonymous}
	if strings.ContainsFunc(s.Region, func(r rune) bool { return !(r == '-' || r >= 'a' && r <= 'z' || r >= '0' && r <= '9') }) {
		return bad("region", "%q: want a region name such as us-east-1", s.Region)
	}
	switch s.Addressing {
	case "", "path":
	case "virtual-host":
		src.VirtualHost = true
	default:
		return bad("addressing", `%q: want "path" (http://host/bucket/key) or "virtual-host" (http://bucket.host/key)`, s.Addressing)
	}
	for field, env := range map[string]string{"access_key_env": s.AccessKeyEnv, "secret_key_env": s.SecretKeyEnv, "session_token_env": s.SessionTokenEnv} {
		if env != "" && !envNameRE.MatchString(env) {
			// Not quoted: what is here instead of a name may be the key.
			return bad(field, "not the name of an environment variable (%d characters; want letters, digits and '_'): the name goes here, never the key", len(env))
		}
	}
	byEnv := s.AccessKeyEnv != "" || s.SecretKeyEnv != "" || s.SessionTokenEnv != ""
	byFile := s.Profile != "" || s.CredentialsFile != ""
	switch {
	case s.Anonymous && (byEnv || byFile):
		return bad("anonymous", "an anonymous source sends no credentials: leave out access_key_env, secret_key_env, session_token_env, profile and credentials_file")
	case byEnv && byFile:
		return bad("profile", "give the credentials either through environment variables (access_key_env, secret_key_env) or a profile, not both")
	case byEnv && (s.AccessKeyEnv == "" || s.SecretKeyEnv == ""):
		return bad("secret_key_env", "access_key_env and secret_key_env go together")
	case s.Anonymous:
	case byEnv:
		src.Credentials = credentials.New(&envKeys{access: s.AccessKeyEnv, secret: s.SecretKeyEnv, token: s.SessionTokenEnv})
		src.CredentialsFrom = "$" + s.AccessKeyEnv + " and $" + s.SecretKeyEnv + " in serve's environment"
	case byFile:
		src.Credentials = credentials.NewFileAWSCredentials(s.CredentialsFile, s.Profile)
		file := s.CredentialsFile
		if file == "" {
			file = "$AWS_SHARED_CREDENTIALS_FILE or ~/.aws/credentials"
		}
		profile := s.Profile
		if profile == "" {
			profile = "$AWS_PROFILE or default"
		}
		src.CredentialsFrom = "profile " + profile + " of " + file
	default:
		src.Credentials = credentials.NewChainCredentials([]credentials.Provider{&credentials.EnvAWS{}, &credentials.FileAWSCredentials{}})
		src.CredentialsFrom = "$AWS_ACCESS_KEY_ID and $AWS_SECRET_ACCESS_KEY in serve's environment, or the $AWS_PROFILE (or default) profile of ~/.aws/credentials"
	}
	return src, nil
}

// envKeys is a credentials provider reading the keys from the named
// environment variables, once.
type envKeys struct {
	access, secret, token string
	retrieved             bool
}

// Retrieve reads the keys.
func (e *envKeys) Retrieve() (credentials.Value, error) {
	e.retrieved = true
	v := credentials.Value{AccessKeyID: os.Getenv(e.access), SecretAccessKey: os.Getenv(e.secret), SignerType: credentials.SignatureV4}
	if e.token != "" {
		v.SessionToken = os.Getenv(e.token)
	}
	if v.AccessKeyID == "" || v.SecretAccessKey == "" {
		v.SignerType = credentials.SignatureAnonymous
	}
	return v, nil
}

// RetrieveWithCredContext is Retrieve.
func (e *envKeys) RetrieveWithCredContext(*credentials.CredContext) (credentials.Value, error) {
	return e.Retrieve()
}

// IsExpired reports whether the keys are still to be read.
func (e *envKeys) IsExpired() bool { return !e.retrieved }
