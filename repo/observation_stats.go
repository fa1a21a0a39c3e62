package repo

import (
	"cmp"
	"context"
	"maps"
	"slices"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"exchange/domain"
)

// statsGroup is one group of the summary: a patient's observations of one
// code and unit (no unit: without a single numeric value).
type statsGroup struct {
	Code      string     `bson:"code"`
	Unit      string     `bson:"unit"`
	PatientID int64      `bson:"patientId"`
	Count     int64      `bson:"count"`
	First     *time.Time `bson:"first"`
	Last      *time.Time `bson:"last"`
	Values    int64      `bson:"values"`
	Min       *float64   `bson:"min"`
	Max       *float64   `bson:"max"`
	Sum       float64    `bson:"sum"`
}

// ObservationStats implements domain.ObservationStore: one $group on
// MongoDB; on FerretDB, which has no $min or $max accumulator, one scan of
// the same documents that groups them alike (observationStatsScan).
func (d *DB) ObservationStats(ctx context.Context, plan *domain.SearchPlan) (domain.ObservationSummary, error) {
	release, err := d.searchSlot(ctx)
	if err != nil {
		return domain.ObservationSummary{}, err
	}
	defer release()
	if d.ferret {
		return d.observationStatsScan(ctx, plan)
	}
	return d.observationStatsGroup(ctx, plan)
}

// observationStatsGroup is the summary as one aggregation.
func (d *DB) observationStatsGroup(ctx context.Context, plan *domain.SearchPlan) (domain.ObservationSummary, error) {
	pipeline := bson.A{
		bson.D{{Key: "$match", Value: plan.Filter}},
		bson.D{{Key: "$group", Value: bson.D{
			{Key: "_id", Value: bson.D{{Key: "code", Value: "$code"}, {Key: "unit", Value: "$valueUnit"}, {Key: "patientId", Value: "$patientId"}}},
			{Key: "count", Value: bson.D{{Key: "$sum", Value: 1}}},
			{Key: "first", Value: bson.D{{Key: "$min", Value: "$effectiveStart"}}},
			{Key: "last", Value: bson.D{{Key: "$max", Value: "$effectiveEnd"}}},
			{Key: "values", Value: bson.D{{Key: "$sum", Value: bson.D{{Key: "$cond", Value: bson.A{bson.D{{Key: "$isNumber", Value: "$valueNumber"}}, 1, 0}}}}}},
			{Key: "min", Value: bson.D{{Key: "$min", Value: "$valueNumber"}}},
			{Key: "max", Value: bson.D{{Key: "$max", Value: "$valueNumber"}}},
			{Key: "sum", Value: bson.D{{Key: "$sum", Value: "$valueNumber"}}},
		}}},
		bson.D{{Key: "$project", Value: bson.D{{Key: "_id", Value: 0}, {Key: "code", Value: "$_id.code"}, {Key: "unit", Value: "$_id.unit"},
			{Key: "patientId", Value: "$_id.patientId"}, {Key: "count", Value: 1}, {Key: "first", Value: 1}, {Key: "last", Value: 1},
			{Key: "values", Value: 1}, {Key: "min", Value: 1}, {Key: "max", Value: 1}, {Key: "sum", Value: 1}}}},
	}
	cur, err := d.c(colObservations).Aggregate(ctx, pipeline)
	if err != nil {
		return domain.ObservationSummary{}, err
	}
	var groups []statsGroup
	if err := cur.All(ctx, &groups); err != nil {
		return domain.ObservationSummary{}, err
	}
	return summarize(groups), nil
}

