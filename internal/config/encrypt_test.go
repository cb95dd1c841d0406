package config

import (
	"bytes"
	"encoding/base64"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestPayloadKeys: serve reads the payload keys from a file or the
// environment, builds the policy of encrypt-queues, and says clearly
// what is wrong with a bad key list, naming the line.
func TestPayloadKeys(t *testing.T) {
	k := func(b byte) string { return base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{b}, 32)) }
	dir := t.TempDir()
	n := 0
	file := func(body string) string {
		n++
		p := filepath.Join(dir, fmt.Sprint("keys", n))
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	c, err := loadConfig(t, nil, "--payload-keys-file", file("# keys\nk2:"+k(2)+"\nk1:"+k(1)+"\n"), "--encrypt-queues", "pay,bill")
	if err != nil {
		t.Fatal(err)
	}
	if c.Payloads == nil || c.Payloads.Current() != "k2" || !c.Payloads.Seals("pay") || c.Payloads.Seals("other") {
		t.Fatalf("policy %+v", c.Payloads)
	}
	c, err = loadConfig(t, map[string]string{"REDRIVE_PAYLOAD_KEYS": "a:" + k(3), "REDRIVE_ENCRYPT_QUEUES": "*"})
	if err != nil || !c.Payloads.Seals("anything") || c.Payloads.Current() != "a" {
		t.Fatalf("env: %+v %v", c, err)
	}
	if c, err := loadConfig(t, nil); err != nil || c.Payloads != nil {
		t.Fatalf("no keys: %+v %v", c.Payloads, err)
	}
	for _, bad := range []struct {
		args []string
		env  map[string]string
		want string
	}{
		{[]string{"--payload-keys-file", file("k1:" + base64.StdEncoding.EncodeToString(make([]byte, 24)))}, nil, "line 1: key \"k1\": key is 24 bytes, not 32"},
		{[]string{"--payload-keys-file", file("k1:%%%")}, nil, "line 1: key \"k1\": bad base64"},
		{[]string{"--payload-keys-file", file("k1:" + k(1) + "\n\nk1:" + k(2))}, nil, `line 3: duplicate key id "k1"`},
		{[]string{"--payload-keys-file", file("# nothing\n")}, nil, "no current key"},
		{[]string{"--payload-keys-file", filepath.Join(dir, "absent")}, nil, "no such file"},
		{[]string{"--encrypt-queues", "pay"}, nil, "encrypt-queues needs payload keys"},
		{[]string{"--encrypt-queues", "a/b"}, map[string]string{"REDRIVE_PAYLOAD_KEYS": "a:" + k(3)}, "encrypt-queues"},
		{[]string{"--payload-keys-file", file("k1:" + k(1))}, map[string]string{"REDRIVE_PAYLOAD_KEYS": "a:" + k(3)}, "not both"},
	} {
		_, err := loadConfig(t, bad.env, bad.args...)
		if err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("%v %v: %v, want %q", bad.args, bad.env, err, bad.want)
		}
		if err != nil && strings.Contains(err.Error(), k(1)) {
			t.Errorf("the error shows a key: %v", err)
		}
	}
}
