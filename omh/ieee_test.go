package omh_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"exchange/omh"
	"exchange/omh/omhtest"
)

// TestOfficialTestData validates every file of the schemas' own test data
// against its schema through the registry: each must pass or fail as its
// folder says.
func TestOfficialTestData(t *testing.T) {
	r := registry(t)
	cases := omhtest.TestData(t)
	counts := map[string][3]int{} // namespace -> files, shouldPass, shouldFail
	for _, c := range cases {
		n := counts[c.Schema.Namespace]
		n[0]++
		if c.ShouldPass {
			n[1]++
		} else {
			n[2]++
		}
		counts[c.Schema.Namespace] = n
		err := r.ValidateInstance(c.Schema, c.Value)
		var ve *omh.ValidationError
		switch {
		case c.ShouldPass && err != nil:
			t.Errorf("%s: refused: %v", c.Name, err)
		case !c.ShouldPass && !errors.As(err, &ve):
			t.Errorf("%s: got %v, want a validation error", c.Name, err)
		}
	}
	for _, ns := range omhtest.Namespaces {
		n := counts[ns]
		if n[0] == 0 {
			t.Errorf("no test data of %s", ns)
		}
		t.Logf("%s: %d files (%d shouldPass, %d shouldFail)", ns, n[0], n[1], n[2])
	}
}

// dataPointWith returns a data point of the schema with the header
// members given (schema_id is added) and the body.
func dataPointWith(header, schema, body string) []byte {
	parts := strings.Split(schema, ":")
	return []byte(`{"header": {` + header + `"schema_id": {"namespace": "` + parts[0] + `", "name": "` + parts[1] + `", "version": "` + parts[2] + `"}},
		"body": ` + body + `}`)
}

const (
	omhHeader  = `"id": "dp-1", "creation_date_time": "2024-05-01T10:00:00Z", `
	ieeeHeader = `"uuid": "2f1c1d8e-8a6b-4c1e-9d1a-5f0e6b7c8d9e", "source_creation_date_time": "2024-05-01T10:00:00-07:00", `
)

// TestIEEEReferencesAreChecked: the Open mHealth schemas that reference
// IEEE 1752 schemas are checked through them (before, such a reference
// accepted anything), and ieee: codes are checked against IEEE schemas.
func TestIEEEReferencesAreChecked(t *testing.T) {
	r := registry(t)
	for _, tc := range []struct {
		name, schema, body string
		problem            string // "" when valid: where the problem is
	}{
		{"blood glucose", "omh:blood-glucose:4.0", `{"blood_glucose": {"value": 5.4, "unit": "mmol/L"}, "effective_time_frame": {"date_time": "2024-05-01T09:00:00Z"}}`, ""},
		{"blood glucose in G", "omh:blood-glucose:4.0", `{"blood_glucose": {"value": 5.4, "unit": "G"}, "effective_time_frame": {"date_time": "2024-05-01T09:00:00Z"}}`, "/body/blood_glucose/unit"},
		{"blood glucose as a string", "omh:blood-glucose:4.0", `{"blood_glucose": {"value": "5.4", "unit": "mmol/L"}, "effective_time_frame": {"date_time": "2024-05-01T09:00:00Z"}}`, "/body/blood_glucose/value"},
		{"body weight", "omh:body-weight:3.0", `{"body_weight": {"value": 70, "unit": "kg"}, "effective_time_frame": {"date_time": "2024-05-01T09:00:00Z"}, "descriptive_statistic": "average"}`, ""},
		{"body weight yesterday", "omh:body-weight:3.0", `{"body_weight": {"value": 70, "unit": "kg"}, "effective_time_frame": {"date_time": "yesterday"}}`, "/body/effective_time_frame"},
		{"body weight, bogus statistic", "omh:body-weight:3.0", `{"body_weight": {"value": 70, "unit": "kg"}, "effective_time_frame": {"date_time": "2024-05-01T09:00:00Z"}, "descriptive_statistic": "bogus"}`, "/body/descriptive_statistic"},
		{"IEEE physical activity", "ieee:physical-activity:1.0", `{"activity_name": "walking", "effective_time_frame": {"time_interval": {"start_date_time": "2024-05-01T09:00:00Z", "duration": {"value": 30, "unit": "min"}}}}`, ""},
		{"IEEE physical activity at an instant", "ieee:physical-activity:1.0", `{"activity_name": "walking", "effective_time_frame": {"date_time": "2024-05-01T09:00:00Z"}}`, "/body/effective_time_frame"},
		{"IEEE sleep episode", "ieee:sleep-episode:1.0", `{"effective_time_frame": {"time_interval": {"start_date_time": "2024-05-01T23:00:00+02:00", "end_date_time": "2024-05-02T07:00:00+02:00"}}, "is_main_sleep": true}`, ""},
		{"IEEE sleep episode, unknown duration unit", "ieee:sleep-episode:1.0", `{"effective_time_frame": {"time_interval": {"start_date_time": "2024-05-01T23:00:00Z", "duration": {"value": 8, "unit": "hours"}}}}`, "/body/effective_time_frame"},
		{"an ieee: code names an IEEE schema", "ieee:blood-glucose:4.0", `{"blood_glucose": {"value": 5.4, "unit": "mmol/L"}, "effective_time_frame": {"date_time": "2024-05-01T09:00:00Z"}}`, "/header/schema_id"},
		{"an unknown version", "omh:heart-rate:9.9", `{}`, "/header/schema_id"},
	} {
		for header, h := range map[string]string{"Open mHealth header": omhHeader, "IEEE header": ieeeHeader} {
			dp, err := omh.Parse(dataPointWith(h, tc.schema, tc.body))
			if err != nil {
				t.Fatalf("%s, %s: %v", tc.name, header, err)
			}
			err = r.Validate(dp)
			var ve *omh.ValidationError
			switch {
			case tc.problem == "" && err != nil:
				t.Errorf("%s, %s: %v", tc.name, header, err)
			case tc.problem != "" && (!errors.As(err, &ve) || !strings.Contains(strings.Join(ve.Problems, "\n"), "at "+tc.problem)):
				t.Errorf("%s, %s: got %v, want a problem at %s", tc.name, header, err, tc.problem)
			}
		}
	}
}

