package domain

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
)

// EHR is the exchange's client of patients' EHRs: SMART App Launch,
// standalone launch, the exchange being the client (package smartclient,
// over golang.org/x/oauth2). Errors of the EHR's answers are *EHRError.
type EHR interface {
	// Discover reads {iss}/.well-known/smart-configuration.
	Discover(ctx context.Context, iss string) (*SMARTConfiguration, error)
	// AuthorizeURL is where the patient's browser goes: the authorize
	// endpoint with the client, the scopes, the state, aud = iss and the
	// PKCE S256 challenge of verifier.
	AuthorizeURL(c EHRClientConfig, state, verifier string) string
	// Exchange redeems an authorization code with its verifier. A signed
	// id_token is checked against the EHR's keys (jwks_uri) when the EHR
	// publishes them.
	Exchange(ctx context.Context, c EHRClientConfig, code, verifier string) (*EHRToken, error)
	// Revoke revokes the token's refresh token (else its access token) at
	// the revocation endpoint.
	Revoke(ctx context.Context, c EHRClientConfig, t *EHRToken) error
	// Open is a FHIR session on the token, which refreshes it when it
	// expires and hands the new one to saved before using it.
	Open(ctx context.Context, c EHRClientConfig, t *EHRToken, saved func(*EHRToken) error) EHRSession
}

// EHRSession reads an EHR's FHIR API as the patient.
type EHRSession interface {
	// Get reads a URL under the EHR's FHIR base (a resource, a search, a
	// next link), with the session's timeouts and bounded retries of
	// transient failures; at most maxBytes of the answer are read
	// (CodeTooLong beyond).
	Get(ctx context.Context, url string, maxBytes int64) ([]byte, error)
}

// EHRError is a refusal or failure of an EHR: its HTTP status (0 for a
// network failure or a timeout) and what it said, never a token.
type EHRError struct {
	Status  int
	Message string
}

func (e *EHRError) Error() string {
	if e.Status == 0 {
		return "the EHR could not be reached: " + e.Message
	}
	return fmt.Sprintf("the EHR answered %d: %s", e.Status, e.Message)
}

// SMARTConfiguration is what an EHR's smart-configuration says.
type SMARTConfiguration struct {
	Issuer                string   `json:"issuer"`
	AuthorizationEndpoint string   `json:"authorization_endpoint"`
	TokenEndpoint         string   `json:"token_endpoint"`
	RevocationEndpoint    string   `json:"revocation_endpoint"`
	JWKSURI               string   `json:"jwks_uri"`
	Capabilities          []string `json:"capabilities"`
	ScopesSupported       []string `json:"scopes_supported"`
	CodeChallengeMethods  []string `json:"code_challenge_methods_supported"`
}

// scopesV2 reports whether the EHR takes SMART v2 scopes (.rs), by its
// capabilities or the scopes it lists.
func (c *SMARTConfiguration) scopesV2() bool {
	return slices.Contains(c.Capabilities, "permission-v2") ||
		slices.ContainsFunc(c.ScopesSupported, func(s string) bool { return strings.HasSuffix(s, ".rs") })
}

// EHRClientConfig is the exchange as one EHR's client.
type EHRClientConfig struct {
	Issuer        string // the FHIR base: aud
	ClientID      string
	ClientSecret  string // "": a public client (PKCE only)
	AuthorizeURL  string
	TokenURL      string
	RevocationURL string
	JWKSURI       string
	RedirectURI   string
	Scopes        []string
}

// EHRToken is a token response of an EHR.
type EHRToken struct {
	AccessToken  string    `json:"accessToken"`
	RefreshToken string    `json:"refreshToken,omitempty"`
	TokenType    string    `json:"tokenType,omitempty"`
	Expiry       time.Time `json:"expiry,omitzero"`
	Scope        string    `json:"scope,omitempty"`
	// Patient is the SMART launch context: the EHR's id of the patient.
	Patient string `json:"patient,omitempty"`
	// FHIRUser is the id_token's fhirUser claim, when a checked id_token
	// gave one.
	FHIRUser string `json:"fhirUser,omitempty"`
}