// observationStatsScan is the summary as one scan: the fields it needs of
// each selected document, grouped as observationStatsGroup groups them.
func (d *DB) observationStatsScan(ctx context.Context, plan *domain.SearchPlan) (domain.ObservationSummary, error) {
	proj := bson.D{{Key: "code", Value: 1}, {Key: "patientId", Value: 1}, {Key: "effectiveStart", Value: 1}, {Key: "effectiveEnd", Value: 1},
		{Key: "valueNumber", Value: 1}, {Key: "valueUnit", Value: 1}}
	cur, err := d.c(colObservations).Find(ctx, plan.Filter, options.Find().SetProjection(proj))
	if err != nil {
		return domain.ObservationSummary{}, err
	}
	defer cur.Close(context.WithoutCancel(ctx))
	type key struct {
		code, unit string
		patient    int64
	}
	groups := map[key]*statsGroup{}
	for cur.Next(ctx) {
		var doc struct {
			Code      string     `bson:"code"`
			PatientID int64      `bson:"patientId"`
			Start     *time.Time `bson:"effectiveStart"`
			End       *time.Time `bson:"effectiveEnd"`
			Value     *float64   `bson:"valueNumber"`
			Unit      string     `bson:"valueUnit"`
		}
		if err := cur.Decode(&doc); err != nil {
			return domain.ObservationSummary{}, err
		}
		k := key{doc.Code, doc.Unit, doc.PatientID}
		g, ok := groups[k]
		if !ok {
			g = &statsGroup{Code: doc.Code, Unit: doc.Unit, PatientID: doc.PatientID}
			groups[k] = g
		}
		g.Count++
		if doc.Start != nil && (g.First == nil || doc.Start.Before(*g.First)) {
			g.First = doc.Start
		}
		if doc.End != nil && (g.Last == nil || doc.End.After(*g.Last)) {
			g.Last = doc.End
		}
		if v := doc.Value; v != nil {
			g.Values++
			g.Sum += *v
			if g.Min == nil || *v < *g.Min {
				g.Min = v
			}
			if g.Max == nil || *v > *g.Max {
				g.Max = v
			}
		}
	}
	if err := cur.Err(); err != nil {
		return domain.ObservationSummary{}, err
	}
	out := make([]statsGroup, 0, len(groups))
	for _, g := range groups {
		out = append(out, *g)
	}
	return summarize(out), nil
}

// summarize merges the groups of patients into one entry per code, its
// values per unit, sorted by code and unit.
func summarize(groups []statsGroup) domain.ObservationSummary {
	byCode := map[string]*domain.CodeStats{}
	patients := map[int64]bool{}
	for _, g := range groups {
		patients[g.PatientID] = true
		c, ok := byCode[g.Code]
		if !ok {
			c = &domain.CodeStats{Code: g.Code}
			byCode[g.Code] = c
		}
		c.Count += g.Count
		if g.First != nil && (c.First == nil || g.First.Before(*c.First)) {
			first := g.First.UTC()
			c.First = &first
		}
		if g.Last != nil && (c.Last == nil || g.Last.After(*c.Last)) {
			last := g.Last.UTC()
			c.Last = &last
		}
		if g.Values == 0 || g.Min == nil || g.Max == nil {
			continue
		}
		i := slices.IndexFunc(c.Values, func(v domain.ValueStats) bool { return v.Unit == g.Unit })
		if i < 0 {
			c.Values = append(c.Values, domain.ValueStats{Unit: g.Unit, Min: *g.Min, Max: *g.Max})
			i = len(c.Values) - 1
		}
		v := &c.Values[i]
		v.Count += g.Values
		v.Sum += g.Sum
		v.Min, v.Max = min(v.Min, *g.Min), max(v.Max, *g.Max)
	}
	out := domain.ObservationSummary{Codes: []domain.CodeStats{}, Patients: slices.Sorted(maps.Keys(patients))}
	for _, code := range slices.Sorted(maps.Keys(byCode)) {
		c := byCode[code]
		slices.SortFunc(c.Values, func(a, b domain.ValueStats) int { return cmp.Compare(a.Unit, b.Unit) })
		out.Codes = append(out.Codes, *c)
	}
	return out
}
