package repo

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strconv"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"exchange/domain"
)

// Patient access: the EHR brands patients pick from, the exchange's
// client registrations at EHRs, the connections begun and made (tokens
// sealed by the domain: this layer stores bytes), and the records of
// pulls. A pull holds its connection's lock, a write intent whose _id is
// the connection's (LockEHRPull): the intent machinery's instance leases
// say when its holder died.

const (
	colEHRBrands         = "ehr_brands"
	colEHRFacilities     = "ehr_facilities"
	colEHRClients        = "ehr_clients"
	colEHRAuthorizations = "ehr_authorizations"
	colEHRConnections    = "ehr_connections"
	colPullRuns          = "ehr_pull_runs"
)

type ehrBrandDoc struct {
	ID          int64     `bson:"_id"`
	Name        string    `bson:"name"`
	FHIRBaseURL string    `bson:"fhirBaseUrl"`
	Vendor      string    `bson:"vendor"`
	LastUpdated time.Time `bson:"lastUpdated"`
}

func (x ehrBrandDoc) brand() domain.EHRBrand {
	return domain.EHRBrand{ID: x.ID, Name: x.Name, FHIRBaseURL: x.FHIRBaseURL, Vendor: x.Vendor, LastUpdated: x.LastUpdated.UTC()}
}

// ehrFacilityDoc is a facility; its _id derives from its brand, name and
// address (the upsert key), sortKey orders the picker (brand, then
// facility, without case or accents).
type ehrFacilityDoc struct {
	ID          string   `bson:"_id"`
	BrandID     int64    `bson:"brandId"`
	BrandName   string   `bson:"brandName"`
	FHIRBaseURL string   `bson:"fhirBaseUrl"`
	Name        string   `bson:"name"`
	AddressText string   `bson:"addressText"`
	City        string   `bson:"city"`
	State       string   `bson:"state"`
	PostalCode  string   `bson:"postalCode"`
	Words       []string `bson:"words"`
	SortKey     string   `bson:"sortKey"`
}

func (x ehrFacilityDoc) facility() domain.EHRFacility {
	return domain.EHRFacility{ID: x.ID, BrandID: x.BrandID, BrandName: x.BrandName, FHIRBaseURL: x.FHIRBaseURL, Name: x.Name,
		AddressText: x.AddressText, City: x.City, State: x.State, PostalCode: x.PostalCode, Words: x.Words}
}

func facilityID(brandID int64, name, address string) string {
	sum := sha256.Sum256([]byte(strconv.FormatInt(brandID, 10) + "\x00" + name + "\x00" + address))
	return hex.EncodeToString(sum[:16])
}