// EHRClient is the registration of the exchange as a client of an EHR:
// of one brand's (BrandID), or of every brand of a vendor that has none
// of its own (BrandID 0, Vendor set). Superusers set it.
type EHRClient struct {
	BrandID  int64
	Vendor   string
	ClientID string
	// SealedSecret is the client secret, sealed (sealer); nil for a public
	// client.
	SealedSecret []byte
	// Scopes replace the resource scopes the exchange asks for (the EHR
	// registration may grant fewer types); empty: one per pulled type.
	Scopes      []string
	LastUpdated time.Time
}

// EHRClientChange sets a client registration.
type EHRClientChange struct {
	BrandID  int64
	Vendor   string
	ClientID string
	// Secret is the client secret; nil keeps the stored one, "" makes the
	// client public.
	Secret *string
	Scopes []string
}

// EHRAuthorization is a connection begun and not yet finished: the
// authorize request the patient's browser took to the EHR. It is found by
// its state (the hash of it is the key) and used once.
type EHRAuthorization struct {
	StateHash      string
	PatientID      int64
	BrandID        int64
	Client         EHRClientConfig // without its secret, read again at the callback
	SealedVerifier []byte
	// KeepUpdated: the patient lets the exchange pull again by itself
	// (EHRConnection.SyncAllowed), for which it asks offline_access.
	KeepUpdated bool
	ExpiresAt   time.Time
}

// EHRConnection is a patient's connection to an EHR: the tokens its
// authorization gave, sealed, and the FHIR source its pulls write to.
type EHRConnection struct {
	ID        int64
	PatientID int64
	BrandID   int64
	Issuer    string // the EHR's FHIR base (SMART iss)
	SourceID  int64
	// EHRPatientID is the EHR's id of the patient (the token's patient),
	// also the patient's identifier (Issuer, EHRPatientID).
	EHRPatientID string
	Client       EHRClientConfig // the endpoints; no secret
	SealedToken  []byte
	// Scope is what the EHR granted.
	Scope string
	// SyncAllowed: the patient lets the exchange pull again by itself
	// (PATIENT_ACCESS_SYNC_INTERVAL) and what changed only.
	SyncAllowed bool
	// Status is connected, or reconnect once the EHR refused the token.
	Status EHRConnectionStatus
	// LastRunAt is when the last pull started; LastCompleteAt when the
	// last pull that read every type started (an incremental pull reads
	// what changed since).
	LastRunAt, LastCompleteAt time.Time
	CreatedAt, LastUpdated    time.Time
}

// EHRConnectionStatus is the state of a connection.
type EHRConnectionStatus string

// The states of a connection.
const (
	EHRConnected EHRConnectionStatus = "connected"
	// EHRReconnect: the EHR refused the token (401): the patient must
	// connect again.
	EHRReconnect EHRConnectionStatus = "reconnect"
)

// EHRConnectionStore keeps client registrations, authorizations begun and
// connections.
type EHRConnectionStore interface {
	// SetEHRClient upserts the registration of its brand (BrandID) or
	// vendor.
	SetEHRClient(ctx context.Context, c *EHRClient) error
	EHRClients(ctx context.Context) ([]EHRClient, error)
	// EHRClientOf returns the brand's registration, else its vendor's;
	// CodeNotFound when neither is set.
	EHRClientOf(ctx context.Context, brandID int64, vendor string) (*EHRClient, error)
	CreateEHRAuthorization(ctx context.Context, a *EHRAuthorization) error
	// TakeEHRAuthorization removes and returns the authorization of a
	// state hash (used once, by the first taker); CodeNotFound when there
	// is none.
	TakeEHRAuthorization(ctx context.Context, stateHash string) (*EHRAuthorization, error)
	// SaveEHRConnection stores a connection, replacing the patient's
	// connection to the same Issuer (whose ID it then takes); assigns ID
	// and LastUpdated.
	SaveEHRConnection(ctx context.Context, c *EHRConnection) error
	EHRConnectionByID(ctx context.Context, id int64) (*EHRConnection, error)
	// EHRConnections returns the connections of the patients (all when
	// patientIDs is nil), by id.
	EHRConnections(ctx context.Context, patientIDs []int64) ([]EHRConnection, error)
	// UpdateEHRConnection changes the connection's tokens, status and
	// run times.
	UpdateEHRConnection(ctx context.Context, c *EHRConnection) error
	DeleteEHRConnection(ctx context.Context, id int64) error
	// FHIRSourceByBase returns the patient's FHIR source of an upstream
	// FHIR base; CodeNotFound when none.
	FHIRSourceByBase(ctx context.Context, patientID int64, base string) (*FHIRSource, error)
}

