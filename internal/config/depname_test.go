package config

import "testing"

// TestDependencyNameRule: the dependencies of breaker-dependencies (and
// of a config file's breaker object) follow the one name rule of
// store.CheckName, as every other name serve's settings give.
func TestDependencyNameRule(t *testing.T) {
	for _, name := range []string{"a/b", "..", "\u200d", "x\u3164"} {
		v := `{"` + name + `":{"hosts":["api.example.com"]}}`
		if _, _, err := parseDependencies(v); err == nil {
			t.Errorf("dependency %q accepted", name)
		}
	}
	if _, _, err := parseDependencies(`{"payments":{"hosts":["api.example.com"]}}`); err != nil {
		t.Fatal(err)
	}
}
