package handlers

import (
	"github.com/prometheus/client_golang/prometheus"

	"exchange/domain"
	"exchange/fhirsearch"
	"exchange/telemetry"
)

// metrics are the HTTP layer's series: every request by route template,
// and what the FHIR interface did (observations ingested or refused,
// search pages, R4 import entries). Labels come from closed sets: route
// templates, domain error codes, the configured resource types.
type metrics struct {
	catalog      *fhirsearch.Catalog // bounds the type labels
	http         *telemetry.HTTPMetrics
	observations *prometheus.CounterVec
	searches     *prometheus.HistogramVec
	imports      *prometheus.CounterVec
	dropped      *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer, catalog *fhirsearch.Catalog) *metrics {
	ns := "exchange"
	m := &metrics{
		catalog: catalog,
		http:    telemetry.NewHTTPMetrics(reg, ns),
		observations: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "fhir_observations_total",
			Help: "Native Observations sent to the FHIR interface, by outcome: created, or the code they were refused with (invalid, processing, forbidden, duplicate, ...)."},
			[]string{"outcome"}),
		searches: prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: ns, Name: "fhir_search_duration_seconds",
			Help: "FHIR search pages answered (count) and their latency, by resource type and store (native, imported, none).", Buckets: telemetry.LatencyBuckets},
			[]string{"type", "store"}),
		imports: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "r4_import_entries_total",
			Help: "R4 import entries, by resource type and outcome: created, or the code they were refused with."},
			[]string{"type", "outcome"}),
		dropped: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "r4_import_dropped_values_total",
			Help: "Data-loss warnings of R4 imports: values of R4 resources their R5 form lost, by resource type."},
			[]string{"type"}),
	}
	reg.MustRegister(m.observations, m.searches, m.imports, m.dropped)
	return m
}

// outcomeLabel is "created" for a write that succeeded, else its error
// code.
func outcomeLabel(err error) string {
	if err == nil {
		return "created"
	}
	return string(domain.ErrorCode(err))
}

// typeLabel bounds a resource type for a label: a type the server
// serves (the table's own string: one from the request shares Fiber's
// buffer, which the next request reuses), else "other".
func (m *metrics) typeLabel(resourceType string) string {
	if r, ok := m.catalog.Lookup(resourceType); ok {
		return r.Type
	}
	return "other"
}

// storeLabel names the store a search read.
func storeLabel(k domain.StoreKind) string {
	switch k {
	case domain.StoreNative:
		return "native"
	case domain.StoreImported:
		return "imported"
	}
	return "none"
}

// observation counts a native Observation created (err nil) or refused.
func (m *metrics) observation(err error) {
	m.observations.WithLabelValues(outcomeLabel(err)).Inc()
}
