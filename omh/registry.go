package omh

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"golang.org/x/text/language"
	"golang.org/x/text/message"
)

// SchemaInfo describes one schema of the registry, of either namespace.
type SchemaInfo struct {
	Namespace string // NamespaceOMH or NamespaceIEEE
	Name      string
	Version   string
	Title     string // the schema's description
}

// ID is the schema's identifier, as a data point's header names it.
func (i SchemaInfo) ID() SchemaID {
	return SchemaID{Namespace: i.Namespace, Name: i.Name, Version: i.Version}
}

// Registry is the set of official schemas: the Open mHealth schemas of
// one directory and the IEEE 1752 schemas of another, all compiled when
// it is opened. It is safe for concurrent use.
type Registry struct {
	// infos lists the schemas of both namespaces, by namespace, name and
	// version.
	infos []SchemaInfo
	// files holds each schema's file, by its identifier.
	files map[SchemaID]string
	// schemas holds every schema of both namespaces, by its identifier.
	schemas map[SchemaID]schema
	// The data point schemas of each kind of header.
	omhDataPoint, ieeeDataPoint schema
}

// schema is a compiled schema with its accept check (accept.go).
type schema struct {
	id       SchemaID
	compiled *jsonschema.Schema
	accept   *acceptNode
}

// A schema file is <name>-<major>.<minor>.json; <name>-<major>.x.json files
// are the "latest minor" aliases that references use.
var (
	schemaFile = regexp.MustCompile(`^([a-z0-9]+(?:-[a-z0-9]+)*)-([0-9]+\.[0-9]+)\.json$`)
	aliasFile  = regexp.MustCompile(`^[a-z0-9]+(?:-[a-z0-9]+)*-[0-9]+\.x\.json$`)
)

// The base URLs the schemas are published under, and reference each
// other by: Open mHealth's, and IEEE 1752's as Open mHealth's schemas
// reference them. Schemas are compiled from these URLs, so that relative
// references resolve among the registry's files.
const (
	omhBase  = "https://w3id.org/openmhealth/schemas/omh/"
	ieeeBase = "https://w3id.org/ieee/ieee-1752-schema/"
)

// IEEEDirBeside is where the IEEE 1752 schemas are by default: the folder
// ieee-1752 beside the Open mHealth schema directory, as scripts/setup and
// the shared standards folder lay them out.
func IEEEDirBeside(omhDir string) string {
	return filepath.Join(filepath.Dir(filepath.Clean(omhDir)), "ieee-1752")
}

// ErrNotInstalled is returned by OpenRegistry when the Open mHealth schema
// directory is missing or holds no schemas: scripts/setup has not run.
var ErrNotInstalled = errors.New("the Open mHealth schemas are not installed")