// TestHeaders: a header is an Open mHealth or an IEEE 1752 header, checked
// against the schema of its kind; one that is neither is refused by name.
func TestHeaders(t *testing.T) {
	r := registry(t)
	body := `{"heart_rate": {"value": 60, "unit": "beats/min"}, "effective_time_frame": {"date_time": "2024-05-01T09:00:00Z"}}`
	for name, tc := range map[string]struct {
		header  string
		problem string // "" when valid
	}{
		"Open mHealth":                      {omhHeader, ""},
		"IEEE 1752":                         {ieeeHeader, ""},
		"IEEE with its optional members":    {ieeeHeader + `"modality": "sensed", "acquisition_rate": {"value": 1, "unit": "Hz"}, `, ""},
		"IEEE with a uuid that is none":     {`"uuid": "dp-1", "source_creation_date_time": "2024-05-01T10:00:00Z", `, "/header/uuid"},
		"IEEE created yesterday":            {`"uuid": "2f1c1d8e-8a6b-4c1e-9d1a-5f0e6b7c8d9e", "source_creation_date_time": "yesterday", `, "/header/source_creation_date_time"},
		"IEEE with an unknown modality":     {ieeeHeader + `"modality": "guessed", `, "/header/modality"},
		"Open mHealth with a numeric id":    {`"id": 7, "creation_date_time": "2024-05-01T10:00:00Z", `, "/header/id"},
		"Open mHealth created yesterday":    {`"id": "dp-1", "creation_date_time": "yesterday", `, "/header/creation_date_time"},
		"both: checked as IEEE 1752":        {omhHeader + `"uuid": "not-a-uuid", "source_creation_date_time": "2024-05-01T10:00:00Z", `, "/header/uuid"},
		"both, IEEE's valid":                {omhHeader + ieeeHeader, ""},
		"IEEE uuid with Open mHealth times": {`"uuid": "2f1c1d8e-8a6b-4c1e-9d1a-5f0e6b7c8d9e", "creation_date_time": "2024-05-01T10:00:00Z", `, "neither"},
	} {
		dp, err := omh.Parse(dataPointWith(tc.header, "omh:heart-rate:2.0", body))
		if tc.problem == "neither" {
			if err == nil || !strings.Contains(err.Error(), "neither") {
				t.Errorf("%s: got %v, want the header refused as neither kind", name, err)
			}
			continue
		}
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		err = r.Validate(dp)
		var ve *omh.ValidationError
		switch {
		case tc.problem == "" && err != nil:
			t.Errorf("%s: %v", name, err)
		case tc.problem != "" && (!errors.As(err, &ve) || !strings.Contains(strings.Join(ve.Problems, "\n"), "at "+tc.problem)):
			t.Errorf("%s: got %v, want a problem at %s", name, err, tc.problem)
		}
	}
	_, err := omh.Parse(dataPointWith(`"id": "dp-1", `, "omh:heart-rate:2.0", body))
	want := "the header is neither an Open mHealth header (id, creation_date_time, schema_id; it has no creation_date_time) nor an IEEE 1752 header (uuid, source_creation_date_time, schema_id; it has no uuid, source_creation_date_time)"
	if err == nil || err.Error() != want {
		t.Errorf("a header with only an id: %v", err)
	}
}

