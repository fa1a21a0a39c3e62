package bulkimport

import (
	"bytes"
	"crypto/sha256"
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
)

// router picks each resource's FHIR source: by its patient through the
// sources file, else the default source.
type router struct {
	fallback  int64            // --source; 0: none
	byPatient map[string]int64 // --sources: upstream patient reference -> FHIR source id
}

// contentHash is the identity of a resource without an id: its FHIR
// source and its JSON, whitespace aside.
func contentHash(source int64, body []byte) string {
	var compact bytes.Buffer
	if json.Compact(&compact, body) != nil {
		compact.Reset()
		compact.Write(body)
	}
	h := sha256.New()
	fmt.Fprintf(h, "%d\n", source)
	h.Write(compact.Bytes())
	return fmt.Sprintf("sha256:%x", h.Sum(nil))
}

// resourceHead is what routing reads of a resource. The patient of an R4
// resource is its subject (Observation, Condition, Encounter, ...), its
// patient (AllergyIntolerance, Immunization, Claim, ...) or the
// beneficiary of a Coverage.
type resourceHead struct {
	ResourceType json.RawMessage `json:"resourceType"`
	ID           json.RawMessage `json:"id"`
	Subject      *reference      `json:"subject"`
	Patient      *reference      `json:"patient"`
	Beneficiary  *reference      `json:"beneficiary"`
}

type reference struct {
	Reference string `json:"reference"`
}

// route reads the record's type and id and picks its FHIR source; an
// error is the reason it cannot be sent. A record without an id gets its
// content hash.
func (rt *router) route(r *record) (err error) {
	defer func() {
		if err == nil && r.id == "" {
			r.contentHash = contentHash(r.source, r.body)
		}
	}()
	var h resourceHead
	if err := json.Unmarshal(r.body, &h); err != nil {
		var typeErr *json.UnmarshalTypeError
		if !errors.As(err, &typeErr) {
			return fmt.Errorf("the resource is not valid JSON: %v", err)
		}
	}
	if json.Unmarshal(h.ResourceType, &r.resourceType) != nil || r.resourceType == "" {
		return errors.New("the resource has no resourceType")
	}
	_ = json.Unmarshal(h.ID, &r.id)
	if rt.byPatient == nil {
		r.source = rt.fallback
		return nil
	}
	var refs []string
	if r.resourceType == "Patient" {
		if r.fullURL != "" {
			refs = append(refs, r.fullURL)
		}
		if r.id != "" {
			refs = append(refs, "Patient/"+r.id)
		}
	}
	for _, ref := range []*reference{h.Subject, h.Patient, h.Beneficiary} {
		if ref != nil && ref.Reference != "" {
			refs = append(refs, ref.Reference)
		}
	}
	for _, ref := range refs {
		for _, key := range referenceKeys(ref) {
			if id, ok := rt.byPatient[key]; ok {
				r.source = id
				return nil
			}
		}
	}
	switch {
	case rt.fallback != 0:
		r.source = rt.fallback
		return nil
	case len(refs) == 0:
		return errors.New("the resource names no patient (subject, patient or beneficiary) to route it by: pass --source for such resources")
	default:
		return fmt.Errorf("the sources file has no FHIR source for patient %s: add it there, or pass --source for the rest", refs[len(refs)-1])
	}
}

// referenceKeys are the forms under which the sources file may list a
// patient reference: as written, then as Patient/<id> when written as an
// absolute URL (.../Patient/<id>[/_history/v]) or a urn:uuid: (Bundles
// whose entries point at one another by fullUrl).
func referenceKeys(ref string) []string {
	keys := []string{ref}
	if i := strings.LastIndex(ref, "Patient/"); i > 0 {
		rest := ref[i+len("Patient/"):]
		if j := strings.IndexByte(rest, '/'); j >= 0 {
			rest = rest[:j]
		}
		keys = append(keys, "Patient/"+rest)
	}
	if id, ok := strings.CutPrefix(ref, "urn:uuid:"); ok {
		keys = append(keys, "Patient/"+id)
	}
	return keys
}

// readSources reads a sources file: a JSON object of patient reference ->
// FHIR source id, or CSV lines `reference,source id` (# starts a comment;
// a header line is allowed), and the SHA-256 of what it read.
func readSources(path string) (map[string]int64, string, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, "", err
	}
	out := map[string]int64{}
	if trimmed := bytes.TrimSpace(data); len(trimmed) > 0 && trimmed[0] == '{' {
		if err := json.Unmarshal(trimmed, &out); err != nil {
			return nil, "", fmt.Errorf("%s: want a JSON object of patient reference -> FHIR source id: %v", path, err)
		}
	} else if err := readSourcesCSV(bytes.NewReader(data), out); err != nil {
		return nil, "", fmt.Errorf("%s: %v", path, err)
	}
	if len(out) == 0 {
		return nil, "", fmt.Errorf("%s: no patient references in it", path)
	}
	for ref, id := range out {
		if id <= 0 {
			return nil, "", fmt.Errorf("%s: the FHIR source of %s is %d, not a positive id", path, ref, id)
		}
	}
	return out, fmt.Sprintf("%x", sha256.Sum256(data)), nil
}

func readSourcesCSV(r io.Reader, out map[string]int64) error {
	cr := csv.NewReader(r)
	cr.Comment, cr.FieldsPerRecord, cr.TrimLeadingSpace = '#', 2, true
	for first := true; ; first = false {
		row, err := cr.Read()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("want lines of `patient reference,FHIR source id`: %v", err)
		}
		id, err := strconv.ParseInt(strings.TrimSpace(row[1]), 10, 64)
		if err != nil {
			if first {
				continue // a header
			}
			line, _ := cr.FieldPos(1)
			return fmt.Errorf("line %d: %q is not a FHIR source id", line, row[1])
		}
		out[strings.TrimSpace(row[0])] = id
	}
}
