package fingerprint

import "testing"

func TestNormalize(t *testing.T) {
	cases := []struct{ in, want string }{
		{"job 123 failed after 45ms", "job # failed after #ms"},
		{`Get "http://127.0.0.1:4567/x": dial tcp 127.0.0.1:4567: connect: connection refused`,
			`get "…": dial tcp #.#.#.#:#: connect: connection refused`},
		{"object 9f8e7d6c5b4a3928 not found", "object * not found"},
		{"request 3fa85f64-5717-4562-b3fc-2c963f66afa6 rejected", "request * rejected"},
		{"deadbeef is a word here", "deadbeef is a word here"}, // no digit: kept
		{"  many   spaces\tand\nlines ", "many spaces and lines"},
		{"unterminated 'quote 12", "unterminated 'quote #"},
		{"", ""},
	}
	for _, c := range cases {
		if got := Normalize(c.in); got != c.want {
			t.Errorf("Normalize(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}

func TestOfGroupsSameCause(t *testing.T) {
	a := Of("webhooks", "http", "transient", "http_503", `upstream "svc-a" returned 503 after 1200ms`)
	b := Of("webhooks", "http", "transient", "http_503", `upstream "svc-b" returned 503 after 980ms`)
	if a != b {
		t.Fatalf("same cause, different fingerprints: %s %s", a, b)
	}
	if c := Of("webhooks", "http", "permanent", "http_503", `upstream "svc-a" returned 503 after 1200ms`); c == a {
		t.Fatal("different class must give a different fingerprint")
	}
	if d := Of("webhooks", "http", "transient", "http_503", "connection refused"); d == a {
		t.Fatal("different message must give a different fingerprint")
	}
	// One cause in two queues or kinds: two groups (a group's redrive or
	// purge never crosses queues).
	if e := Of("default", "http", "transient", "http_503", `upstream "svc-a" returned 503 after 1200ms`); e == a {
		t.Fatal("different queue must give a different fingerprint")
	}
	if f := Of("webhooks", "email", "transient", "http_503", `upstream "svc-a" returned 503 after 1200ms`); f == a {
		t.Fatal("different kind must give a different fingerprint")
	}
	if Of("a\x00b", "c", "x", "y", "z") == Of("a", "b\x00c", "x", "y", "z") {
		t.Fatal("the parts are not separated")
	}
	if len(a) != 16 {
		t.Fatalf("fingerprint %q: want 16 hex digits", a)
	}
}

func FuzzNormalize(f *testing.F) {
	f.Add(`Get "http://x": 503`)
	f.Add("3fa85f64-5717-4562-b3fc-2c963f66afa6")
	f.Add("'\"`")
	f.Fuzz(func(t *testing.T, s string) {
		n := Normalize(s)
		if Normalize(n) != Normalize(Normalize(n)) {
			t.Fatalf("not stable: %q", s)
		}
	})
}