// authorizationLifetime is how long a begun connection waits for its
// callback: a sign-in at the EHR takes minutes, not hours.
const authorizationLifetime = 15 * time.Minute

// The scopes every connection asks for: the patient's identity and id;
// and, when the patient lets the exchange keep their record up to date,
// a refresh token (offline_access).
var baseEHRScopes = []string{"openid", "fhirUser", "launch/patient"}

// SetEHRClient sets the exchange's client registration for a brand or a
// vendor's brands; superusers only. The secret is sealed at rest.
func (s *Service) SetEHRClient(ctx context.Context, actor *Actor, in EHRClientChange) (*EHRClient, error) {
	if err := requireSuperuser(actor, "set EHR client registrations"); err != nil {
		return nil, err
	}
	c := &EHRClient{BrandID: in.BrandID, Vendor: strings.ToLower(strings.TrimSpace(in.Vendor)), ClientID: strings.TrimSpace(in.ClientID)}
	switch {
	case c.BrandID == 0 && c.Vendor == "":
		return nil, FieldErrorf("brand", "name a brand, or a vendor whose brands the registration serves")
	case c.BrandID != 0 && c.Vendor != "":
		return nil, FieldErrorf("vendor", "name a brand or a vendor, not both")
	case c.ClientID == "":
		return nil, FieldErrorf("client_id", "is required: the client id the EHR registered the exchange under")
	}
	if err := LimitIdentifier.checkTexts("client_id", c.ClientID, "vendor", c.Vendor); err != nil {
		return nil, err
	}
	if err := LimitIdentifier.CheckAll("scopes", in.Scopes); err != nil {
		return nil, err
	}
	for i, sc := range in.Scopes {
		if sc = strings.TrimSpace(sc); sc == "" || strings.ContainsAny(sc, " \t\r\n\"\\") {
			return nil, FieldErrorf(fmt.Sprintf("scopes[%d]", i), "is not a scope")
		}
		c.Scopes = append(c.Scopes, sc)
	}
	if c.BrandID != 0 {
		if _, err := s.EHRBrandByID(ctx, c.BrandID); err != nil {
			return nil, AsFieldError(err, "brand")
		}
	}
	var stored *EHRClient
	if existing, err := s.store.EHRClients(ctx); err == nil {
		for i := range existing {
			if existing[i].BrandID == c.BrandID && existing[i].Vendor == c.Vendor {
				stored = &existing[i]
			}
		}
	} else {
		return nil, err
	}
	switch {
	case in.Secret == nil && stored != nil:
		c.SealedSecret = stored.SealedSecret
	case in.Secret != nil && *in.Secret != "":
		if err := LimitSecret.Check("client_secret", *in.Secret); err != nil {
			return nil, err
		}
		sealed, err := s.seal.Seal([]byte(*in.Secret), clientSecretPurpose(c))
		if err != nil {
			return nil, err
		}
		c.SealedSecret = sealed
	}
	if err := s.store.SetEHRClient(ctx, c); err != nil {
		return nil, err
	}
	return c, nil
}

// clientSecretPurpose binds a sealed client secret to its registration.
func clientSecretPurpose(c *EHRClient) string {
	return "ehr-client-secret|" + strconv.FormatInt(c.BrandID, 10) + "|" + c.Vendor
}

// EHRClients lists the client registrations; superusers only. Secrets are
// never shown: a registration says only whether it has one.
func (s *Service) EHRClients(ctx context.Context, actor *Actor) ([]EHRClient, error) {
	if err := requireSuperuser(actor, "read EHR client registrations"); err != nil {
		return nil, err
	}
	return s.store.EHRClients(ctx)
}