// OpenRegistry reads the Open mHealth schemas of omhDir (one flat folder)
// and the IEEE 1752 schemas under ieeeDir (their upstream subfolders; file
// names are unique), and compiles every one of them, so that a schema that
// is malformed or references a schema the two folders do not hold fails
// here, by name, and never while a data point is checked. An error wraps
// ErrNotInstalled when omhDir holds no schemas.
func OpenRegistry(omhDir, ieeeDir string) (*Registry, error) {
	loader := schemaLoader{omhDir: omhDir, ieee: map[string]string{}}
	entries, err := os.ReadDir(omhDir)
	if err != nil {
		return nil, fmt.Errorf("%w: %w (run scripts/setup, or set OMH_SCHEMA_DIR)", ErrNotInstalled, err)
	}
	r := &Registry{files: map[SchemaID]string{}, schemas: map[SchemaID]schema{}}
	var urls []string // every file of both folders, aliases too
	for _, e := range entries {
		if aliasFile.MatchString(e.Name()) {
			urls = append(urls, omhBase+e.Name())
		}
		if !schemaFile.MatchString(e.Name()) {
			continue
		}
		if err := r.add(NamespaceOMH, e.Name(), filepath.Join(omhDir, e.Name())); err != nil {
			return nil, err
		}
		urls = append(urls, omhBase+e.Name())
	}
	if len(r.infos) == 0 {
		return nil, fmt.Errorf("%w: no schemas in %s (run scripts/setup, or set OMH_SCHEMA_DIR)", ErrNotInstalled, omhDir)
	}
	// os.DirFS follows ieeeDir itself when it is a link, as scripts/setup
	// makes it.
	err = fs.WalkDir(os.DirFS(ieeeDir), ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !schemaFile.MatchString(d.Name()) {
			return err
		}
		if other, ok := loader.ieee[d.Name()]; ok {
			return fmt.Errorf("%s and %s have the same name, by which the schemas reference them", other, p)
		}
		loader.ieee[d.Name()] = filepath.Join(ieeeDir, filepath.FromSlash(p))
		urls = append(urls, ieeeBase+d.Name())
		return r.add(NamespaceIEEE, d.Name(), loader.ieee[d.Name()])
	})
	if err == nil && len(loader.ieee) == 0 {
		err = fmt.Errorf("no schemas in %s", ieeeDir)
	}
	if err != nil {
		return nil, fmt.Errorf("OMH_IEEE_SCHEMA_DIR: %w (run scripts/setup)", err)
	}

	c := jsonschema.NewCompiler()
	c.AssertFormat()
	c.UseLoader(loader)
	accepts := acceptBuilder{}
	for _, u := range urls {
		sch, err := c.Compile(u)
		if err != nil {
			return nil, fmt.Errorf("compile schema %s: %w", path.Base(u), err)
		}
		if m := schemaFile.FindStringSubmatch(path.Base(u)); m != nil {
			ns := NamespaceOMH
			if strings.HasPrefix(u, ieeeBase) {
				ns = NamespaceIEEE
			}
			id := SchemaID{Namespace: ns, Name: m[1], Version: m[2]}
			r.schemas[id] = schema{id, sch, accepts.node(sch)}
		}
	}
	slices.SortFunc(r.infos, func(a, b SchemaInfo) int {
		return strings.Compare(a.Namespace+" "+a.Name+" "+a.Version, b.Namespace+" "+b.Name+" "+b.Version)
	})
	var ok bool
	if r.omhDataPoint, ok = r.schemas[SchemaID{NamespaceOMH, "data-point", "1.0"}]; !ok {
		return nil, fmt.Errorf("%w: no data-point-1.0.json in %s", ErrNotInstalled, omhDir)
	}
	if r.ieeeDataPoint, ok = r.schemas[SchemaID{NamespaceIEEE, "data-point", "1.0"}]; !ok {
		return nil, fmt.Errorf("OMH_IEEE_SCHEMA_DIR: no data-point-1.0.json under %s (run scripts/setup)", ieeeDir)
	}
	return r, nil
}

// add lists the schema file named name (<name>-<version>.json) at file,
// with its description as its title.
func (r *Registry) add(ns, name, file string) error {
	m := schemaFile.FindStringSubmatch(name)
	data, err := os.ReadFile(file)
	if err != nil {
		return err
	}
	var head struct {
		Description string `json:"description"`
	}
	if err := json.Unmarshal(data, &head); err != nil {
		return fmt.Errorf("%s schema %s: %w", NamespaceTitle(ns), name, err)
	}
	info := SchemaInfo{Namespace: ns, Name: m[1], Version: m[2], Title: head.Description}
	r.infos = append(r.infos, info)
	r.files[info.ID()] = file
	return nil
}

// Schemas lists the schemas of both namespaces: Open mHealth's, then IEEE
// 1752's, each by name and version.
func (r *Registry) Schemas() []SchemaInfo { return r.infos }

// Has reports whether the registry has the schema, of either namespace.
func (r *Registry) Has(id SchemaID) bool {
	_, ok := r.schemas[id]
	return ok
}

// ErrNoSchema is returned for a schema the registry does not have.
var ErrNoSchema = errors.New("no such schema")

// Schema returns a schema file's JSON, as published, or ErrNoSchema.
func (r *Registry) Schema(id SchemaID) ([]byte, error) {
	file, ok := r.files[id]
	if !ok {
		return nil, ErrNoSchema
	}
	return os.ReadFile(file)
}

// ValidationError lists why a data point fails its schemas. Each problem
// names where it is, as a JSON pointer into the data point.
type ValidationError struct {
	Schema   string
	Problems []string
}

func (e *ValidationError) Error() string {
	return fmt.Sprintf("the data point does not conform to %s: %s", e.Schema, strings.Join(e.Problems, "; "))
}

