package omh

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"golang.org/x/text/language"
	"golang.org/x/text/message"
)

// SchemaInfo describes one schema of the registry.
type SchemaInfo struct {
	Name    string
	Version string
	Title   string // the schema's description
}

// Registry is the set of official Open mHealth schemas in a directory. It
// is safe for concurrent use; schemas are compiled once, on first use.
type Registry struct {
	dir     string
	schemas []SchemaInfo

	mu       sync.Mutex
	compiled map[string]*jsonschema.Schema // by file name
}

// A schema file is <name>-<major>.<minor>.json; <name>-<major>.x.json files
// are the "latest minor" aliases that references use.
var schemaFile = regexp.MustCompile(`^([a-z0-9]+(?:-[a-z0-9]+)*)-([0-9]+\.[0-9]+)\.json$`)

// OpenRegistry indexes the schemas in dir. A missing or empty directory is
// an error: run scripts/setup, or set OMH_SCHEMA_DIR.
func OpenRegistry(dir string) (*Registry, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("OMH_SCHEMA_DIR: %w (run scripts/setup)", err)
	}
	r := &Registry{dir: dir, compiled: map[string]*jsonschema.Schema{}}
	for _, e := range entries {
		m := schemaFile.FindStringSubmatch(e.Name())
		if m == nil {
			continue
		}
		var head struct {
			Description string `json:"description"`
		}
		data, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			return nil, err
		}
		if err := json.Unmarshal(data, &head); err != nil {
			return nil, fmt.Errorf("OMH schema %s: %w", e.Name(), err)
		}
		r.schemas = append(r.schemas, SchemaInfo{Name: m[1], Version: m[2], Title: head.Description})
	}
	if len(r.schemas) == 0 {
		return nil, fmt.Errorf("OMH_SCHEMA_DIR: no schemas in %s (run scripts/setup)", dir)
	}
	slices.SortFunc(r.schemas, func(a, b SchemaInfo) int {
		return strings.Compare(a.Name+" "+a.Version, b.Name+" "+b.Version)
	})
	return r, nil
}

// Schemas lists the schemas by name and version.
func (r *Registry) Schemas() []SchemaInfo { return r.schemas }

// Has reports whether the registry has the schema of that name and version.
func (r *Registry) Has(name, version string) bool {
	return slices.ContainsFunc(r.schemas, func(s SchemaInfo) bool { return s.Name == name && s.Version == version })
}

// ErrNoSchema is returned for a schema the registry does not have.
var ErrNoSchema = errors.New("no such schema")

// Schema returns the schema file's JSON.
func (r *Registry) Schema(name, version string) ([]byte, error) {
	if !r.Has(name, version) {
		return nil, ErrNoSchema
	}
	return os.ReadFile(filepath.Join(r.dir, name+"-"+version+".json"))
}

// ValidationError lists why a data point fails its schema.
type ValidationError struct {
	Schema   string
	Problems []string
}

func (e *ValidationError) Error() string {
	return fmt.Sprintf("the data point does not conform to %s: %s", e.Schema, strings.Join(e.Problems, "; "))
}

// Validate checks a data point: its header against the data point schema,
// and, for Open mHealth namespaces, its body against the schema its header
// names when the registry has it. Data points of other namespaces (IEEE
// 1752, whose schemas are not here) and of unknown versions are checked for
// structure only, as Parse did. Returns a *ValidationError when the data
// point does not conform.
func (r *Registry) Validate(dp *DataPoint) error {
	if err := r.validate("data-point-1.0.json", dp.Document); err != nil {
		return err
	}
	if dp.Schema.Namespace != NamespaceOMH || !r.Has(dp.Schema.Name, dp.Schema.Version) {
		return nil
	}
	return r.validate(dp.Schema.Name+"-"+dp.Schema.Version+".json", dp.Body)
}

func (r *Registry) validate(file string, doc any) error {
	sch, err := r.compile(file)
	if err != nil {
		return err
	}
	// Parse decoded the data point as the validator's own decoder does
	// (objects, arrays, json.Number), so it is validated as it is.
	err = sch.Validate(doc)
	var ve *jsonschema.ValidationError
	if errors.As(err, &ve) {
		return &ValidationError{Schema: strings.TrimSuffix(file, ".json"), Problems: leafErrors(ve)}
	}
	return err
}

var english = message.NewPrinter(language.English)

// leafErrors flattens a validation error tree into its most specific
// messages, with where they apply.
func leafErrors(ve *jsonschema.ValidationError) []string {
	if len(ve.Causes) == 0 {
		loc := "/" + strings.Join(ve.InstanceLocation, "/")
		return []string{fmt.Sprintf("at %s: %s", loc, ve.ErrorKind.LocalizedString(english))}
	}
	var out []string
	for _, c := range ve.Causes {
		out = append(out, leafErrors(c)...)
		if len(out) >= 10 {
			break
		}
	}
	return out
}

// compile returns the compiled schema of a file of the registry.
func (r *Registry) compile(file string) (*jsonschema.Schema, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if sch, ok := r.compiled[file]; ok {
		return sch, nil
	}
	c := jsonschema.NewCompiler()
	c.AssertFormat()
	c.UseLoader(schemaLoader{dir: r.dir})
	sch, err := c.Compile(localURL + file)
	if err != nil {
		return nil, fmt.Errorf("compile OMH schema %s: %w", file, err)
	}
	r.compiled[file] = sch
	return sch, nil
}

// localURL is the base every schema is compiled from, so that relative
// references ("time-frame-1.x.json") resolve among the registry's files.
const localURL = "https://w3id.org/openmhealth/schemas/omh/"

// schemaLoader resolves schema URLs to the registry's files: any Open
// mHealth URL by its file name. IEEE 1752 schemas are not available here;
// a reference to one accepts any value.
type schemaLoader struct{ dir string }

func (l schemaLoader) Load(rawURL string) (any, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, err
	}
	name := path.Base(u.Path)
	switch {
	case strings.Contains(u.Path, "/ieee-1752-schema/"):
		return map[string]any{}, nil
	case u.Host == "w3id.org" && strings.Contains(u.Path, "/openmhealth/"):
		f, err := os.Open(filepath.Join(l.dir, name))
		if err != nil {
			return nil, err
		}
		defer f.Close()
		return jsonschema.UnmarshalJSON(f)
	}
	return nil, fmt.Errorf("the schema %s is not available offline", rawURL)
}