// ehrClientOf is a brand's client configuration at its EHR: the
// registration (with its secret unsealed) and what discovery says.
func (s *Service) ehrClientOf(ctx context.Context, brand *EHRBrand) (*EHRClient, string, error) {
	reg, err := s.store.EHRClientOf(ctx, brand.ID, brand.Vendor)
	if IsCode(err, CodeNotFound) {
		return nil, "", Errorf(CodeNotSupported, "the exchange is not registered as a client of %s yet: a superuser sets its client id", brand.Name)
	}
	if err != nil {
		return nil, "", err
	}
	secret := ""
	if reg.SealedSecret != nil {
		plain, err := s.seal.Open(reg.SealedSecret, clientSecretPurpose(reg))
		if err != nil {
			return nil, "", fmt.Errorf("the client secret of %s: %w", brand.Name, err)
		}
		secret = string(plain)
	}
	return reg, secret, nil
}

// StartEHRConnection begins connecting the actor, a patient, to a brand's
// EHR: it discovers the EHR's SMART configuration, records the
// authorization begun (its state, PKCE verifier and endpoints) and returns
// the URL of the EHR's authorize endpoint, where the patient signs in and
// approves. redirectURI is the exchange's callback, which the EHR sends
// the browser back to (FinishEHRConnection). Only a patient connects, and
// only themselves. keepUpdated lets the exchange pull again later what
// changed, by itself and on demand (it asks the EHR for offline_access).
func (s *Service) StartEHRConnection(ctx context.Context, actor *Actor, brandID int64, redirectURI string, keepUpdated bool) (string, error) {
	if actor.Patient == nil {
		return "", Errorf(CodeForbidden, "only a patient connects their own EHR")
	}
	if err := s.patientAccessReady(); err != nil {
		return "", err
	}
	brand, err := s.EHRBrandByID(ctx, brandID)
	if err != nil {
		return "", AsFieldError(err, "brand")
	}
	reg, _, err := s.ehrClientOf(ctx, brand)
	if err != nil {
		return "", err
	}
	conf, err := s.ehr.Discover(ctx, brand.FHIRBaseURL)
	if err != nil {
		return "", ehrFailure(brand, "discovering its SMART configuration", err)
	}
	if conf.AuthorizationEndpoint == "" || conf.TokenEndpoint == "" {
		return "", Errorf(CodeNotSupported, "%s publishes no authorize and token endpoints in its SMART configuration", brand.Name)
	}
	if len(conf.CodeChallengeMethods) > 0 && !slices.Contains(conf.CodeChallengeMethods, "S256") {
		return "", Errorf(CodeNotSupported, "%s does not take PKCE S256, which the exchange requires", brand.Name)
	}
	client := EHRClientConfig{Issuer: brand.FHIRBaseURL, ClientID: reg.ClientID, AuthorizeURL: conf.AuthorizationEndpoint,
		TokenURL: conf.TokenEndpoint, RevocationURL: conf.RevocationEndpoint, JWKSURI: conf.JWKSURI, RedirectURI: redirectURI,
		Scopes: ehrScopes(reg.Scopes, conf.scopesV2(), keepUpdated)}
	state, verifier := randomToken(32), randomToken(32) // 256 bits each
	sealed, err := s.seal.Seal([]byte(verifier), "ehr-verifier|"+stateHash(state))
	if err != nil {
		return "", err
	}
	a := &EHRAuthorization{StateHash: stateHash(state), PatientID: actor.Patient.ID, BrandID: brand.ID, Client: client,
		SealedVerifier: sealed, KeepUpdated: keepUpdated, ExpiresAt: s.Now().Add(authorizationLifetime)}
	if err := s.store.CreateEHRAuthorization(ctx, a); err != nil {
		return "", err
	}
	return s.ehr.AuthorizeURL(client, state, verifier), nil
}

// ehrScopes are the scopes a connection asks for: the base ones (and
// offline_access when asked), then the
// registration's own, or read access to every type a pull reads, as SMART
// v1 writes it (patient/Condition.read, as large vendors still expect) or,
// when the EHR takes them, v2 (patient/Condition.rs).
func ehrScopes(registered []string, v2, offline bool) []string {
	out := slices.Clone(baseEHRScopes)
	if offline {
		out = append(out, "offline_access")
	}
	if len(registered) > 0 {
		return append(out, registered...)
	}
	suffix := ".read"
	if v2 {
		suffix = ".rs"
	}
	out = append(out, "patient/Patient"+suffix)
	for _, t := range PulledTypes {
		out = append(out, "patient/"+t+suffix)
	}
	return out
}

