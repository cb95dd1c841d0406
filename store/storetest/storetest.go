// Package storetest is the conformance suite every redrive store must pass.
//
// A store's own tests call Run with a function that opens a new, empty,
// isolated store for each subtest:
//
//	func TestConformance(t *testing.T) {
//		storetest.Run(t, func(t *testing.T) store.Store {
//			s, err := mystore.Open(t.Context(), filepath.Join(t.TempDir(), "db"))
//			if err != nil {
//				t.Fatal(err)
//			}
//			return s
//		})
//	}
//
// The suite checks the contract of package store, its doc comments first.
// It relies on these conventions, which every store must therefore meet:
//
//   - Time: the suite never reads the wall clock and never sleeps. Every
//     time it passes is a fixed base (2026-01-02 03:04:05.678901 UTC) plus
//     an offset, sometimes expressed in another time zone. The times carry
//     microseconds and nothing finer, so a store must keep at least
//     microsecond precision; the suite compares times with time.Time.Equal
//     after truncating both to the microsecond, so a store may drop
//     nanoseconds and may return times in any location.
//   - JSON: payloads and policies are compared as JSON values, not as
//     bytes, so a store may re-encode them (as PostgreSQL's jsonb does). A
//     nil Policy may come back as nil or as JSON null.
//   - Durations in events are whole milliseconds, since Duration travels
//     as milliseconds.
//   - Fetch may return jobs without their History; Get must include it.
//   - Subtests run in parallel, each on its own store, which the suite
//     closes when the subtest ends. The whole suite takes a few seconds
//     on an embedded store.
package storetest

import (
	"errors"
	"testing"

	"github.com/redrivehq/redrive/store"
)

// subtest is one conformance check, run on a fresh store.
type subtest struct {
	name string
	fn   func(x *h)
}

