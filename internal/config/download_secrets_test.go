package config

import (
	"strings"
	"testing"

	"github.com/redrivehq/redrive/download"
)

// TestDownloadSourcesErrorsHideKeys: a --download-sources value that puts
// the keys where they do not belong (in the endpoint's user information,
// in access_key_env or secret_key_env instead of a variable's name) is
// refused with an error that names the field but never shows the keys,
// whatever check fails first; so is a Handler's source.
func TestDownloadSourcesErrorsHideKeys(t *testing.T) {
	const access, secret = "AKIDREVIEW37", "wJalr/REVIEW37+secretKEY"
	for _, v := range []string{
		`{"x":{"endpoint":"ftp://` + access + `:` + secret + `@h:9000"}}`,
		`{"x":{"endpoint":"http://` + access + `:` + secret + `@h:9000/%zz"}}`,
		`{"x":{"endpoint":"http://` + access + `:` + secret + `@h:9000"}}`,
		`{"x":{"endpoint":"http://` + access + `@h:9000"}}`,
		`{"x":{"endpoint":"http://h","access_key_env":"LAKE_KEY","secret_key_env":"` + secret + `"}}`,
		`{"x":{"endpoint":"http://h","access_key_env":"` + access + `/x","secret_key_env":"LAKE_SECRET"}}`,
		`{"x":{"endpoint":"http://h","session_token_env":"` + secret + `","access_key_env":"A","secret_key_env":"B"}}`,
	} {
		c, err := loadConfig(t, map[string]string{"REDRIVE_DOWNLOAD_SOURCES": v})
		if err == nil {
			t.Errorf("%s: accepted (%+v)", v, c.Download.Sources)
			continue
		}
		for _, s := range []string{access, secret, "REVIEW37+secret"} {
			if strings.Contains(err.Error(), s) {
				t.Errorf("%s: the error shows a key: %v", v, err)
			}
		}
	}
	for _, ep := range []string{"ftp://" + access + ":" + secret + "@h", "http://" + access + ":" + secret + "@h/%zz", "http://" + access + "@h"} {
		_, err := download.New(download.Options{Dir: t.TempDir(), Sources: map[string]download.S3Source{"x": {Endpoint: ep}}})
		if err == nil || strings.Contains(err.Error(), access) || strings.Contains(err.Error(), secret) {
			t.Errorf("download.New of endpoint %s: %v", ep, err)
		}
	}
}

// FuzzDownloadSources: the --download-sources parser never panics, and
// what it accepts is sources of valid names whose endpoints the download
// kind takes, with credentials unless anonymous.
func FuzzDownloadSources(f *testing.F) {
	for _, s := range []string{``, `{}`, `null`, `[]`, `{"lake":{"endpoint":"http://127.0.0.1:9000","access_key_env":"K","secret_key_env":"S"}}`,
		`{"a":{"endpoint":"https://h","profile":"p","credentials_file":"/x"}}`, `{"p":{"endpoint":"http://h","anonymous":true}}`,
		`{"x":{"endpoint":"http://h","addressing":"virtual-host","region":"eu-west-1"}}`, `{"x":{"endpoint":"http://h"},"x":{}}`,
		`{"x":{"endpoint":"http://k:s@h"}}`, `{"":{"endpoint":"http://h"}}`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		srcs, err := parseDownloadSources(v)
		if err != nil {
			return
		}
		for name, src := range srcs {
			if !sourceNameRE.MatchString(name) {
				t.Fatalf("%s: source name %q accepted", v, name)
			}
			if _, err := download.ParseS3Endpoint(src.Endpoint); err != nil {
				t.Fatalf("%s: endpoint %q accepted: %v", v, src.Endpoint, err)
			}
			if src.Anonymous == (src.Credentials != nil) {
				t.Fatalf("%s: source %q anonymous %v with credentials %v", v, name, src.Anonymous, src.Credentials != nil)
			}
		}
	})
}