// FinishEHRConnection completes a connection at the exchange's callback,
// where the EHR sent the patient's browser: the state must be one begun
// (and not yet finished) by the same patient, signed in; the code is
// redeemed with the authorization's PKCE verifier, and the token response
// must name the patient. The EHR's patient id becomes the patient's
// identifier (Issuer, id), refused with CodeDuplicate when it is another
// patient's; the tokens are stored sealed, with the FHIR source of the
// EHR (one per patient and EHR, made on the first connection). A first
// pull starts at once. ehrError is the callback's error parameter: the
// patient declined, or the EHR refused.
func (s *Service) FinishEHRConnection(ctx context.Context, actor *Actor, state, code, ehrError string) (*EHRConnection, error) {
	if actor.Patient == nil {
		return nil, Errorf(CodeForbidden, "only a patient connects their own EHR")
	}
	if err := s.patientAccessReady(); err != nil {
		return nil, err
	}
	if state == "" {
		return nil, FieldErrorf("state", "is missing: the EHR did not send back the connection's state")
	}
	a, err := s.store.TakeEHRAuthorization(ctx, stateHash(state))
	switch {
	case IsCode(err, CodeNotFound):
		return nil, Errorf(CodeInvalid, "this connection is unknown, finished already or expired: start it again from your connected records")
	case err != nil:
		return nil, err
	case a.PatientID != actor.Patient.ID:
		// Begun by another patient: the browser signed in to the exchange
		// is not the one that started it. Nothing is connected.
		return nil, Errorf(CodeForbidden, "this connection was begun by another patient: sign in as the patient who started it")
	case s.Now().After(a.ExpiresAt):
		return nil, Errorf(CodeInvalid, "this connection expired: start it again from your connected records")
	case ehrError != "":
		return nil, Errorf(CodeInvalid, "the EHR did not authorize the connection (%s)", truncateRunes(ehrError, 100))
	case code == "":
		return nil, FieldErrorf("code", "is missing: the EHR sent back no authorization code")
	}
	brand, err := s.EHRBrandByID(ctx, a.BrandID)
	if err != nil {
		return nil, err
	}
	_, secret, err := s.ehrClientOf(ctx, brand)
	if err != nil {
		return nil, err
	}
	verifier, err := s.seal.Open(a.SealedVerifier, "ehr-verifier|"+a.StateHash)
	if err != nil {
		return nil, err
	}
	client := a.Client
	client.ClientSecret = secret
	tok, err := s.ehr.Exchange(ctx, client, code, string(verifier))
	if err != nil {
		return nil, ehrFailure(brand, "redeeming the authorization code", err)
	}
	if tok.Patient == "" {
		// Without it no patient-scoped search can be made, and the record
		// would not be known as the patient's. Revoked: nothing stays.
		_ = s.ehr.Revoke(ctx, client, tok)
		return nil, Errorf(CodeNotSupported, "%s's token response names no patient (the SMART launch/patient context): nothing was connected", brand.Name)
	}
	if err := checkUpstreamID("patient", tok.Patient); err != nil {
		_ = s.ehr.Revoke(ctx, client, tok)
		return nil, Errorf(CodeNotSupported, "%s named a patient id that cannot be kept: nothing was connected", brand.Name)
	}
	if err := s.claimEHRPatient(ctx, actor, brand.FHIRBaseURL, tok.Patient); err != nil {
		_ = s.ehr.Revoke(ctx, client, tok)
		return nil, err
	}
	src, err := s.ehrSource(ctx, actor, brand)
	if err != nil {
		return nil, err
	}
	c := &EHRConnection{PatientID: actor.Patient.ID, BrandID: brand.ID, Issuer: brand.FHIRBaseURL, SourceID: src.ID,
		EHRPatientID: tok.Patient, Client: a.Client, Scope: tok.Scope, SyncAllowed: a.KeepUpdated && tok.RefreshToken != "",
		Status: EHRConnected, CreatedAt: s.Now()}
	if c.SealedToken, err = s.sealToken(c, tok); err != nil {
		return nil, err
	}
	if err := s.store.SaveEHRConnection(ctx, c); err != nil {
		return nil, err
	}
	s.audit(ctx, actor, AuditCreate, AuditKindConnect, nil, "Endpoint", nil, []int64{c.PatientID})
	s.startPull(c.ID, PullOnConnect)
	return c, nil
}