// subtests lists the suite in a stable order.
var subtests = []subtest{
	{"EnqueueFields", testEnqueueFields},
	{"JobResult", testJobResult},
	{"EnqueueRunAt", testEnqueueRunAt},
	{"EnqueueInvalid", testEnqueueInvalid},
	{"EnqueueIDsIncrease", testEnqueueIDsIncrease},
	{"Idempotency", testIdempotency},
	{"IdempotencyBatch", testIdempotencyBatch},
	{"IdempotencyConcurrent", testIdempotencyConcurrent},
	{"IdempotencyKeyKept", testIdempotencyKeyKept},
	{"IdempotencyKeyKeptRace", testIdempotencyKeyKeptRace},
	{"Fetch", testFetch},
	{"FetchConcurrent", testFetchConcurrent},
	{"EnqueueFlood", testEnqueueFlood},
	{"FetchAhead", testFetchAhead},
	{"PriorityOrder", testPriorityOrder},
	{"PriorityTies", testPriorityTies},
	{"PriorityModel", testPriorityModel},
	{"PriorityBehindBacklog", testPriorityBehindBacklog},
	{"SetPriority", testSetPriority},
	{"SetPriorityConcurrent", testSetPriorityConcurrent},
	{"RunNow", testRunNow},
	{"RunNowConcurrent", testRunNowConcurrent},
	{"RunNowOverdue", testRunNowOverdue},
	{"RunNowRaces", testRunNowRaces},
	{"PayloadMatchNUL", testPayloadMatchNUL},
	{"PriorityModelLevels", testPriorityModelLevels},
	{"PriorityKept", testPriorityKept},
	{"PriorityDueTimes", testPriorityDueTimes},
	{"TimeZones", testTimeZones},
	{"NextDue", testNextDue},
	{"FinishComplete", testFinishComplete},
	{"FinishRetry", testFinishRetry},
	{"FinishBury", testFinishBury},
	{"FinishSnooze", testFinishSnooze},
	{"FinishRelease", testFinishRelease},
	{"FinishCancel", testFinishCancel},
	{"FinishDuration", testFinishDuration},
	{"FinishClassNone", testFinishClassNone},
	{"FinishLastDelay", testFinishLastDelay},
	{"FailedBeforeSuccess", testFailedBeforeSuccess},
	{"Fencing", testFencing},
	{"FencingBatch", testFencingBatch},
	{"FencingCompletions", testFencingCompletions},
	{"FencingSnoozeABA", testFencingSnoozeABA},
	{"FencingReleaseABA", testFencingReleaseABA},
	{"RescueRenewed", testRescueRenewed},
	{"CancelSurvives", testCancelSurvives},
	{"FinishInvalidAtomic", testFinishInvalidAtomic},
	{"FinishMixedBatch", testFinishMixedBatch},
	{"RedriveRepeated", testRedriveRepeated},
	{"LeaseModel", testLeaseModel},
	{"LeaseModelMixed", testLeaseModelMixed},
	{"LeaseConcurrent", testLeaseConcurrent},
	{"FencingCompletionsRandom", testFencingCompletionsRandom},
	{"Heartbeat", testHeartbeat},
	{"Progress", testProgress},
	{"ProgressOutcomes", testProgressOutcomes},
	{"CancelRequested", testCancelRequested},
	{"Expired", testExpired},
	{"RescueKilledWorker", testRescueKilledWorker},
	{"GetNotFound", testGetNotFound},
	{"ListFilters", testListFilters},
	{"ListPagination", testListPagination},
	{"ListPaginationDead", testListPaginationDead},
	{"ListCursorInvalid", testListCursorInvalid},
	{"ListErrorContainsUnicode", testListErrorContainsUnicode},
	{"ListErrorPrefix", testListErrorPrefix},
	{"Groups", testGroups},
	{"DeadCountsModel", testDeadCountsModel},
	{"DeadCountsConcurrent", testDeadCountsConcurrent},
	{"DeadPagesFilters", testDeadPagesFilters},
	{"Cancel", testCancel},
	{"Redrive", testRedrive},
	{"RedrivePreviousPayload", testRedrivePreviousPayload},
	{"Purge", testPurge},
	{"DeleteFinished", testDeleteFinished},
	{"Stats", testStats},
	{"Snapshots", testSnapshots},
	{"SnapshotsMany", testSnapshotsMany},
	{"SnapshotsConcurrent", testSnapshotsConcurrent},
	{"Close", testClose},
	{"Lifecycle", testLifecycle},
	{"LargeDLQ", testLargeDLQ},
	{"QueuesPause", testQueuesPause},
	{"QueuesListing", testQueuesListing},
	{"QueuesInvalid", testQueuesInvalid},
	{"QueuesConcurrent", testQueuesConcurrent},
	{"OldestDue", testOldestDue},
	{"Workers", testWorkers},
	{"WorkerKinds", testWorkerKinds},
	{"AddDeadFields", testAddDeadFields},
	{"AddDeadInvalid", testAddDeadInvalid},
	{"AddDeadIdempotency", testAddDeadIdempotency},
	{"AddDeadConcurrent", testAddDeadConcurrent},
	{"AddDeadKeysModel", testAddDeadKeysModel},
	{"AddDeadRedrive", testAddDeadRedrive},
	{"OperationsCreate", testOperationsCreate},
	{"OperationsClaim", testOperationsClaim},
	{"OperationsReplay", testOperationsReplay},
	{"OperationsRedrive", testOperationsRedrive},
	{"OperationsPurge", testOperationsPurge},
	{"OperationsCancel", testOperationsCancel},
	{"OperationsExport", testOperationsExport},
	{"OperationsStates", testOperationsStates},
	{"OperationsList", testOperationsList},
	{"OperationsRetention", testOperationsRetention},
	{"OperationsConcurrent", testOperationsConcurrent},
	{"ListPayloadField", testListPayloadField},
	{"SchedulesDeclare", testSchedulesDeclare},
	{"SchedulesAdvance", testSchedulesAdvance},
	{"SchedulesPause", testSchedulesPause},
	{"SchedulesDelete", testSchedulesDelete},
	{"SchedulesInvalid", testSchedulesInvalid},
	{"SchedulesConcurrent", testSchedulesConcurrent},
	{"BreakersTrip", testBreakersTrip},
	{"BreakersWindow", testBreakersWindow},
	{"BreakersRatio", testBreakersRatio},
	{"BreakersProbe", testBreakersProbe},
	{"BreakersSet", testBreakersSet},
	{"BreakersInvalid", testBreakersInvalid},
	{"BreakersConcurrent", testBreakersConcurrent},
	{"BreakersDelete", testBreakersDelete},
	{"BreakersDeleteModel", testBreakersDeleteModel},
	{"BreakersDeleteConcurrent", testBreakersDeleteConcurrent},
	{"BreakersClosed", testBreakersClosed},
	{"FairRoundRobin", testFairRoundRobin},
	{"FairWeights", testFairWeights},
	{"FairPriority", testFairPriority},
	{"FairScheduled", testFairScheduled},
	{"FairKept", testFairKept},
	{"FairModel", testFairModel},
	{"FairInvalid", testFairInvalid},
	{"FairMixedStarve", testFairMixedStarve},
	{"FairKeyOrder", testFairKeyOrder},
	{"FairLevelModel", testFairLevelModel},
	{"LimitsFetch", testLimitsFetch},
	{"LimitUse", testLimitUse},
	{"LimitsRescue", testLimitsRescue},
	{"LimitsSet", testLimitsSet},
	{"LimitsInvalid", testLimitsInvalid},
	{"LimitsIdempotent", testLimitsIdempotent},
	{"LimitsConcurrent", testLimitsConcurrent},
	{"LimitsRace", testLimitsRace},
	{"LimitsModel", testLimitsModel},
	{"LimitsPriority", testLimitsPriority},
	{"LimitsPriorityWindow", testLimitsPriorityWindow},
	{"LimitsWindowStarve", testLimitsWindowStarve},
	{"LimitsRate", testLimitsRate},
	{"LimitsRateSet", testLimitsRateSet},
	{"LimitsRateModel", testLimitsRateModel},
	{"LimitsRateWindowStarve", testLimitsRateWindowStarve},
	{"LimitsReplayLimited", testLimitsReplayLimited},
	{"RedriveKeys", testRedriveKeys},
	{"LimitsRateRaise", testLimitsRateRaise},
	{"LimitsTakeStarts", testLimitsTakeStarts},
	{"LimitsTakeStartsHeld", testLimitsTakeStartsHeld},
	{"LimitSlots", testLimitSlots},
	{"LimitSlotsConcurrent", testLimitSlotsConcurrent},
	{"LimitSlotsModel", testLimitSlotsModel},
	{"LimitsPriorityInversion", testLimitsPriorityInversion},
	{"LimitsHold", testLimitsHold},
	{"LimitsHoldModel", testLimitsHoldModel},
	{"LimitsRetryDue", testLimitsRetryDue},
	{"NextDueAfter", testNextDueAfter},
	{"LimitsEdit", testLimitsEdit},
	{"LimitsChange", testLimitsChange},
	{"LimitsSlotWait", testLimitsSlotWait},
	{"LimitsSlotWaitDeep", testLimitsSlotWaitDeep},
	{"Secrets", testSecrets},
	{"SecretsConcurrent", testSecretsConcurrent},
	{"Trace", testTrace},
	{"Audit", testAudit},
	{"TraceReplay", testTraceReplay},
	{"WorkflowWait", testWorkflowWait},
	{"WorkflowCancelPolicy", testWorkflowCancelPolicy},
	{"WorkflowRunAnyway", testWorkflowRunAnyway},
	{"WorkflowCancel", testWorkflowCancel},
	{"WorkflowCancelFired", testWorkflowCancelFired},
	{"WorkflowInvalid", testWorkflowInvalid},
	{"WorkflowIdempotent", testWorkflowIdempotent},
	{"WorkflowResultCap", testWorkflowResultCap},
	{"WorkflowModel", testWorkflowModel},
	{"WorkflowConcurrent", testWorkflowConcurrent},
	{"WorkflowFanInModel", testWorkflowFanInModel},
	{"WorkflowBatch", testWorkflowBatch},
	{"WorkflowCountStates", testWorkflowCountStates},
	{"WorkflowDeadDependents", testWorkflowDeadDependents},
	{"WorkflowDeadRetention", testWorkflowDeadRetention},
	{"WorkflowDeadLeafDeleted", testWorkflowDeadLeafDeleted},
	{"WorkflowAdd", testWorkflowAdd},
	{"WorkflowAddRace", testWorkflowAddRace},
	{"WorkflowMemberKeys", testWorkflowMemberKeys},
	{"WorkflowKeyChecked", testWorkflowKeyChecked},
	{"WorkflowDeletedDependency", testWorkflowDeletedDependency},
	{"WorkflowCallbacksOnce", testWorkflowCallbacksOnce},
	{"WorkflowsEnqueueMany", testWorkflowsEnqueueMany},
	{"WorkflowsEnqueueRefused", testWorkflowsEnqueueRefused},
	{"WorkflowsEnqueueConcurrent", testWorkflowsEnqueueConcurrent},
	{"WorkflowReleaseHook", testWorkflowReleaseHook},
}

