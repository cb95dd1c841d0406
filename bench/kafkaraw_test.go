package bench

import (
	"errors"
	"testing"

	"github.com/twmb/franz-go/pkg/kadm"
)

// TestTopicReady: a topic is ready for the Kafka phases only with all its
// partitions listed, each with a leader and no error.
func TestTopicReady(t *testing.T) {
	part := func(p, leader int32, err error) kadm.PartitionDetail {
		return kadm.PartitionDetail{Partition: p, Leader: leader, Err: err}
	}
	ready := kadm.TopicDetail{Partitions: kadm.PartitionDetails{0: part(0, 1, nil), 1: part(1, 2, nil)}}
	for _, tc := range []struct {
		name string
		d    kadm.TopicDetail
		want bool
	}{
		{"ready", ready, true},
		{"not listed", kadm.TopicDetail{}, false},
		{"topic error", kadm.TopicDetail{Err: errors.New("unknown"), Partitions: ready.Partitions}, false},
		{"a partition missing", kadm.TopicDetail{Partitions: kadm.PartitionDetails{0: part(0, 1, nil)}}, false},
		{"no leader", kadm.TopicDetail{Partitions: kadm.PartitionDetails{0: part(0, 1, nil), 1: part(1, -1, nil)}}, false},
		{"partition error", kadm.TopicDetail{Partitions: kadm.PartitionDetails{0: part(0, 1, nil), 1: part(1, 1, errors.New("x"))}}, false},
	} {
		if got := topicReady(tc.d, 2); got != tc.want {
			t.Errorf("%s: topicReady = %v, want %v", tc.name, got, tc.want)
		}
	}
}

// TestStamps: the first and the n-th of n events are timed, from the
// start, whatever the goroutines adding them.
func TestStamps(t *testing.T) {
	s := newStamps(50)
	done := make(chan struct{})
	for range 5 {
		go func() {
			for range 10 {
				s.add()
			}
			done <- struct{}{}
		}()
	}
	for range 5 {
		<-done
	}
	first, last := s.times()
	if !s.done() || s.count.Load() != 50 || first < 0 || last < first {
		t.Errorf("done %v, count %d, first %s, last %s", s.done(), s.count.Load(), first, last)
	}
	if ratio(3, 0) != 0 || ratio(3, 2) != 1.5 {
		t.Errorf("ratio: %v, %v", ratio(3, 0), ratio(3, 2))
	}
}