// Validate checks a data point: the whole against the data point schema
// of its header's kind (Open mHealth's data-point-1.0, whose header is
// header-1.x, or IEEE 1752's metadata/data-point-1.0, whose header is
// metadata/header-1.0), and its body against the schema its header names,
// in the namespace the header names. Returns a *ValidationError when the
// data point does not conform, or names a schema the registry does not
// have.
func (r *Registry) Validate(dp *DataPoint) error {
	doc := r.omhDataPoint
	if dp.ieeeHeader {
		doc = r.ieeeDataPoint
	}
	if err := doc.validate("", dp.Document); err != nil {
		return err
	}
	body, ok := r.schemas[dp.Schema]
	if !ok {
		return &ValidationError{Schema: dp.Schema.Code(), Problems: []string{
			fmt.Sprintf("at /header/schema_id: there is no schema %s among the official %s schemas", dp.Schema.Code(), NamespaceTitle(dp.Schema.Namespace))}}
	}
	return body.validate("/body", dp.Body)
}

// NamespaceTitle is a namespace's name for people: Open mHealth or IEEE
// 1752.
func NamespaceTitle(ns string) string {
	if ns == NamespaceIEEE {
		return "IEEE 1752"
	}
	return "Open mHealth"
}

// ValidateInstance checks any JSON value (as jsonschema.UnmarshalJSON
// decodes it) against one schema of the registry: a body, or a component
// such as a unit value, as the schemas' own test data holds them.
func (r *Registry) ValidateInstance(id SchemaID, v any) error {
	sch, ok := r.schemas[id]
	if !ok {
		return ErrNoSchema
	}
	return sch.validate("", v)
}

// validate checks v against the schema; problems are located under at.
// What the accept check accepts, the library accepts; the library decides
// everything else, and words every rejection.
func (s schema) validate(at string, v any) error {
	if s.accept.check(v, maxAcceptDepth) == accepted {
		return nil
	}
	// Parse decoded the data point as the validator's own decoder does
	// (objects, arrays, json.Number), so it is validated as it is.
	err := s.compiled.Validate(v)
	var ve *jsonschema.ValidationError
	if errors.As(err, &ve) {
		return &ValidationError{Schema: s.id.Code(), Problems: leafErrors(at, ve)}
	}
	return err
}

var english = message.NewPrinter(language.English)

// maxProblems bounds the problems a ValidationError lists.
const maxProblems = 10

// leafErrors flattens a validation error tree into its most specific
// messages, with where they apply.
func leafErrors(at string, ve *jsonschema.ValidationError) []string {
	if len(ve.Causes) == 0 {
		loc := at + "/" + strings.Join(ve.InstanceLocation, "/")
		if len(ve.InstanceLocation) == 0 && at != "" {
			loc = at
		}
		return []string{fmt.Sprintf("at %s: %s", loc, ve.ErrorKind.LocalizedString(english))}
	}
	var out []string
	for _, c := range ve.Causes {
		out = append(out, leafErrors(at, c)...)
		if len(out) >= maxProblems {
			return out[:maxProblems]
		}
	}
	return out
}

// schemaLoader resolves schema URLs to the registry's files: an Open
// mHealth URL by its file name in the Open mHealth directory, an IEEE 1752
// URL by its file name among the IEEE files. Nothing else is available: a
// reference to anything else fails the compilation.
type schemaLoader struct {
	omhDir string
	ieee   map[string]string // file name -> path
}

func (l schemaLoader) Load(rawURL string) (any, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, err
	}
	var file string
	switch name := path.Base(u.Path); {
	case strings.HasPrefix(rawURL, ieeeBase) && l.ieee[name] != "":
		file = l.ieee[name]
	case strings.HasPrefix(rawURL, omhBase) && schemaOrAlias(name):
		file = filepath.Join(l.omhDir, name)
	default:
		return nil, fmt.Errorf("the schema %s is not among the installed schemas", rawURL)
	}
	f, err := os.Open(file)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	doc, err := jsonschema.UnmarshalJSON(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	// A schema is what its file name says. Some files' $id says otherwise
	// (body-weight-3.0.json claims to be body-weight-2.0.json; the IEEE
	// schemas claim unversioned names): compiled as published, two files
	// would share one identity. References resolve the same either way,
	// as every $id names the same folder as the file's own URL.
	if obj, ok := doc.(map[string]any); ok {
		if _, ok := obj["$id"]; ok {
			obj["$id"] = rawURL
		}
	}
	return doc, nil
}

func schemaOrAlias(name string) bool {
	return schemaFile.MatchString(name) || aliasFile.MatchString(name)
}