// RunNamed runs the named subtests of the conformance suite only, as Run
// does: for a store's own tests that run them again with a setting of the
// store changed (a threshold between two query plans, say).
func RunNamed(t *testing.T, open func(t *testing.T) store.Store, names ...string) {
	t.Helper()
	for _, name := range names {
		found := false
		for _, st := range subtests {
			if st.name == name {
				found = true
				runSubtest(t, st, open)
			}
		}
		if !found {
			t.Errorf("storetest: no subtest %q", name)
		}
	}
}

// Run runs the whole conformance suite as subtests of t. open returns a
// NEW, EMPTY, isolated store for each subtest; the suite closes it when the
// subtest ends (a Close that reports store.ErrClosed is accepted, since
// some subtests close the store themselves). Subtests call t.Parallel.
func Run(t *testing.T, open func(t *testing.T) store.Store) {
	t.Helper()
	for _, st := range subtests {
		runSubtest(t, st, open)
	}
}

func runSubtest(t *testing.T, st subtest, open func(t *testing.T) store.Store) {
	t.Run(st.name, func(t *testing.T) {
		t.Parallel()
		s := open(t)
		if s == nil {
			t.Fatal("open returned a nil store")
		}
		t.Cleanup(func() {
			if err := s.Close(); err != nil && !errors.Is(err, store.ErrClosed) {
				t.Errorf("Close: %v", err)
			}
		})
		st.fn(&h{t: t, s: s, ctx: t.Context()})
	})
}