// ImportEHRBrands implements domain.EHRBrandStore: the brands stored of
// the Bundle's endpoints are read in one query, new ones inserted with a
// block of ids, changed ones updated; likewise their facilities, by their
// derived _id. Two imports at once each insert what the other has not:
// duplicates of the unique keys are taken as stored.
func (d *DB) ImportEHRBrands(ctx context.Context, in []domain.EHRBrandImport) (domain.EHRBrandImportCounts, error) {
	var counts domain.EHRBrandImportCounts
	if len(in) == 0 {
		return counts, nil
	}
	urls := make([]string, len(in))
	for i, b := range in {
		urls[i] = b.Brand.FHIRBaseURL
	}
	var stored []ehrBrandDoc
	if err := d.findAll(ctx, colEHRBrands, bson.M{"fhirBaseUrl": bson.M{"$in": urls}}, &stored); err != nil {
		return counts, err
	}
	byURL := map[string]ehrBrandDoc{}
	for _, s := range stored {
		byURL[s.FHIRBaseURL] = s
	}
	// The same endpoint twice in a Bundle is one brand: the first name.
	var fresh []*domain.EHRBrandImport
	seen := map[string]*domain.EHRBrand{}
	for i := range in {
		b := &in[i].Brand
		if first := seen[b.FHIRBaseURL]; first != nil {
			*b = *first
			continue
		}
		seen[b.FHIRBaseURL] = b
		counts.Brands++
		s, ok := byURL[b.FHIRBaseURL]
		if !ok {
			fresh = append(fresh, &in[i])
			continue
		}
		b.ID, b.LastUpdated = s.ID, s.LastUpdated
		if s.Name != b.Name || s.Vendor != b.Vendor {
			b.LastUpdated = d.nowMillis()
			if _, err := d.c(colEHRBrands).UpdateOne(ctx, bson.M{"_id": s.ID},
				bson.M{"$set": bson.M{"name": b.Name, "vendor": b.Vendor, "lastUpdated": b.LastUpdated}}); err != nil {
				return counts, err
			}
			counts.BrandsUpdated++
		}
	}
	if len(fresh) > 0 {
		first, err := d.nextIDs(ctx, colEHRBrands, len(fresh))
		if err != nil {
			return counts, err
		}
		docs := make([]any, len(fresh))
		for i, f := range fresh {
			f.Brand.ID, f.Brand.LastUpdated = first+int64(i), d.nowMillis()
			docs[i] = ehrBrandDoc{f.Brand.ID, f.Brand.Name, f.Brand.FHIRBaseURL, f.Brand.Vendor, f.Brand.LastUpdated}
		}
		created, err := d.insertMissing(ctx, colEHRBrands, docs)
		if err != nil {
			return counts, err
		}
		counts.BrandsCreated += created
		if created < len(fresh) { // another import stored some meanwhile: their ids are the stored ones
			if err := d.findAll(ctx, colEHRBrands, bson.M{"fhirBaseUrl": bson.M{"$in": urls}}, &stored); err != nil {
				return counts, err
			}
			for _, s := range stored {
				if b := seen[s.FHIRBaseURL]; b != nil {
					b.ID = s.ID
				}
			}
		}
	}
	// Facilities.
	var docs []ehrFacilityDoc
	var ids []string
	for _, b := range in {
		brand := seen[b.Brand.FHIRBaseURL]
		for _, f := range b.Facilities {
			f.BrandID, f.BrandName, f.FHIRBaseURL = brand.ID, brand.Name, brand.FHIRBaseURL
			f.ID = facilityID(brand.ID, f.Name, f.AddressText)
			if slices.Contains(ids, f.ID) {
				continue
			}
			ids = append(ids, f.ID)
			f.Words = domain.FacilityWords(&f)
			docs = append(docs, ehrFacilityDoc{f.ID, f.BrandID, f.BrandName, f.FHIRBaseURL, f.Name, f.AddressText, f.City, f.State,
				f.PostalCode, f.Words, domain.SearchKey(f.BrandName) + "\x00" + domain.SearchKey(f.Name)})
		}
	}
	counts.Facilities = len(docs)
	var existing []ehrFacilityDoc
	if err := d.findAll(ctx, colEHRFacilities, bson.M{"_id": bson.M{"$in": ids}}, &existing); err != nil {
		return counts, err
	}
	byID := map[string]ehrFacilityDoc{}
	for _, e := range existing {
		byID[e.ID] = e
	}
	var missing []any
	for _, f := range docs {
		e, ok := byID[f.ID]
		switch {
		case !ok:
			missing = append(missing, f)
		case e.City != f.City || e.State != f.State || e.PostalCode != f.PostalCode || e.BrandName != f.BrandName || e.FHIRBaseURL != f.FHIRBaseURL:
			if _, err := d.c(colEHRFacilities).ReplaceOne(ctx, bson.M{"_id": f.ID}, f); err != nil {
				return counts, err
			}
		}
	}
	created, err := d.insertMissing(ctx, colEHRFacilities, missing)
	counts.FacilitiesCreated = created
	return counts, err
}

// insertMissing inserts docs, unordered, and returns how many it
// inserted: a duplicate key is one stored already.
func (d *DB) insertMissing(ctx context.Context, col string, docs []any) (int, error) {
	if len(docs) == 0 {
		return 0, nil
	}
	res, err := d.c(col).InsertMany(ctx, docs, options.InsertMany().SetOrdered(false))
	inserted := 0
	if res != nil {
		inserted = len(res.InsertedIDs)
	}
	var bulk mongo.BulkWriteException
	if errors.As(err, &bulk) && bulk.WriteConcernError == nil && !slices.ContainsFunc(bulk.WriteErrors, func(e mongo.BulkWriteError) bool { return !mongo.IsDuplicateKeyError(e) }) {
		return len(docs) - len(bulk.WriteErrors), nil
	}
	return inserted, err
}

