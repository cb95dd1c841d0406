package main

import (
	"context"
	"fmt"
	"io"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/redrivehq/redrive/bench"
)

// tracingModes parses the throughput workload's --tracing: "off", "always"
// (the always-on sampler) or a ratio in (0, 1] (a parent-based ratio
// sampler), each once, in the order given.
func tracingModes(modes []string) ([]string, error) {
	var out []string
	for _, m := range modes {
		m = strings.ToLower(strings.TrimSpace(m))
		switch m {
		case "off", "always":
		default:
			r, err := strconv.ParseFloat(m, 64)
			if err != nil || !(r > 0 && r <= 1) {
				return nil, fmt.Errorf("--tracing %q: want off, always or a sampling ratio in (0, 1]", m)
			}
			m = strconv.FormatFloat(r, 'g', -1, 64)
		}
		if slices.Contains(out, m) {
			return nil, fmt.Errorf("--tracing %q given twice", m)
		}
		out = append(out, m)
	}
	return out, nil
}

// discardExporter is a span exporter that drops the spans: the SDK's work
// (sampling, recording, the batch processor) is measured, not an
// exporter's I/O.
type discardExporter struct{}

func (discardExporter) ExportSpans(context.Context, []sdktrace.ReadOnlySpan) error { return nil }
func (discardExporter) Shutdown(context.Context) error                             { return nil }

// tracerFor returns the tracer provider of a --tracing mode, nil for off,
// and its shutdown.
func tracerFor(mode string) (*sdktrace.TracerProvider, error) {
	var sampler sdktrace.Sampler
	switch mode {
	case "off":
		return nil, nil
	case "always":
		sampler = sdktrace.AlwaysSample()
	default:
		r, err := strconv.ParseFloat(mode, 64)
		if err != nil {
			return nil, err
		}
		sampler = sdktrace.ParentBased(sdktrace.TraceIDRatioBased(r))
	}
	return sdktrace.NewTracerProvider(sdktrace.WithSampler(sampler), sdktrace.WithBatcher(discardExporter{})), nil
}

// tracingRun is one burn-down of the alternated tracing comparison.
type tracingRun struct {
	mode          string
	rate          float64
	allocsPerJob  float64
	bytesPerJobKB float64
	// cpuPerJob is the process's CPU time (user and system) from the
	// worker's start to the last handler call, over the jobs, in
	// microseconds; 0 when it could not be read.
	cpuPerJob float64
}

// processCPU returns the CPU time (user and system) this process used so
// far; false when it cannot be read.
func processCPU() (time.Duration, bool) {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0, false
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), true
}

// tracingWorkloads returns the throughput workloads of an alternated
// comparison of tracing modes: rounds times each mode in turn, each on a
// fresh database, and the runs they record.
func tracingWorkloads(n int, modes []string, rounds int) ([]workload, *[]tracingRun) {
	runs := &[]tracingRun{}
	var ws []workload
	for range rounds {
		for _, mode := range modes {
			ws = append(ws, func(ctx context.Context, cfg bench.Config) (bench.Result, error) {
				tp, err := tracerFor(mode)
				if err != nil {
					return nil, err
				}
				cfg.Tracing = mode
				if tp != nil {
					cfg.TracerProvider = tp
					defer tp.Shutdown(context.WithoutCancel(ctx))
				}
				// The burn-down's CPU time, the pre-insert's left out: the
				// rate is bounded by the store's commits as much as by CPU,
				// and the engine's own cost shows here.
				var cpu0, cpu1 time.Duration
				var cpuOK0, cpuOK1 bool
				started, done := cfg.WorkStarted, cfg.WorkDone
				cfg.WorkStarted = func() {
					if started != nil {
						started()
					}
					cpu0, cpuOK0 = processCPU()
				}
				cfg.WorkDone = func() {
					cpu1, cpuOK1 = processCPU()
					if done != nil {
						done()
					}
				}
				runtime.GC()
				var before, after runtime.MemStats
				runtime.ReadMemStats(&before)
				res, err := bench.Throughput(ctx, cfg, n)
				runtime.ReadMemStats(&after)
				if res != nil {
					r := tracingRun{mode: mode, rate: res.Rate,
						allocsPerJob:  float64(after.Mallocs-before.Mallocs) / float64(n),
						bytesPerJobKB: float64(after.TotalAlloc-before.TotalAlloc) / float64(n) / 1024}
					if cpuOK0 && cpuOK1 {
						r.cpuPerJob = float64((cpu1 - cpu0).Microseconds()) / float64(n)
					}
					*runs = append(*runs, r)
				}
				return result(res, err)
			})
		}
	}
	return ws, runs
}

// printTracingSummary writes each mode's burn-down rates, their median,
// its ratio to the median with tracing off, the allocations per job (the
// whole workload's, pre-insert included, over its jobs) and the median
// CPU time per job of the burn-down, with its ratio to off's.
func printTracingSummary(w io.Writer, modes []string, runs []tracingRun) {
	median := func(v []float64) float64 {
		if len(v) == 0 {
			return 0
		}
		s := slices.Clone(v)
		slices.Sort(s)
		if len(s)%2 == 1 {
			return s[len(s)/2]
		}
		return (s[len(s)/2-1] + s[len(s)/2]) / 2
	}
	med, medCPU := map[string]float64{}, map[string]float64{}
	fmt.Fprintln(w, "\ntracing: burn-down rate per mode (alternated runs)")
	for _, m := range modes {
		var rates, allocs, kb, cpu []float64
		for _, r := range runs {
			if r.mode == m {
				rates, allocs, kb = append(rates, r.rate), append(allocs, r.allocsPerJob), append(kb, r.bytesPerJobKB)
				if r.cpuPerJob > 0 {
					cpu = append(cpu, r.cpuPerJob)
				}
			}
		}
		medCPU[m] = median(cpu)
		med[m] = median(rates)
		parts := make([]string, len(rates))
		for i, r := range rates {
			parts[i] = strconv.FormatFloat(r, 'f', 0, 64)
		}
		vsOff := ""
		if off, ok := med["off"]; ok && off > 0 && m != "off" {
			vsOff = fmt.Sprintf("  %.3f of off", med[m]/off)
		}
		cpuFig := ""
		if medCPU[m] > 0 {
			cpuFig = fmt.Sprintf(", CPU %.1f µs", medCPU[m])
			if off := medCPU["off"]; off > 0 && m != "off" {
				cpuFig += fmt.Sprintf(" (%.3f of off)", medCPU[m]/off)
			}
		}
		fmt.Fprintf(w, "  %-7s median %7.0f jobs/s%s  (runs: %s)  %.0f allocs, %.1f KiB%s per job\n",
			m, med[m], vsOff, strings.Join(parts, ", "), median(allocs), median(kb), cpuFig)
	}
}
