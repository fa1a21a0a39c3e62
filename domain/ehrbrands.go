package domain

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"time"
)

// Patient access: a patient connects their hospital's patient portal (an
// EHR's FHIR API) by SMART App Launch, the exchange being the SMART client,
// and the exchange pulls their record into the imported store. This file
// holds the brands a patient picks from; ehrconnections.go the connection
// (authorization and tokens); ehrpull.go the pulls and their records. The
// page docs/patient-access.md describes the whole.

// EHRBrand is a patient-recognizable organization whose patient portal
// serves a FHIR endpoint: a SMART App Launch "User-access Brand". Its
// FHIRBaseURL (the Endpoint's address) is the SMART iss a patient
// authorizes against; no two brands share one.
type EHRBrand struct {
	ID          int64
	Name        string
	FHIRBaseURL string
	// Vendor names the EHR product ("epic"): the client registration of a
	// vendor serves its brands that have none of their own. "" when none.
	Vendor      string
	LastUpdated time.Time
}

// EHRFacility is a care facility of a brand: what a patient searches and
// picks. BrandName and FHIRBaseURL are the brand's, kept on the facility
// so that a search reads one collection.
type EHRFacility struct {
	ID          string
	BrandID     int64
	BrandName   string
	FHIRBaseURL string
	Name        string
	AddressText string
	City        string
	State       string
	PostalCode  string
	// Words are the folded words of the facility's name, city and brand's
	// name (SearchKey): what q matches, each word of q as a prefix of one.
	Words []string
}

// EHRFacilityQuery selects facilities: each word of Q a prefix of a word
// of the facility's name, city or brand name (without case or accents),
// State equal (without case), PostalCode a prefix.
type EHRFacilityQuery struct {
	Words      []string // Q's folded words
	State      string   // upper case
	PostalCode string
	Limit      int
}

// The limits of a brand search.
const (
	DefaultBrandLimit = 25
	MaxBrandLimit     = 100
)

// EHRBrandImport is one brand of a Brands Bundle with its facilities, as
// the store upserts them.
type EHRBrandImport struct {
	Brand      EHRBrand
	Facilities []EHRFacility
}

// EHRBrandImportCounts is what an import of brands did.
type EHRBrandImportCounts struct {
	Brands, BrandsCreated, BrandsUpdated int
	Facilities, FacilitiesCreated        int
	// Skipped are the Organizations that are no brand with a FHIR
	// endpoint, nor a facility of one, with the reason: what the Bundle
	// holds that the import did not take.
	Skipped []string
}

// EHRBrandStore keeps brands and their facilities.
type EHRBrandStore interface {
	// ImportEHRBrands upserts brands by FHIRBaseURL (assigning ID, and
	// changing the name and vendor of one stored) and facilities by brand,
	// name and address text, each facility taking its brand's id, name
	// and URL. Idempotent. It reads what is stored of the brands in one
	// query, whatever their number.
	ImportEHRBrands(ctx context.Context, brands []EHRBrandImport) (EHRBrandImportCounts, error)
	EHRBrandByID(ctx context.Context, id int64) (*EHRBrand, error)
	// SearchEHRFacilities returns facilities sorted by brand name, then
	// facility name (without case), at most q.Limit.
	SearchEHRFacilities(ctx context.Context, q EHRFacilityQuery) ([]EHRFacility, error)
}

// SearchEHRFacilities is the brand picker's search (GET
// /api/v1/patient-access/brands): every signed-in user may search the
// catalogue, which is public information.
func (s *Service) SearchEHRFacilities(ctx context.Context, q, state, postal string, limit int) ([]EHRFacility, error) {
	if err := LimitName.checkTexts("q", q, "state", state); err != nil {
		return nil, err
	}
	if err := LimitIdentifier.Check("postal", postal); err != nil {
		return nil, err
	}
	switch {
	case limit == 0:
		limit = DefaultBrandLimit
	case limit < 1 || limit > MaxBrandLimit:
		return nil, FieldErrorf("limit", "is 1 to %d", MaxBrandLimit)
	}
	query := EHRFacilityQuery{Words: searchWords(q), State: strings.ToUpper(strings.TrimSpace(state)),
		PostalCode: strings.TrimSpace(postal), Limit: limit}
	if len(query.Words) > 8 {
		return nil, FieldErrorf("q", "has more than 8 words")
	}
	return s.store.SearchEHRFacilities(ctx, query)
}