// EHRBrandByID implements domain.EHRBrandStore.
func (d *DB) EHRBrandByID(ctx context.Context, id int64) (*domain.EHRBrand, error) {
	var x ehrBrandDoc
	if err := d.findOne(ctx, colEHRBrands, bson.M{"_id": id}, &x, fmt.Sprintf("EHR brand %d does not exist", id)); err != nil {
		return nil, err
	}
	b := x.brand()
	return &b, nil
}

// SearchEHRFacilities implements domain.EHRBrandStore: each word a prefix
// of a word of the facility (an anchored regular expression, which
// MongoDB answers from the words index), the state equal, the postal code
// a prefix; sorted by sortKey.
func (d *DB) SearchEHRFacilities(ctx context.Context, q domain.EHRFacilityQuery) ([]domain.EHRFacility, error) {
	filter := bson.D{}
	for _, w := range q.Words {
		filter = append(filter, bson.E{Key: "words", Value: bson.M{"$regex": "^" + regexp.QuoteMeta(w)}})
	}
	if q.State != "" {
		filter = append(filter, bson.E{Key: "state", Value: q.State})
	}
	if q.PostalCode != "" {
		filter = append(filter, bson.E{Key: "postalCode", Value: bson.M{"$regex": "^" + regexp.QuoteMeta(q.PostalCode)}})
	}
	if len(q.Words) > 1 { // one condition per word on the same field: $and
		var and bson.A
		rest := bson.D{}
		for _, e := range filter {
			if e.Key == "words" {
				and = append(and, bson.D{e})
			} else {
				rest = append(rest, e)
			}
		}
		filter = append(rest, bson.E{Key: "$and", Value: and})
	}
	var docs []ehrFacilityDoc
	err := d.findAll(ctx, colEHRFacilities, filter, &docs,
		options.Find().SetSort(bson.D{{Key: "sortKey", Value: 1}, {Key: "_id", Value: 1}}).SetLimit(int64(q.Limit)))
	return convert(docs, ehrFacilityDoc.facility), err
}

type ehrClientDoc struct {
	ID           string    `bson:"_id"` // brand:<id> or vendor:<name>
	BrandID      int64     `bson:"brandId"`
	Vendor       string    `bson:"vendor"`
	ClientID     string    `bson:"clientId"`
	SealedSecret []byte    `bson:"sealedSecret,omitempty"`
	Scopes       []string  `bson:"scopes"`
	LastUpdated  time.Time `bson:"lastUpdated"`
}

func ehrClientKey(brandID int64, vendor string) string {
	if brandID != 0 {
		return "brand:" + strconv.FormatInt(brandID, 10)
	}
	return "vendor:" + vendor
}

func (x ehrClientDoc) client() domain.EHRClient {
	return domain.EHRClient{BrandID: x.BrandID, Vendor: x.Vendor, ClientID: x.ClientID, SealedSecret: x.SealedSecret,
		Scopes: x.Scopes, LastUpdated: x.LastUpdated.UTC()}
}

// SetEHRClient implements domain.EHRConnectionStore.
func (d *DB) SetEHRClient(ctx context.Context, c *domain.EHRClient) error {
	c.LastUpdated = d.nowMillis()
	doc := ehrClientDoc{ehrClientKey(c.BrandID, c.Vendor), c.BrandID, c.Vendor, c.ClientID, c.SealedSecret, nonNilStrings(c.Scopes), c.LastUpdated}
	_, err := d.c(colEHRClients).ReplaceOne(ctx, bson.M{"_id": doc.ID}, doc, options.Replace().SetUpsert(true))
	return err
}

// EHRClients implements domain.EHRConnectionStore.
func (d *DB) EHRClients(ctx context.Context) ([]domain.EHRClient, error) {
	var docs []ehrClientDoc
	err := d.findAll(ctx, colEHRClients, bson.D{}, &docs, options.Find().SetSort(bson.D{{Key: "_id", Value: 1}}))
	return convert(docs, ehrClientDoc.client), err
}