// claimEHRPatient makes the EHR's patient id the patient's identifier
// (system: the EHR's FHIR base), unless it is already: CodeDuplicate,
// with a clear message, when it belongs to another patient.
func (s *Service) claimEHRPatient(ctx context.Context, actor *Actor, iss, ehrPatientID string) error {
	ident := Identifier{System: iss, Value: ehrPatientID}
	p, err := s.store.PatientByID(ctx, actor.Patient.ID)
	if err != nil {
		return err
	}
	if slices.Contains(p.Identifiers, ident) {
		return nil
	}
	_, err = s.UpdatePatient(ctx, actor, p.ID, PatientPatch{AddIdentifiers: []Identifier{ident}})
	if IsCode(err, CodeDuplicate) {
		return Errorf(CodeDuplicate, "this EHR record (patient %s at %s) is already connected to another patient of the exchange: nothing was connected", ehrPatientID, iss)
	}
	if IsCode(err, CodeInvalid) && strings.Contains(ErrorMessage(err), "already an identifier") {
		return nil // added meanwhile, by a connection of the same patient
	}
	return err
}

// ehrSource is the patient's FHIR source of a brand's EHR: the one of its
// FHIR base, made on the first connection.
func (s *Service) ehrSource(ctx context.Context, actor *Actor, brand *EHRBrand) (*FHIRSource, error) {
	src, err := s.store.FHIRSourceByBase(ctx, actor.Patient.ID, brand.FHIRBaseURL)
	if !IsCode(err, CodeNotFound) {
		return src, err
	}
	src = &FHIRSource{PatientID: actor.Patient.ID, Label: truncateRunes(brand.Name, LimitName.Max), FHIRBase: brand.FHIRBaseURL}
	if err := s.store.CreateFHIRSource(ctx, src); err != nil {
		return nil, err
	}
	return src, nil
}

// sealToken seals a connection's token, bound to its patient and EHR.
func (s *Service) sealToken(c *EHRConnection, t *EHRToken) ([]byte, error) {
	data, err := json.Marshal(t)
	if err != nil {
		return nil, err
	}
	return s.seal.Seal(data, tokenPurpose(c))
}

// openToken unseals a connection's token.
func (s *Service) openToken(c *EHRConnection) (*EHRToken, error) {
	data, err := s.seal.Open(c.SealedToken, tokenPurpose(c))
	if err != nil {
		return nil, err
	}
	var t EHRToken
	if err := json.Unmarshal(data, &t); err != nil {
		return nil, fmt.Errorf("the sealed token of EHR connection %d: %w", c.ID, err)
	}
	return &t, nil
}

func tokenPurpose(c *EHRConnection) string {
	return "ehr-token|" + strconv.FormatInt(c.PatientID, 10) + "|" + c.Issuer
}

// EHRConnectionsOfPatient lists a patient's connections: the patient's
// own, and those of a patient the actor may read.
func (s *Service) EHRConnectionsOfPatient(ctx context.Context, actor *Actor, patientID int64) ([]EHRConnection, error) {
	if _, err := s.readablePatient(ctx, actor, patientID); err != nil {
		return nil, err
	}
	return s.store.EHRConnections(ctx, []int64{patientID})
}

