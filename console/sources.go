package console

import (
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"exchange/domain"
	"exchange/fhirsearch"
	"exchange/omh"
)

type sourcesPage struct {
	DataSources    []domain.DataSourceView
	DataPager      pager
	FHIRSources    []domain.FHIRSource
	FHIRPager      pager
	Patients       map[int64]domain.Patient // of the FHIR sources, and those the user may add one for
	Writable       []domain.Patient
	AllDataSources []domain.DataSourceView
	ScopeCodes     []domain.ScopeCode
	NewSchemas     []schemaGroup // schemas without a scope code, for superusers
	Types          []domain.DataSourceType
}

func (c *Console) sources(w http.ResponseWriter, r *http.Request, s *session) error {
	return c.renderSources(w, r, s, nil)
}

// renderSources renders the data sources and FHIR sources, with a form of
// the page that was refused.
func (c *Console) renderSources(w http.ResponseWriter, r *http.Request, s *session, form *formState) error {
	ctx := r.Context()
	p := listPage(r)
	page := sourcesPage{Patients: map[int64]domain.Patient{},
		Types: []domain.DataSourceType{domain.DataSourcePersonalDevice, domain.DataSourceMedicalDevice, domain.DataSourcePatientApp}}
	ds, err := c.Service.ListDataSources(ctx, p)
	if err != nil {
		return err
	}
	page.DataSources, page.DataPager = ds.Items, pagerOf(r, p, ds.Total)
	fs, err := c.Service.ListFHIRSources(ctx, s.actor, p)
	if err != nil {
		return err
	}
	page.FHIRSources, page.FHIRPager = fs.Items, pagerOf(r, p, fs.Total)
	all, err := c.Service.ListDataSources(ctx, domain.Page{Number: 1, Size: domain.MaxPageSize})
	if err != nil {
		return err
	}
	page.AllDataSources = all.Items
	patients, err := c.Service.ListPatients(ctx, s.actor, domain.PatientFilter{}, domain.Page{Number: 1, Size: domain.MaxPageSize})
	if err != nil {
		return err
	}
	for _, pt := range patients.Items {
		page.Patients[pt.ID] = pt
		if s.actor.Patient == nil && s.actor.CanWritePatientData(&pt) {
			page.Writable = append(page.Writable, pt)
		}
	}
	if s.actor.IsSuperuser() {
		codes, err := c.Service.ListScopeCodes(ctx, domain.Page{Number: 1, Size: domain.MaxPageSize})
		if err != nil {
			return err
		}
		page.ScopeCodes = codes.Items
		if c.Schemas != nil {
			page.NewSchemas = newSchemas(c.Schemas.Schemas(), codes.Items)
		}
	}
	c.renderForm(w, r, s, http.StatusOK, "sources.html", "Data sources", "sources", page, form)
	return nil
}

// The forms of the sources page: a data source, a kind of data (scope
// code) and a FHIR source; a taken name is about the name.
var (
	dataSourceForm = formSpec{name: "data-source", fields: map[string]string{"name": "name", "type": "type", "scopes": "scopes", "supportedScopeCodeIds": "scopes"},
		unnamed: map[domain.Code]string{domain.CodeDuplicate: "name"}}
	scopeCodeForm = formSpec{name: "scope-code", fields: map[string]string{"schema": "schema", "text": "text", "code": "schema", "codingCode": "schema"},
		unnamed: map[domain.Code]string{domain.CodeDuplicate: "schema"}}
	fhirSourceForm = formSpec{name: "fhir-source", fields: map[string]string{"patient": "patient", "label": "label", "dataSource": "dataSource", "dataSourceId": "dataSource"},
		unnamed: map[domain.Code]string{domain.CodeDuplicate: "label"}}
)

// sourcesRefused answers a refused form of the sources page.
func (c *Console) sourcesRefused(w http.ResponseWriter, r *http.Request, s *session, spec formSpec, err error) error {
	return spec.refused(r, err, func(form *formState) error { return c.renderSources(w, r, s, form) })
}

// schemaGroup is the schemas of one namespace, as the picker of a new
// kind of data groups them.
type schemaGroup struct {
	Title   string
	Schemas []omh.SchemaInfo
}

// newSchemas groups by namespace the schemas that no scope code has yet
// (the registry lists them by namespace).
func newSchemas(schemas []omh.SchemaInfo, codes []domain.ScopeCode) []schemaGroup {
	var groups []schemaGroup
	for _, sc := range schemas {
		code, system := sc.ID().Code(), domain.NativeSystem(sc.Namespace)
		if slices.ContainsFunc(codes, func(x domain.ScopeCode) bool { return x.System == system && x.Code == code }) {
			continue
		}
		title := omh.NamespaceTitle(sc.Namespace)
		if len(groups) == 0 || groups[len(groups)-1].Title != title {
			groups = append(groups, schemaGroup{Title: title})
		}
		groups[len(groups)-1].Schemas = append(groups[len(groups)-1].Schemas, sc)
	}
	return groups
}

func (c *Console) createDataSource(w http.ResponseWriter, r *http.Request, s *session) error {
	if err := c.newDataSource(r, s); err != nil {
		return c.sourcesRefused(w, r, s, dataSourceForm, err)
	}
	return seeOther(w, r, Prefix+"sources/", "created")
}

