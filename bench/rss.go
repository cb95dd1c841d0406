package bench

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"strconv"
	"sync"
	"time"
)

// ReadRSS returns the resident set size of this process in bytes, read
// from /proc/self/status (VmRSS). It fails where /proc is not available.
func ReadRSS() (int64, error) {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0, fmt.Errorf("bench: read RSS: %w", err)
	}
	return parseVmRSS(b)
}

// parseVmRSS finds the "VmRSS:   12345 kB" line of a /proc status file.
func parseVmRSS(status []byte) (int64, error) {
	sc := bufio.NewScanner(bytes.NewReader(status))
	for sc.Scan() {
		line := sc.Bytes()
		rest, ok := bytes.CutPrefix(line, []byte("VmRSS:"))
		if !ok {
			continue
		}
		f := bytes.Fields(rest)
		if len(f) != 2 || string(f[1]) != "kB" {
			return 0, fmt.Errorf("bench: read RSS: unexpected line %q", line)
		}
		kb, err := strconv.ParseInt(string(f[0]), 10, 64)
		if err != nil {
			return 0, fmt.Errorf("bench: read RSS: unexpected line %q", line)
		}
		return kb << 10, nil
	}
	return 0, fmt.Errorf("bench: read RSS: no VmRSS line in /proc/self/status")
}

// rssSampler reads the RSS every interval in the background and keeps the
// largest value seen, overall and since the last phase mark.
type rssSampler struct {
	mu         sync.Mutex
	max, phase int64
	samples    int
	err        error
	stop, done chan struct{}
}

func startRSS(interval time.Duration) *rssSampler {
	s := &rssSampler{stop: make(chan struct{}), done: make(chan struct{})}
	s.sample()
	go func() {
		defer close(s.done)
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			select {
			case <-s.stop:
				return
			case <-t.C:
				s.sample()
			}
		}
	}()
	return s
}

func (s *rssSampler) sample() {
	v, err := ReadRSS()
	s.mu.Lock()
	defer s.mu.Unlock()
	if err != nil {
		s.err = err
		return
	}
	s.samples++
	s.max, s.phase = max(s.max, v), max(s.phase, v)
}

// mark takes a sample, returns the largest RSS seen since the previous
// mark (or the start) and starts a new phase.
func (s *rssSampler) mark() int64 {
	s.sample()
	s.mu.Lock()
	defer s.mu.Unlock()
	m := s.phase
	s.phase = 0
	return m
}

// finish stops the sampler and returns the largest RSS seen, the number
// of samples taken and the first read error.
func (s *rssSampler) finish() (maxRSS int64, samples int, err error) {
	close(s.stop)
	<-s.done
	s.sample()
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.max, s.samples, s.err
}
