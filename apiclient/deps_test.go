package apiclient_test

import (
	"os/exec"
	"strings"
	"testing"
)

// TestImportGraph: a program that imports apiclient pulls in no store,
// broker client or server: only the engine's light packages.
func TestImportGraph(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".").CombinedOutput()
	if err != nil {
		t.Skipf("go list: %v: %s", err, out)
	}
	for _, dep := range strings.Fields(string(out)) {
		for _, banned := range []string{
			"github.com/jackc/", "github.com/rabbitmq/", "github.com/twmb/", "modernc.org/sqlite",
			"github.com/redrivehq/redrive/server", "github.com/redrivehq/redrive/store/", "github.com/redrivehq/redrive/amqp",
			"github.com/redrivehq/redrive/kafka", "github.com/prometheus/", "github.com/spf13/",
		} {
			if strings.HasPrefix(dep, banned) {
				t.Errorf("apiclient depends on %s", dep)
			}
		}
	}
}