// searchWords are the folded words of a text (SearchKey of each word).
func searchWords(text string) []string {
	var out []string
	for _, w := range strings.FieldsFunc(text, func(r rune) bool {
		return !(r == '\'' || r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r > 127)
	}) {
		if k := SearchKey(w); k != "" && !slices.Contains(out, k) {
			out = append(out, k)
		}
	}
	return out
}

// maxBrandsBundle bounds the Bundle an import reads: the largest vendor
// bundles are a few tens of megabytes.
const maxBrandsBundle = 256 << 20

// ImportEHRBrands reads a SMART App Launch User-access Brands Bundle (a
// collection of Organizations and Endpoints) and upserts its brands and
// facilities: superusers only (the file command acts as the system).
// vendor names the EHR product of the Bundle's brands ("" for none).
//
// A brand is an Organization with an Endpoint of connection type
// hl7-fhir-rest and an address (an R4 one, by its fhir-version extension,
// when it has several); a facility is an Organization whose partOf leads
// (in at most two steps) to a brand, and a brand without facilities is its
// own one facility per address. References resolve in every form a
// Bundle writes them: Type/id, a bare id, an absolute URL, and a urn:uuid:
// (or any) fullUrl.
func (s *Service) ImportEHRBrands(ctx context.Context, actor *Actor, bundle []byte, vendor string) (EHRBrandImportCounts, error) {
	if err := requireSuperuser(actor, "import EHR brands"); err != nil {
		return EHRBrandImportCounts{}, err
	}
	vendor = strings.ToLower(strings.TrimSpace(vendor))
	if err := LimitName.Check("vendor", vendor); err != nil {
		return EHRBrandImportCounts{}, err
	}
	if len(bundle) > maxBrandsBundle {
		return EHRBrandImportCounts{}, Errorf(CodeTooLong, "the Brands Bundle is over %d MiB", maxBrandsBundle>>20)
	}
	brands, skipped, err := parseBrandsBundle(bundle, vendor)
	if err != nil {
		return EHRBrandImportCounts{}, err
	}
	counts, err := s.store.ImportEHRBrands(ctx, brands)
	counts.Skipped = skipped
	return counts, err
}

// brandsEntry is an entry of a Brands Bundle, read as far as the import
// needs.
type brandsEntry struct {
	FullURL  string `json:"fullUrl"`
	Resource struct {
		ResourceType   string           `json:"resourceType"`
		ID             string           `json:"id"`
		Name           string           `json:"name"`
		Address        json.RawMessage  `json:"address"`
		Endpoint       []brandReference `json:"endpoint"`
		PartOf         *brandReference  `json:"partOf"`
		ConnectionType json.RawMessage  `json:"connectionType"`
		Status         string           `json:"status"`
		Extension      []struct {
			URL       string `json:"url"`
			ValueCode string `json:"valueCode"`
		} `json:"extension"`
	} `json:"resource"`
}

type brandReference struct {
	Reference string `json:"reference"`
}

type brandAddress struct {
	Text       string   `json:"text"`
	Line       []string `json:"line"`
	City       string   `json:"city"`
	State      string   `json:"state"`
	PostalCode string   `json:"postalCode"`
}

