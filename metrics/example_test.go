package metrics_test

import (
	"context"
	"fmt"
	"log"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/redrivehq/redrive"
	"github.com/redrivehq/redrive/metrics"
	"github.com/redrivehq/redrive/store/sqlite"
)

// Register the metrics `redrive serve` exposes on a program's own
// registry: the Observer feeds the attempt histograms from the worker, the
// Collector reads the store-wide counts and the worker's breakers at each
// scrape.
func Example() {
	dir, err := os.MkdirTemp("", "redrive-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	quiet := slog.New(slog.DiscardHandler)
	st, err := sqlite.Open(context.Background(), filepath.Join(dir, "redrive.db"), sqlite.Options{Logger: quiet})
	if err != nil {
		log.Fatal(err)
	}
	defer st.Close()
	client := redrive.NewClient(st, redrive.ClientOptions{Logger: quiet})

	observer := metrics.NewObserver("email") // the kinds this worker handles
	worker := redrive.NewWorker(client, redrive.WorkerOptions{
		Queues:   map[string]int{"default": 4},
		Observer: observer,
		Logger:   quiet,
	})
	worker.HandleFunc("email", func(ctx context.Context, j *redrive.Job) error { return nil })

	reg := prometheus.NewRegistry()
	reg.MustRegister(observer, metrics.NewCollector(client, metrics.CollectorOptions{Breakers: worker.Breakers(), Logger: quiet}))
	http.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))

	if _, err := client.Enqueue(context.Background(), "email", nil); err != nil {
		log.Fatal(err)
	}
	families, err := reg.Gather()
	if err != nil {
		log.Fatal(err)
	}
	for _, f := range families {
		if strings.HasPrefix(f.GetName(), "redrive_queue_") || f.GetName() == "redrive_jobs" {
			for _, m := range f.GetMetric() {
				labels := []string{}
				for _, l := range m.GetLabel() {
					labels = append(labels, l.GetName()+"="+l.GetValue())
				}
				if f.GetName() == "redrive_jobs" && m.GetGauge().GetValue() == 0 {
					continue
				}
				if f.GetName() == "redrive_queue_latency_seconds" {
					fmt.Println(f.GetName(), labels, m.GetGauge().GetValue() >= 0)
					continue
				}
				fmt.Println(f.GetName(), labels, m.GetGauge().GetValue())
			}
		}
	}
	// Output:
	// redrive_jobs [queue=default state=pending] 1
	// redrive_queue_latency_seconds [queue=default] true
	// redrive_queue_paused [queue=default] 0
	// redrive_queue_unconsumed [queue=default] 1
}
