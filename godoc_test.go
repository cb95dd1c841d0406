package redrive_test

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redrivehq/redrive"
	"github.com/redrivehq/redrive/store/sqlite"
)

// TestGoDocSnippets checks that the first snippet of docs/go.md and its
// Periodic snippet are, line for line, in the examples of
// example_godoc_test.go, which go test compiles and runs: once the first
// passed an int to KeyOf (which takes strings) and the second enqueued
// to a queue its worker did not work.
func TestGoDocSnippets(t *testing.T) {
	doc, err := os.ReadFile(filepath.Join("docs", "go.md"))
	if err != nil {
		t.Fatal(err)
	}
	src, err := os.ReadFile("example_godoc_test.go")
	if err != nil {
		t.Fatal(err)
	}
	have := map[string]bool{}
	for _, l := range strings.Split(string(src), "\n") {
		have[squash(l)] = true
	}
	// The lines the examples write otherwise, with why.
	setup := map[string]string{
		squash(`st, err := sqlite.Open(ctx, "redrive.db", sqlite.Options{}) // WAL, fsync on commit`): "the example's database is in a temporary folder",
		squash(`client := redrive.NewClient(st, redrive.ClientOptions{})`):                            "the example's client logs nothing",
		squash(`go worker.Run(ctx) // until ctx ends; then a graceful shutdown`):                      "the example waits for Run to return",
	}
	blocks := goBlocks(string(doc))
	if len(blocks) < 5 {
		t.Fatalf("docs/go.md: %d go blocks, want more", len(blocks))
	}
	checked := 0
	for _, b := range blocks {
		if !strings.Contains(b, "redrive.KeyOf(") && !strings.Contains(b, "Periodic: []redrive.Periodic{") {
			continue
		}
		checked++
		for _, l := range strings.Split(b, "\n") {
			s := squash(l)
			if s == "" || setup[s] != "" {
				continue
			}
			if !have[s] {
				t.Errorf("docs/go.md: snippet line not in example_godoc_test.go (go test does not check it):\n%s", l)
			}
		}
	}
	if checked != 2 {
		t.Errorf("docs/go.md: %d snippets checked, want 2 (the first and Periodic)", checked)
	}
}

// goBlocks returns the ```go blocks of a Markdown text.
func goBlocks(md string) []string {
	var blocks []string
	for {
		i := strings.Index(md, "```go\n")
		if i < 0 {
			return blocks
		}
		md = md[i+len("```go\n"):]
		j := strings.Index(md, "```")
		if j < 0 {
			return blocks
		}
		blocks = append(blocks, md[:j])
		md = md[j:]
	}
}

// squash trims a line and collapses its runs of white space.
func squash(l string) string { return strings.Join(strings.Fields(l), " ") }

// lockedBuffer is a bytes.Buffer safe for concurrent writes.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestRunWarnsOfUnworkedSchedules: Run logs a warning naming a schedule
// that enqueues to a queue the worker does not work, and one whose kind
// it has no handler for (serve refuses both; a Go worker may leave them
// to another process, so it warns).
func TestRunWarnsOfUnworkedSchedules(t *testing.T) {
	ctx := context.Background()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	st, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "redrive.db"), sqlite.Options{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	client := redrive.NewClient(st, redrive.ClientOptions{Logger: quiet})
	var logs lockedBuffer
	w := redrive.NewWorker(client, redrive.WorkerOptions{
		Logger: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelWarn})),
		Periodic: []redrive.Periodic{
			{Name: "beat", Every: time.Hour, Kind: "beat", Options: []redrive.Option{redrive.InQueue("ops")}},
			{Name: "fine", Every: time.Hour, Kind: "beat"},
			{Name: "nohandler", Every: time.Hour, Kind: "other"},
		},
	})
	w.HandleFunc("beat", func(context.Context, *redrive.Job) error { return nil })
	runCtx, cancel := context.WithCancel(ctx)
	cancel() // Run warns as it starts, then stops at once
	if err := w.Run(runCtx); err != nil {
		t.Fatal(err)
	}
	out := logs.String()
	for _, want := range []string{
		`schedule=beat queue=ops worker_queues=[default]`,
		`schedule=nohandler kind=other worker_kinds=[beat]`,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("Run's log lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "schedule=fine") {
		t.Errorf("Run warned of a schedule its worker runs:\n%s", out)
	}
}