// EHRClientOf implements domain.EHRConnectionStore.
func (d *DB) EHRClientOf(ctx context.Context, brandID int64, vendor string) (*domain.EHRClient, error) {
	keys := []string{ehrClientKey(brandID, "")}
	if vendor != "" {
		keys = append(keys, ehrClientKey(0, vendor))
	}
	var docs []ehrClientDoc
	if err := d.findAll(ctx, colEHRClients, bson.M{"_id": bson.M{"$in": keys}}, &docs); err != nil {
		return nil, err
	}
	for _, key := range keys {
		for _, x := range docs {
			if x.ID == key {
				c := x.client()
				return &c, nil
			}
		}
	}
	return nil, domain.Errorf(domain.CodeNotFound, "no EHR client registration for brand %d", brandID)
}

// ehrEndpointsDoc is the part of a connection's client configuration that
// is kept: its endpoints and scopes, never a secret.
type ehrEndpointsDoc struct {
	Issuer        string   `bson:"issuer"`
	ClientID      string   `bson:"clientId"`
	AuthorizeURL  string   `bson:"authorizeUrl"`
	TokenURL      string   `bson:"tokenUrl"`
	RevocationURL string   `bson:"revocationUrl,omitempty"`
	JWKSURI       string   `bson:"jwksUri,omitempty"`
	RedirectURI   string   `bson:"redirectUri"`
	Scopes        []string `bson:"scopes"`
}

func toEndpointsDoc(c domain.EHRClientConfig) ehrEndpointsDoc {
	return ehrEndpointsDoc{c.Issuer, c.ClientID, c.AuthorizeURL, c.TokenURL, c.RevocationURL, c.JWKSURI, c.RedirectURI, nonNilStrings(c.Scopes)}
}

func (x ehrEndpointsDoc) config() domain.EHRClientConfig {
	return domain.EHRClientConfig{Issuer: x.Issuer, ClientID: x.ClientID, AuthorizeURL: x.AuthorizeURL, TokenURL: x.TokenURL,
		RevocationURL: x.RevocationURL, JWKSURI: x.JWKSURI, RedirectURI: x.RedirectURI, Scopes: x.Scopes}
}

type ehrAuthorizationDoc struct {
	ID             string          `bson:"_id"` // the state's hash
	PatientID      int64           `bson:"patientId"`
	BrandID        int64           `bson:"brandId"`
	Client         ehrEndpointsDoc `bson:"client"`
	SealedVerifier []byte          `bson:"sealedVerifier"`
	KeepUpdated    bool            `bson:"keepUpdated"`
	ExpiresAt      time.Time       `bson:"expiresAt"`
}

// CreateEHRAuthorization implements domain.EHRConnectionStore.
func (d *DB) CreateEHRAuthorization(ctx context.Context, a *domain.EHRAuthorization) error {
	_, err := d.c(colEHRAuthorizations).InsertOne(ctx, ehrAuthorizationDoc{a.StateHash, a.PatientID, a.BrandID, toEndpointsDoc(a.Client),
		a.SealedVerifier, a.KeepUpdated, a.ExpiresAt})
	return err
}

// TakeEHRAuthorization implements domain.EHRConnectionStore: one delete
// finds and removes it, so of two callbacks with the same state one gets
// it.
func (d *DB) TakeEHRAuthorization(ctx context.Context, stateHash string) (*domain.EHRAuthorization, error) {
	var x ehrAuthorizationDoc
	if err := mapErr(d.c(colEHRAuthorizations).FindOneAndDelete(ctx, bson.M{"_id": stateHash}).Decode(&x), "no such authorization"); err != nil {
		return nil, err
	}
	return &domain.EHRAuthorization{StateHash: x.ID, PatientID: x.PatientID, BrandID: x.BrandID, Client: x.Client.config(),
		SealedVerifier: x.SealedVerifier, KeepUpdated: x.KeepUpdated, ExpiresAt: x.ExpiresAt.UTC()}, nil
}

type ehrConnectionDoc struct {
	ID             int64           `bson:"_id"`
	PatientID      int64           `bson:"patientId"`
	BrandID        int64           `bson:"brandId"`
	Issuer         string          `bson:"issuer"`
	SourceID       int64           `bson:"sourceId"`
	EHRPatientID   string          `bson:"ehrPatientId"`
	Client         ehrEndpointsDoc `bson:"client"`
	SealedToken    []byte          `bson:"sealedToken"`
	Scope          string          `bson:"scope"`
	SyncAllowed    bool            `bson:"syncAllowed"`
	Status         string          `bson:"status"`
	LastRunAt      time.Time       `bson:"lastRunAt,omitzero"`
	LastCompleteAt time.Time       `bson:"lastCompleteAt,omitzero"`
	CreatedAt      time.Time       `bson:"createdAt"`
	LastUpdated    time.Time       `bson:"lastUpdated"`
}