// TestOpenRegistryRefusesUnresolvableReferences: every schema is compiled
// when the registry opens, and a reference to a schema that neither folder
// holds fails it, by name, instead of accepting anything.
func TestOpenRegistryRefusesUnresolvableReferences(t *testing.T) {
	write := func(dir, name, text string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(filepath.Join(dir, name)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	dataPoint := `{"$schema": "http://json-schema.org/draft-07/schema#", "type": "object", "required": ["header", "body"]}`
	setup := func(t *testing.T) (omhDir, ieeeDir string) {
		root := t.TempDir()
		omhDir, ieeeDir = filepath.Join(root, "schemas"), filepath.Join(root, "ieee-1752")
		write(omhDir, "data-point-1.0.json", dataPoint)
		write(ieeeDir, "metadata/data-point-1.0.json", dataPoint)
		write(ieeeDir, "utility/unit-value-1.0.json", `{"$schema": "http://json-schema.org/draft-07/schema#", "$id": "https://w3id.org/ieee/ieee-1752-schema/unit-value.json", "type": "object"}`)
		return omhDir, ieeeDir
	}
	t.Run("a complete set opens", func(t *testing.T) {
		omhDir, ieeeDir := setup(t)
		write(omhDir, "mass-1.0.json", `{"$schema": "http://json-schema.org/draft-07/schema#", "$ref": "https://w3id.org/ieee/ieee-1752-schema/unit-value-1.0.json"}`)
		if _, err := omh.OpenRegistry(omhDir, ieeeDir); err != nil {
			t.Fatal(err)
		}
	})
	for name, tc := range map[string]struct{ file, schema, want string }{
		"an IEEE schema the folder lacks":          {"mass-1.0.json", `{"$ref": "https://w3id.org/ieee/ieee-1752-schema/mass-unit-value-1.0.json"}`, "mass-unit-value-1.0.json"},
		"an Open mHealth schema the folder lacks":  {"mass-1.0.json", `{"$ref": "unit-value-9.x.json"}`, "unit-value-9.x.json"},
		"an IEEE schema referencing a missing one": {"metadata/header-1.0.json", `{"$ref": "schema-id-1.0.json"}`, "schema-id-1.0.json"},
		"a schema elsewhere on the web":            {"mass-1.0.json", `{"$ref": "https://example.org/mass.json"}`, "https://example.org/mass.json"},
		"a schema that is not JSON":                {"mass-1.0.json", `{"type": `, "mass-1.0.json"},
	} {
		t.Run(name, func(t *testing.T) {
			omhDir, ieeeDir := setup(t)
			dir := omhDir
			if strings.Contains(tc.file, "/") {
				dir = ieeeDir
			}
			write(dir, tc.file, tc.schema)
			_, err := omh.OpenRegistry(omhDir, ieeeDir)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("got %v, want an error naming %s", err, tc.want)
			}
		})
	}
	t.Run("no IEEE folder", func(t *testing.T) {
		omhDir, _ := setup(t)
		_, err := omh.OpenRegistry(omhDir, filepath.Join(t.TempDir(), "none"))
		if err == nil || errors.Is(err, omh.ErrNotInstalled) || !strings.Contains(err.Error(), "OMH_IEEE_SCHEMA_DIR") {
			t.Errorf("got %v", err)
		}
	})
	t.Run("no Open mHealth folder", func(t *testing.T) {
		_, ieeeDir := setup(t)
		if _, err := omh.OpenRegistry(filepath.Join(t.TempDir(), "none"), ieeeDir); !errors.Is(err, omh.ErrNotInstalled) {
			t.Errorf("got %v, want ErrNotInstalled", err)
		}
	})
	if got, want := omh.IEEEDirBeside("standards/omh/schemas/"), filepath.Join("standards", "omh", "ieee-1752"); got != want {
		t.Errorf("IEEEDirBeside: %s, want %s", got, want)
	}
}

// BenchmarkOpenRegistry is the start-up cost of the schemas: every Open
// mHealth and IEEE 1752 schema read and compiled.
func BenchmarkOpenRegistry(b *testing.B) {
	omhDir, ieeeDir := omhtest.SchemaDirs()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := omh.OpenRegistry(omhDir, ieeeDir); err != nil {
			b.Fatal(err)
		}
	}
}