// newDataSource registers the data source the form describes.
func (c *Console) newDataSource(r *http.Request, s *session) error {
	var scopes []int64
	for _, v := range r.PostForm["scopes"] {
		id, ok := domain.ParseID(v)
		if !ok {
			return domain.FieldErrorf("scopes", "%q is not a scope code", v)
		}
		scopes = append(scopes, id)
	}
	in := domain.NewDataSource{Name: r.PostFormValue("name"), Type: domain.DataSourceType(r.PostFormValue("type")), SupportedScopeCodeIDs: scopes}
	_, err := c.Service.CreateDataSource(r.Context(), s.actor, in)
	return err
}

// createScopeCode adds a scope code for an Open mHealth or IEEE 1752
// schema the exchange knows: its code is the schema's native code
// (namespace:name:version) on its namespace's system, its text the
// schema's name unless one is given.
func (c *Console) createScopeCode(w http.ResponseWriter, r *http.Request, s *session) error {
	if err := c.newScopeCode(r, s); err != nil {
		return c.sourcesRefused(w, r, s, scopeCodeForm, err)
	}
	return seeOther(w, r, Prefix+"sources/", "created")
}

// newScopeCode adds the scope code the form describes.
func (c *Console) newScopeCode(r *http.Request, s *session) error {
	id, err := omh.ParseCode(r.PostFormValue("schema"))
	if err != nil || c.Schemas == nil || !c.Schemas.Has(id) {
		return domain.FieldErrorf("schema", "choose a schema the exchange knows")
	}
	text := strings.TrimSpace(r.PostFormValue("text"))
	if text == "" {
		text = strings.ReplaceAll(id.Name, "-", " ")
		text = strings.ToUpper(text[:1]) + text[1:]
	}
	_, err = c.Service.CreateScopeCode(r.Context(), s.actor, domain.NativeSystem(id.Namespace), id.Code(), text)
	return err
}

func (c *Console) createFHIRSource(w http.ResponseWriter, r *http.Request, s *session) error {
	src, err := c.newFHIRSource(r, s)
	if err != nil {
		return c.sourcesRefused(w, r, s, fhirSourceForm, err)
	}
	return seeOther(w, r, fmt.Sprintf("%sfhir-sources/%d/", Prefix, src.ID), "created")
}

// newFHIRSource registers the FHIR source the form describes.
func (c *Console) newFHIRSource(r *http.Request, s *session) (*domain.FHIRSource, error) {
	var patient, dataSource int64
	var err error
	if v := r.PostFormValue("patient"); v != "" {
		if patient, err = formID(r, "patient"); err != nil {
			return nil, err
		}
	}
	if v := r.PostFormValue("dataSource"); v != "" {
		if dataSource, err = formID(r, "dataSource"); err != nil {
			return nil, err
		}
	}
	return c.Service.CreateFHIRSource(r.Context(), s.actor, patient, dataSource, r.PostFormValue("label"))
}

type fhirSourcePage struct {
	Source    *domain.FHIRSource
	URI       string
	Patient   *domain.Patient
	Types     []domain.ResourceTypeCount
	Type      string
	Resources []domain.Resource
	Next      string
}

// fhirSource lists a FHIR source's imported resources by type, with their
// JSON as stored, paged with the FHIR search's cursor.
func (c *Console) fhirSource(w http.ResponseWriter, r *http.Request, s *session) error {
	ctx := r.Context()
	id, err := pathID(r, "id")
	if err != nil {
		return err
	}
	src, err := c.Service.FHIRSourceByID(ctx, s.actor, id)
	if err != nil {
		return err
	}
	page := fhirSourcePage{Source: src, URI: domain.SourceURI(c.Service.SourceBase(), id)}
	if page.Patient, err = c.Service.PatientByID(ctx, s.actor, src.PatientID); err != nil {
		return err
	}
	if page.Types, err = c.Service.SourceResourceTypes(ctx, s.actor, id); err != nil {
		return err
	}
	page.Type = r.URL.Query().Get("type")
	if page.Type == "" && len(page.Types) > 0 {
		page.Type = page.Types[0].Type
	}
	if page.Type != "" {
		params := url.Values{"_source": {page.URI}, "_count": {strconv.Itoa(pageSize)}, "_sort": {"-_lastUpdated"}}
		if cur := r.URL.Query().Get(fhirsearch.CursorParam); cur != "" {
			params.Set(fhirsearch.CursorParam, cur)
		}
		q, err := c.Search.Parse(page.Type, params, true)
		if err != nil {
			return err
		}
		res, err := c.Service.SearchResources(ctx, s.actor, q)
		if err != nil {
			return err
		}
		page.Resources = res.Items
		if res.More && len(res.Items) > 0 {
			last := res.Items[len(res.Items)-1]
			next := url.Values{"type": {page.Type}, fhirsearch.CursorParam: {q.Next(fhirsearch.Position{UUID: last.ID, LastUpdated: last.LastUpdated})}}
			page.Next = r.URL.Path + "?" + next.Encode()
		}
	}
	c.render(w, r, s, http.StatusOK, "fhir-source.html", src.Label, "sources", page)
	return nil
}