func toConnectionDoc(c *domain.EHRConnection) ehrConnectionDoc {
	return ehrConnectionDoc{c.ID, c.PatientID, c.BrandID, c.Issuer, c.SourceID, c.EHRPatientID, toEndpointsDoc(c.Client), c.SealedToken,
		c.Scope, c.SyncAllowed, string(c.Status), c.LastRunAt, c.LastCompleteAt, c.CreatedAt, c.LastUpdated}
}

func (x ehrConnectionDoc) connection() domain.EHRConnection {
	return domain.EHRConnection{ID: x.ID, PatientID: x.PatientID, BrandID: x.BrandID, Issuer: x.Issuer, SourceID: x.SourceID,
		EHRPatientID: x.EHRPatientID, Client: x.Client.config(), SealedToken: x.SealedToken, Scope: x.Scope, SyncAllowed: x.SyncAllowed,
		Status: domain.EHRConnectionStatus(x.Status), LastRunAt: utcOrZero(x.LastRunAt), LastCompleteAt: utcOrZero(x.LastCompleteAt),
		CreatedAt: x.CreatedAt.UTC(), LastUpdated: x.LastUpdated.UTC()}
}

// SaveEHRConnection implements domain.EHRConnectionStore: a connection
// made again replaces the patient's connection to the same EHR, under its
// id; the unique (patient, issuer) index keeps one.
func (d *DB) SaveEHRConnection(ctx context.Context, c *domain.EHRConnection) error {
	var old ehrConnectionDoc
	err := d.c(colEHRConnections).FindOne(ctx, bson.M{"patientId": c.PatientID, "issuer": c.Issuer}).Decode(&old)
	switch {
	case err == nil:
		c.ID, c.CreatedAt = old.ID, old.CreatedAt
		c.LastRunAt, c.LastCompleteAt = old.LastRunAt, old.LastCompleteAt
	case errors.Is(err, mongo.ErrNoDocuments):
		if c.ID, err = d.nextID(ctx, colEHRConnections); err != nil {
			return err
		}
	default:
		return err
	}
	c.LastUpdated = d.nowMillis()
	_, err = d.c(colEHRConnections).ReplaceOne(ctx, bson.M{"_id": c.ID}, toConnectionDoc(c), options.Replace().SetUpsert(true))
	return mapErr(err, "")
}

// EHRConnectionByID implements domain.EHRConnectionStore.
func (d *DB) EHRConnectionByID(ctx context.Context, id int64) (*domain.EHRConnection, error) {
	var x ehrConnectionDoc
	if err := d.findOne(ctx, colEHRConnections, bson.M{"_id": id}, &x, fmt.Sprintf("EHR connection %d does not exist", id)); err != nil {
		return nil, err
	}
	c := x.connection()
	return &c, nil
}

// EHRConnections implements domain.EHRConnectionStore.
func (d *DB) EHRConnections(ctx context.Context, patientIDs []int64) ([]domain.EHRConnection, error) {
	filter := bson.M{}
	if patientIDs != nil {
		filter["patientId"] = bson.M{"$in": patientIDs}
	}
	var docs []ehrConnectionDoc
	err := d.findAll(ctx, colEHRConnections, filter, &docs, options.Find().SetSort(byID))
	return convert(docs, ehrConnectionDoc.connection), err
}

// UpdateEHRConnection implements domain.EHRConnectionStore: the fields a
// connection's life changes, and nothing else of it.
func (d *DB) UpdateEHRConnection(ctx context.Context, c *domain.EHRConnection) error {
	c.LastUpdated = d.nowMillis()
	set := bson.M{"sealedToken": c.SealedToken, "status": string(c.Status), "syncAllowed": c.SyncAllowed, "sourceId": c.SourceID,
		"lastUpdated": c.LastUpdated}
	if !c.LastRunAt.IsZero() {
		set["lastRunAt"] = c.LastRunAt
	}
	if !c.LastCompleteAt.IsZero() {
		set["lastCompleteAt"] = c.LastCompleteAt
	}
	res, err := d.c(colEHRConnections).UpdateOne(ctx, bson.M{"_id": c.ID}, bson.M{"$set": set})
	if err != nil {
		return err
	}
	return mustMatch(res.MatchedCount, "EHR connection %d does not exist", c.ID)
}

