package domain

import (
	"context"
	"time"
)

// CodeStats summarizes the observations of one native code that a search
// selects: how many, when the first started and the last ended, and per
// unit the single numeric value of those that have one (omh.SingleQuantity).
type CodeStats struct {
	Code        string
	Count       int64
	First, Last *time.Time // nil when none is dated
	Values      []ValueStats
}

// ValueStats are the numeric values of one unit.
type ValueStats struct {
	Unit          string
	Count         int64
	Min, Max, Sum float64
}

// Mean is the mean of the values.
func (v ValueStats) Mean() float64 { return v.Sum / float64(v.Count) }

// ObservationSummary is what ObservationStats answers: per code, sorted by
// code, and the patients whose data it summarized (for the audit trail).
type ObservationSummary struct {
	Codes    []CodeStats
	Patients []int64
}

// ObservationStats summarizes, per code, the observations a search of
// native observations selects, in one pass of the store: with the same
// reach, patients and consent as SearchObservations, whose audit it
// records (the patients whose data it summarized). Paging parameters do
// not apply: the whole result is summarized.
func (s *Service) ObservationStats(ctx context.Context, actor *Actor, q Search) (sum ObservationSummary, err error) {
	var named namedPatients
	defer func() { err = s.auditSearch(ctx, actor, q, err, sum.Patients, named) }()
	if q.ResourceType() != "Observation" || q.Store().Kind != StoreNative {
		return ObservationSummary{}, Errorf(CodeInvalid, "$stats summarizes native Observations only")
	}
	reach, err := s.reachOf(actor, q, ofPatient)
	if err != nil {
		return ObservationSummary{}, err
	}
	scope, named, err := s.patientScope(ctx, actor, q)
	if err != nil {
		return ObservationSummary{}, err
	}
	plan, err := q.Plan(scope.within(reach))
	if err != nil {
		return ObservationSummary{}, err
	}
	if plan.Filter == nil {
		return ObservationSummary{}, Errorf(CodeInvalid, "$stats needs the search's whole result (_summary=count)")
	}
	return s.store.ObservationStats(ctx, plan)
}