// parseBrandsBundle reads the brands of a Bundle and the Organizations it
// skipped, with why.
func parseBrandsBundle(data []byte, vendor string) ([]EHRBrandImport, []string, error) {
	var b struct {
		ResourceType string        `json:"resourceType"`
		Entry        []brandsEntry `json:"entry"`
	}
	if err := json.Unmarshal(data, &b); err != nil {
		return nil, nil, Errorf(CodeInvalid, "the Brands Bundle is not JSON of a Bundle: %v", err)
	}
	if b.ResourceType != "Bundle" {
		return nil, nil, FieldErrorf("resourceType", "is %q: a Brands Bundle is a Bundle", b.ResourceType)
	}
	// Every name an entry is known by: its fullUrl, Type/id, and its
	// absolute URL's last two segments.
	byName := map[string]*brandsEntry{}
	for i := range b.Entry {
		e := &b.Entry[i]
		r := &e.Resource
		if r.ID != "" {
			byName[r.ResourceType+"/"+r.ID] = e
		}
		if e.FullURL != "" {
			byName[e.FullURL] = e
			if typ, id, ok := lastTwoSegments(e.FullURL); ok {
				byName[typ+"/"+id] = e
			}
		}
	}
	resolve := func(ref, typ string) *brandsEntry {
		if ref == "" {
			return nil
		}
		e := byName[ref]
		if e == nil && !strings.Contains(ref, "/") && !strings.Contains(ref, ":") {
			e = byName[typ+"/"+ref] // a bare id
		}
		if e == nil {
			if t, id, ok := lastTwoSegments(ref); ok {
				e = byName[t+"/"+id]
			}
		}
		if e != nil && e.Resource.ResourceType != typ {
			return nil
		}
		return e
	}
	var out []EHRBrandImport
	brandOf := map[*brandsEntry]int{} // brand Organization -> index in out
	var skipped []string
	name := func(e *brandsEntry) string {
		return cmp.Or(e.Resource.Name, e.Resource.ID, e.FullURL, "(an Organization without name or id)")
	}
	for i := range b.Entry {
		e := &b.Entry[i]
		if e.Resource.ResourceType != "Organization" || len(e.Resource.Endpoint) == 0 {
			continue
		}
		base, why := brandEndpoint(e, resolve)
		if base == "" {
			skipped = append(skipped, name(e)+": "+why)
			continue
		}
		brandName := strings.TrimSpace(e.Resource.Name)
		if brandName == "" {
			brandName = base
		}
		brandOf[e] = len(out)
		out = append(out, EHRBrandImport{Brand: EHRBrand{Name: truncateRunes(brandName, LimitName.Max), FHIRBaseURL: base, Vendor: vendor}})
	}
	for i := range b.Entry {
		e := &b.Entry[i]
		if e.Resource.ResourceType != "Organization" || len(e.Resource.Endpoint) > 0 {
			continue
		}
		brand, ok := -1, false
		for up, depth := e, 0; up != nil && up.Resource.PartOf != nil && depth < 2; depth++ {
			up = resolve(up.Resource.PartOf.Reference, "Organization")
			if brand, ok = brandOf[up]; ok {
				break
			}
		}
		if !ok {
			if e.Resource.PartOf != nil {
				skipped = append(skipped, name(e)+": its partOf leads to no brand with a FHIR endpoint")
			} else {
				skipped = append(skipped, name(e)+": no FHIR endpoint, and part of no brand")
			}
			continue
		}
		facilityName := cmp.Or(strings.TrimSpace(e.Resource.Name), out[brand].Brand.Name)
		for _, a := range addressesOf(e.Resource.Address, 1) {
			out[brand].Facilities = append(out[brand].Facilities, facility(facilityName, a))
		}
	}
	for e, i := range brandOf {
		if len(out[i].Facilities) > 0 {
			continue
		}
		for _, a := range addressesOf(e.Resource.Address, 100) {
			out[i].Facilities = append(out[i].Facilities, facility(out[i].Brand.Name, a))
		}
	}
	return out, skipped, nil
}