// DeleteEHRConnection implements domain.EHRConnectionStore.
func (d *DB) DeleteEHRConnection(ctx context.Context, id int64) error {
	return d.deleteOne(ctx, colEHRConnections, bson.M{"_id": id}, "EHR connection %d does not exist", id)
}

// FHIRSourceByBase implements domain.EHRConnectionStore.
func (d *DB) FHIRSourceByBase(ctx context.Context, patientID int64, base string) (*domain.FHIRSource, error) {
	var x fhirSourceDoc
	err := d.findOne(ctx, colFHIRSources, bson.M{"patientId": patientID, "fhirBase": base}, &x,
		fmt.Sprintf("patient %d has no FHIR source of %s", patientID, base), options.FindOne().SetSort(byID))
	if err != nil {
		return nil, err
	}
	s := x.fhirSource()
	return &s, nil
}

type pullTypeDoc struct {
	Type       string       `bson:"type"`
	Fetched    int          `bson:"fetched"`
	Stored     int          `bson:"stored"`
	Duplicates int          `bson:"duplicates"`
	Changed    int          `bson:"changed"`
	Refused    int          `bson:"refused"`
	Skipped    string       `bson:"skipped,omitempty"`
	Reasons    []pullReason `bson:"reasons,omitempty"`
	// Dropped lists the R4 paths the maps dropped, each counted: a list,
	// not a document, since the paths hold dots (FerretDB refuses them as
	// field names, and MongoDB's queries cannot name them).
	Dropped []droppedPath `bson:"dropped,omitempty"`
}

type droppedPath struct {
	Path  string `bson:"path"`
	Count int    `bson:"count"`
}

type pullReason struct {
	Reason string `bson:"reason"`
	Count  int    `bson:"count"`
}

type pullRunDoc struct {
	ID           int64         `bson:"_id"`
	ConnectionID int64         `bson:"connectionId"`
	PatientID    int64         `bson:"patientId"`
	SourceID     int64         `bson:"sourceId"`
	BrandName    string        `bson:"brandName"`
	Issuer       string        `bson:"issuer"`
	Trigger      string        `bson:"trigger"`
	Since        time.Time     `bson:"since,omitzero"`
	StartedAt    time.Time     `bson:"startedAt"`
	EndedAt      time.Time     `bson:"endedAt,omitzero"`
	Outcome      string        `bson:"outcome"`
	Message      string        `bson:"message,omitempty"`
	Types        []pullTypeDoc `bson:"types"`
}

func toPullRunDoc(r *domain.PullRun) pullRunDoc {
	x := pullRunDoc{r.ID, r.ConnectionID, r.PatientID, r.SourceID, r.BrandName, r.Issuer, string(r.Trigger), r.Since, r.StartedAt,
		r.EndedAt, string(r.Outcome), r.Message, []pullTypeDoc{}}
	for _, t := range r.Types {
		td := pullTypeDoc{t.Type, t.Fetched, t.Stored, t.Duplicates, t.Changed, t.Refused, t.Skipped, nil, nil}
		for _, reason := range t.Reasons {
			td.Reasons = append(td.Reasons, pullReason{reason.Reason, reason.Count})
		}
		for _, path := range slices.Sorted(maps.Keys(t.Dropped)) {
			td.Dropped = append(td.Dropped, droppedPath{path, t.Dropped[path]})
		}
		x.Types = append(x.Types, td)
	}
	return x
}