// connectionOf returns a connection the actor may act on: the patient's
// own, or any for a superuser; others are CodeNotFound when the actor may
// not read the patient, CodeForbidden when they may.
func (s *Service) connectionOf(ctx context.Context, actor *Actor, id int64, what string) (*EHRConnection, error) {
	c, err := s.store.EHRConnectionByID(ctx, id)
	if IsCode(err, CodeNotFound) {
		return nil, Errorf(CodeNotFound, "EHR connection %d does not exist", id)
	}
	if err != nil {
		return nil, err
	}
	if actor.holdsOff(c.PatientID) { // a token held to another patient, a superuser's too
		return nil, Errorf(CodeNotFound, "EHR connection %d does not exist", id)
	}
	if actor.IsSuperuser() || actor.Patient != nil && actor.Patient.ID == c.PatientID {
		return c, nil
	}
	if _, err := s.readablePatient(ctx, actor, c.PatientID); err != nil {
		return nil, Errorf(CodeNotFound, "EHR connection %d does not exist", id)
	}
	return nil, Errorf(CodeForbidden, "only the patient %s their EHR connection", what)
}

// DisconnectEHR ends a connection: its tokens are revoked at the EHR when
// it offers revocation, and deleted. What was pulled stays in the FHIR
// source, the patient's data. The patient (or a superuser) disconnects.
func (s *Service) DisconnectEHR(ctx context.Context, actor *Actor, id int64) (err error) {
	c, err := s.connectionOf(ctx, actor, id, "disconnects")
	defer func() {
		var patients []int64
		if c != nil {
			patients = []int64{c.PatientID}
		}
		s.audit(ctx, actor, AuditDelete, AuditKindConnect, err, "Endpoint", nil, patients)
	}()
	if err != nil {
		return err
	}
	if s.ehr != nil && c.Client.RevocationURL != "" {
		if tok, err := s.openToken(c); err == nil {
			brand, berr := s.store.EHRBrandByID(ctx, c.BrandID)
			client := c.Client
			if berr == nil {
				if _, secret, err := s.ehrClientOf(ctx, brand); err == nil {
					client.ClientSecret = secret
				}
			}
			if err := s.ehr.Revoke(ctx, client, tok); err != nil {
				// The tokens go anyway: the exchange keeps none.
				s.log.Warn("revoking an EHR connection's token failed; the token is deleted", "connection", c.ID, "error", err)
			}
		}
	}
	return s.store.DeleteEHRConnection(ctx, c.ID)
}

// ehrFailure is the error of an EHR that failed a step of connecting:
// CodeUnavailable (try again) for a network failure or the EHR's own
// fault, else CodeInvalid with what it said.
func ehrFailure(brand *EHRBrand, step string, err error) error {
	var e *EHRError
	if !errors.As(err, &e) {
		return err
	}
	if e.Status == 0 || e.Status >= 500 {
		return &Error{Code: CodeUnavailable, RetryAfter: 30 * time.Second, Message: fmt.Sprintf("%s failed while %s: %v", brand.Name, step, e)}
	}
	return Errorf(CodeInvalid, "%s refused %s: %v", brand.Name, step, e)
}

// stateHash is the key of an authorization begun: the state itself is
// not stored.
func stateHash(state string) string {
	sum := sha256.Sum256([]byte(state))
	return hex.EncodeToString(sum[:])
}

// randomToken is n random bytes, base64url.
func randomToken(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b) // never fails (crypto/rand)
	return base64.RawURLEncoding.EncodeToString(b)
}

// SetEHRSync lets the exchange keep a connection up to date by itself
// (allowed), or stops it; the patient decides. Allowing needs a refresh
// token, which a connection made without it lacks: it is made again.
func (s *Service) SetEHRSync(ctx context.Context, actor *Actor, id int64, allowed bool) (*EHRConnection, error) {
	c, err := s.connectionOf(ctx, actor, id, "changes")
	if err != nil {
		return nil, err
	}
	if actor.Patient == nil || actor.Patient.ID != c.PatientID {
		return nil, Errorf(CodeForbidden, "only the patient decides whether their EHR connection is kept up to date")
	}
	if allowed {
		tok, err := s.openToken(c)
		if err != nil {
			return nil, err
		}
		if tok.RefreshToken == "" {
			return nil, Errorf(CodeConflict, "this connection was made without offline access: connect again, choosing to keep your record up to date")
		}
	}
	c.SyncAllowed = allowed
	if err := s.store.UpdateEHRConnection(ctx, c); err != nil {
		return nil, err
	}
	return c, nil
}