// brandEndpoint is the FHIR base URL of a brand Organization: its R4
// hl7-fhir-rest Endpoint's address, else its first hl7-fhir-rest one's;
// "" and why when it has none.
func brandEndpoint(e *brandsEntry, resolve func(ref, typ string) *brandsEntry) (string, string) {
	var first, r4 string
	for _, ref := range e.Resource.Endpoint {
		ep := resolve(ref.Reference, "Endpoint")
		if ep == nil {
			continue
		}
		var ct struct {
			Code   string `json:"code"`
			System string `json:"system"`
		}
		var cts []struct{ Code string }
		if json.Unmarshal(ep.Resource.ConnectionType, &ct) != nil || ct.Code == "" {
			// R5 makes connectionType a list of CodeableConcepts
			if json.Unmarshal(ep.Resource.ConnectionType, &cts) != nil || len(cts) == 0 {
				continue
			}
			ct.Code = cts[0].Code
		}
		address := strings.TrimSpace(resolveAddress(ep))
		if ct.Code != "hl7-fhir-rest" || !isHTTPURL(address) || ep.Resource.Status == "off" || ep.Resource.Status == "error" {
			continue
		}
		if first == "" {
			first = address
		}
		for _, x := range ep.Resource.Extension {
			if strings.HasSuffix(x.URL, "endpoint-fhir-version") && strings.HasPrefix(x.ValueCode, "4.") && r4 == "" {
				r4 = address
			}
		}
	}
	if base := cmp.Or(r4, first); base != "" {
		return strings.TrimSuffix(base, "/"), ""
	}
	return "", "none of its endpoints is an active hl7-fhir-rest Endpoint of the Bundle with an http(s) address"
}

// resolveAddress is an Endpoint's address (its member shares the name
// of an Organization's list of addresses).
func resolveAddress(e *brandsEntry) string {
	var address string
	_ = json.Unmarshal(e.Resource.Address, &address)
	return address
}

// isHTTPURL reports whether s is an absolute http or https URL with a host.
func isHTTPURL(s string) bool {
	u, err := url.Parse(s)
	return err == nil && (u.Scheme == "https" || u.Scheme == "http") && u.Host != "" && u.User == nil
}

// addressesOf reads at most n addresses of an Organization; one empty
// address when it has none.
func addressesOf(raw json.RawMessage, n int) []brandAddress {
	var as []brandAddress
	_ = json.Unmarshal(raw, &as)
	if len(as) == 0 {
		return []brandAddress{{}}
	}
	return as[:min(len(as), n)]
}

// facility is a facility of a brand at an address.
func facility(name string, a brandAddress) EHRFacility {
	text := strings.TrimSpace(a.Text)
	if text == "" {
		var parts []string
		for _, p := range append(slices.Clone(a.Line), a.City, strings.TrimSpace(a.State+" "+a.PostalCode)) {
			if p = strings.TrimSpace(p); p != "" {
				parts = append(parts, p)
			}
		}
		text = strings.Join(parts, ", ")
	}
	return EHRFacility{Name: truncateRunes(name, LimitName.Max), AddressText: truncateRunes(text, LimitName.Max),
		City: truncateRunes(strings.TrimSpace(a.City), LimitName.Max), State: strings.ToUpper(truncateRunes(strings.TrimSpace(a.State), 64)),
		PostalCode: truncateRunes(strings.TrimSpace(a.PostalCode), 32)}
}

// FacilityWords are the words a facility is found by: its name's, its
// city's and its brand's.
func FacilityWords(f *EHRFacility) []string {
	return searchWords(f.Name + " " + f.City + " " + f.BrandName)
}

// lastTwoSegments reads Type/id at the end of a reference or URL.
func lastTwoSegments(ref string) (typ, id string, ok bool) {
	parts := strings.Split(strings.TrimSuffix(ref, "/"), "/")
	if len(parts) < 2 || parts[len(parts)-1] == "" || parts[len(parts)-2] == "" {
		return "", "", false
	}
	return parts[len(parts)-2], parts[len(parts)-1], true
}

// truncateRunes cuts s to at most n runes.
func truncateRunes(s string, n int) string {
	if r := []rune(s); len(r) > n {
		return string(r[:n])
	}
	return s
}

// EHRBrandByID returns a brand.
func (s *Service) EHRBrandByID(ctx context.Context, id int64) (*EHRBrand, error) {
	b, err := s.store.EHRBrandByID(ctx, id)
	if IsCode(err, CodeNotFound) {
		return nil, Errorf(CodeNotFound, "EHR brand %d does not exist", id)
	}
	return b, err
}

// String names a brand in messages.
func (b *EHRBrand) String() string { return fmt.Sprintf("%s (%s)", b.Name, b.FHIRBaseURL) }