func (x pullRunDoc) run() domain.PullRun {
	r := domain.PullRun{ID: x.ID, ConnectionID: x.ConnectionID, PatientID: x.PatientID, SourceID: x.SourceID, BrandName: x.BrandName,
		Issuer: x.Issuer, Trigger: domain.PullTrigger(x.Trigger), Since: utcOrZero(x.Since), StartedAt: x.StartedAt.UTC(),
		EndedAt: utcOrZero(x.EndedAt), Outcome: domain.PullOutcome(x.Outcome), Message: x.Message}
	for _, t := range x.Types {
		rt := domain.PullTypeResult{Type: t.Type, Fetched: t.Fetched, Stored: t.Stored, Duplicates: t.Duplicates, Changed: t.Changed,
			Refused: t.Refused, Skipped: t.Skipped}
		for _, d := range t.Dropped {
			if rt.Dropped == nil {
				rt.Dropped = map[string]int{}
			}
			rt.Dropped[d.Path] = d.Count
		}
		for _, reason := range t.Reasons {
			rt.Reasons = append(rt.Reasons, domain.PullReason{Reason: reason.Reason, Count: reason.Count})
		}
		r.Types = append(r.Types, rt)
	}
	return r
}

// CreatePullRun implements domain.PullRunStore.
func (d *DB) CreatePullRun(ctx context.Context, r *domain.PullRun) error {
	id, err := d.nextID(ctx, colPullRuns)
	if err != nil {
		return err
	}
	r.ID = id
	_, err = d.c(colPullRuns).InsertOne(ctx, toPullRunDoc(r))
	return err
}

// FinishPullRun implements domain.PullRunStore.
func (d *DB) FinishPullRun(ctx context.Context, r *domain.PullRun) error {
	res, err := d.c(colPullRuns).ReplaceOne(ctx, bson.M{"_id": r.ID}, toPullRunDoc(r))
	if err != nil {
		return err
	}
	return mustMatch(res.MatchedCount, "pull run %d does not exist", r.ID)
}

// PullRuns implements domain.PullRunStore.
func (d *DB) PullRuns(ctx context.Context, patientIDs []int64, p domain.Page) (domain.List[domain.PullRun], error) {
	filter := bson.D{}
	if patientIDs != nil {
		filter = append(filter, bson.E{Key: "patientId", Value: bson.M{"$in": patientIDs}})
	}
	var docs []pullRunDoc
	total, err := d.listPage(ctx, colPullRuns, filter, bson.D{{Key: "_id", Value: -1}}, p, &docs)
	if err != nil {
		return domain.List[domain.PullRun]{}, err
	}
	return domain.List[domain.PullRun]{Items: convert(docs, pullRunDoc.run), Total: total}, domain.CheckPage(p, total)
}

// pullLockID is the _id of the intent that is a connection's pull lock:
// "pull" and the connection id, with no time or randomness, so that a
// second is a duplicate key (the other locks, identifierChangeID, begin
// with four zero bytes).
func pullLockID(connectionID int64) bson.ObjectID {
	var id bson.ObjectID
	copy(id[:4], "pull")
	binary.BigEndian.PutUint64(id[4:], uint64(connectionID))
	return id
}

// LockEHRPull implements domain.PullRunStore with a write intent of its
// own kind, whose _id is the lock: its insert takes it, atomically on
// MongoDB and FerretDB alike, and its process's lease says whether its
// holder is alive. A lock of a dead process (or older than
// intentTimeout, which outlasts a run's MaxRunTime) is repaired, which
// marks its runs interrupted, and taken.
func (d *DB) LockEHRPull(ctx context.Context, connectionID int64) (func(), error) {
	in := &intentDoc{ID: pullLockID(connectionID), Kind: intentEHRPull, ConnectionID: connectionID}
	for range 3 {
		err := d.open(ctx, in)
		if err == nil {
			return func() { _ = d.close(ctx, in, writeDone, nil) }, nil
		}
		if !isDuplicate(err) {
			return nil, err
		}
		live, err := d.settleIntents(ctx, bson.M{"_id": in.ID}, nil)
		if err != nil {
			return nil, err
		}
		if live {
			break
		}
	}
	return nil, domain.Errorf(domain.CodeConflict, "a pull of EHR connection %d is running", connectionID)
}

// interruptPulls marks the runs of a connection still recorded running as
// interrupted: the repair of a pull whose process died.
func (d *DB) interruptPulls(ctx context.Context, lock *intentDoc) error {
	_, err := d.c(colPullRuns).UpdateMany(ctx, bson.M{"connectionId": lock.ConnectionID, "outcome": string(domain.PullRunning)},
		bson.M{"$set": bson.M{"outcome": string(domain.PullInterrupted), "endedAt": d.nowMillis(),
			"message": "the process running the pull stopped: pull again"}})
	return err
}

func nonNilStrings(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}
