package main

import (
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	"exchange/domain"
	"exchange/handlers"
	"exchange/internal/mailer"
	"exchange/oauth"
	"exchange/omh"
	"exchange/telemetry"
)

// settings are the service's environment variables, parsed and checked. The
// settings table of docs/settings.md documents each one.
type settings struct {
	Port              int
	MongoURI          string
	MongoDatabase     string
	DataDir           string
	SecretKey         string // empty: generated and kept under DataDir
	RSAPrivateKeyPEM  string // empty: generated and kept under DataDir
	PatientChallenge  string
	PatientVerifier   string
	PatientCodeTTL    time.Duration
	MCPClientID       string
	MCPClientSecret   string
	MCPRedirectURI    string
	EmbeddedMongoAddr string
	FHIRSourceBase    string
	XverPackageDir    string
	XverPatchesDir    string
	XverConceptMapDir string
	// XverTranslateCodes applies the ConceptMaps in translate(); false
	// passes R4 codes through unchanged.
	XverTranslateCodes bool
	OMHSchemaDir       string
	OMHIEEESchemaDir   string
	FHIRPackagesDir    string
	TrustedProxies     oauth.TrustedProxies
	SessionLifetime    time.Duration
	SessionIdle        time.Duration
	MaxDataPointBytes  int
	Log                telemetry.LogConfig
	Metrics            telemetry.MetricsConfig
	// AuditRetention is how long audit events are kept; 0: for ever.
	AuditRetention time.Duration
	// PatientAccessSyncInterval is how often the connections patients let
	// the exchange keep up to date are pulled again; 0: never by itself.
	PatientAccessSyncInterval time.Duration
	// AuditBuffer is how many audit events may wait to be written.
	AuditBuffer int
	// EmbeddedSearchSlots and EmbeddedSearchQueue bound the searches
	// FerretDB runs at once, and how long others wait.
	EmbeddedSearchSlots int
	EmbeddedSearchQueue time.Duration
	// GoMemLimitSet says GOMEMLIMIT is set: the embedded mode's default
	// limit then stays out of the way.
	GoMemLimitSet bool
	// ExportConcurrency is how many bulk export jobs this process runs at
	// once; Exports the queue's size and the files' retention.
	ExportConcurrency int
	Exports           domain.ExportLimits
	// IdentityProviders are IDENTITY_PROVIDERS_FILE's; PasswordSignIn is
	// PASSWORD_SIGN_IN; TokenExchange is TOKEN_EXCHANGE_TRUSTED_ISSUERS
	// and TOKEN_EXCHANGE_AUDIENCE.
	IdentityProviders []domain.IdentityProvider
	PasswordSignIn    bool
	TokenExchange     oauth.TokenExchangeConfig
	// Mailer is SMTP_URL and SMTP_FROM: the delivery channel of
	// invitations; nil: none.
	Mailer *mailer.SMTP
	// PublicURL is PUBLIC_URL: the origin patients' browsers reach the
	// service at, which invitation links are made on; "": each request's.
	PublicURL string
}

// Defaults of the operations settings (docs/settings.md).
const (
	defaultAuditBuffer         = 10000
	defaultEmbeddedSearchSlots = 2
	defaultEmbeddedSearchQueue = 10 * time.Second
)

// defaultPatientVerifier is the reference PKCE verifier of patient
// authorization codes. It is public by design: client apps are configured
// with it; the secret is the code. Deployments may set their own pair.
const defaultPatientVerifier = "exchange-patient-invitation-reference-verifier-0001"

// defaultMCPRedirectURI is the reference deployment's gateway callback (the
// gateway of docker-compose.yml on its default port).
const defaultMCPRedirectURI = "http://localhost:8401/oauth/callback"

// Default locations of the standards data that scripts/setup prepares.
const (
	defaultXverPackageDir  = "standards/fhir/xver-r4-r5/maps"
	defaultOMHSchemaDir    = "standards/omh/schemas"
	defaultFHIRPackagesDir = "standards/fhir-packages"
)

// s256 returns the PKCE S256 challenge of a verifier.
func s256(verifier string) string {
	sum := sha256.Sum256([]byte(verifier))
	return base64.RawURLEncoding.EncodeToString(sum[:])
}

var pkceVerifierPattern = regexp.MustCompile(`^[A-Za-z0-9._~-]{43,128}$`)

// loadSettings reads and checks every setting. The error names the setting
// at fault in one line.
func loadSettings(getenv func(string) string) (*settings, error) {
	get := func(name, def string) string {
		if v := strings.TrimSpace(getenv(name)); v != "" {
			return v
		}
		return def
	}
	s := &settings{
		MongoURI:          get("MONGODB_URI", ""),
		MongoDatabase:     get("MONGODB_DATABASE", "exchange"),
		DataDir:           get("DATA_DIR", "data"),
		SecretKey:         get("SECRET_KEY", ""),
		RSAPrivateKeyPEM:  get("OIDC_RSA_PRIVATE_KEY", ""),
		PatientVerifier:   get("PATIENT_AUTHORIZATION_CODE_VERIFIER", defaultPatientVerifier),
		PatientChallenge:  get("PATIENT_AUTHORIZATION_CODE_CHALLENGE", s256(defaultPatientVerifier)),
		MCPClientID:       get("MCP_OAUTH_CLIENT_ID", ""),
		MCPClientSecret:   get("MCP_OAUTH_CLIENT_SECRET", ""),
		MCPRedirectURI:    get("MCP_OAUTH_REDIRECT_URI", defaultMCPRedirectURI),
		EmbeddedMongoAddr: get("EMBEDDED_MONGO_ADDR", "127.0.0.1:27017"),
		FHIRSourceBase:    strings.TrimRight(get("FHIR_SOURCE_BASE", "http://localhost:8000/fhir-source"), "/"),
		XverPatchesDir:    get("FHIR_XVER_PATCHES_DIR", ""),
	}
	var err error
	if s.Port, err = strconv.Atoi(get("PORT", "8000")); err != nil || s.Port < 0 || s.Port > 65535 {
		return nil, fmt.Errorf("PORT: %q is not a port number (0-65535)", getenv("PORT"))
	}
	if s.MongoURI != "" && !strings.HasPrefix(s.MongoURI, "mongodb://") && !strings.HasPrefix(s.MongoURI, "mongodb+srv://") {
		return nil, errors.New("MONGODB_URI: must start with mongodb:// or mongodb+srv://")
	}
	if !regexp.MustCompile(`^[A-Za-z0-9_-]{1,63}$`).MatchString(s.MongoDatabase) {
		return nil, fmt.Errorf("MONGODB_DATABASE: %q is not a database name (letters, digits, _ and -, at most 63)", s.MongoDatabase)
	}
	if s.SecretKey != "" && len(s.SecretKey) < oauth.MinSecretKeyLength {
		return nil, fmt.Errorf("SECRET_KEY: must be at least %d characters", oauth.MinSecretKeyLength)
	}
	if s.RSAPrivateKeyPEM != "" {
		// Environment files often carry the PEM on one line with \n escapes.
		s.RSAPrivateKeyPEM = strings.ReplaceAll(s.RSAPrivateKeyPEM, `\n`, "\n")
		if _, err := oauth.ParseRSAPrivateKey([]byte(s.RSAPrivateKeyPEM)); err != nil {
			return nil, fmt.Errorf("OIDC_RSA_PRIVATE_KEY: %v", err)
		}
	}
	if !pkceVerifierPattern.MatchString(s.PatientVerifier) {
		return nil, errors.New("PATIENT_AUTHORIZATION_CODE_VERIFIER: must be 43 to 128 characters of A-Z, a-z, 0-9, '-', '.', '_', '~' (RFC 7636)")
	}
	if s.PatientChallenge != s256(s.PatientVerifier) {
		return nil, errors.New("PATIENT_AUTHORIZATION_CODE_CHALLENGE: is not the S256 challenge of PATIENT_AUTHORIZATION_CODE_VERIFIER (set both, or neither)")
	}
	if s.PatientCodeTTL, err = parseDays(get("PATIENT_AUTHORIZATION_CODE_TTL", "7d")); err != nil || s.PatientCodeTTL <= 0 {
		return nil, fmt.Errorf("PATIENT_AUTHORIZATION_CODE_TTL: %q is not a positive duration (such as 7d, 36h or 3600)", getenv("PATIENT_AUTHORIZATION_CODE_TTL"))
	}
	if s.TrustedProxies, err = oauth.ParseTrustedProxies(getenv("TRUSTED_PROXIES")); err != nil {
		return nil, fmt.Errorf("TRUSTED_PROXIES: %v (a list of CIDR prefixes such as 10.0.0.0/8, 127.0.0.1)", err)
	}
	for _, d := range []struct {
		name string
		def  time.Duration
		dest *time.Duration
	}{
		{"LOGIN_SESSION_LIFETIME", oauth.DefaultSessionLifetime, &s.SessionLifetime},
		{"LOGIN_SESSION_IDLE_TIMEOUT", oauth.DefaultSessionIdleTimeout, &s.SessionIdle},
	} {
		*d.dest = d.def
		if v := strings.TrimSpace(getenv(d.name)); v != "" {
			if *d.dest, err = parseDays(v); err != nil || *d.dest < time.Minute {
				return nil, fmt.Errorf("%s: %q is not a duration of at least a minute (such as 12h, 30m, 1d or 3600)", d.name, v)
			}
		}
	}
	if s.MaxDataPointBytes, err = strconv.Atoi(get("MAX_DATA_POINT_BYTES", strconv.Itoa(domain.DefaultMaxDataPointBytes))); err != nil || s.MaxDataPointBytes < 1 {
		return nil, fmt.Errorf("MAX_DATA_POINT_BYTES: %q is not a positive number of bytes", getenv("MAX_DATA_POINT_BYTES"))
	}
	if (s.MCPClientID == "") != (s.MCPClientSecret == "") {
		return nil, errors.New("MCP_OAUTH_CLIENT_ID and MCP_OAUTH_CLIENT_SECRET: set both, or neither")
	}
	if s.MCPClientSecret != "" && len(s.MCPClientSecret) < oauth.MinClientSecretLength {
		return nil, fmt.Errorf("MCP_OAUTH_CLIENT_SECRET: must be at least %d characters", oauth.MinClientSecretLength)
	}
	if u, err := url.Parse(s.MCPRedirectURI); err != nil || !u.IsAbs() || u.Host == "" {
		return nil, fmt.Errorf("MCP_OAUTH_REDIRECT_URI: %q is not an absolute URL", s.MCPRedirectURI)
	}
	if _, _, err := net.SplitHostPort(s.EmbeddedMongoAddr); err != nil {
		return nil, fmt.Errorf("EMBEDDED_MONGO_ADDR: %q is not host:port", s.EmbeddedMongoAddr)
	}
	if s.XverTranslateCodes, err = strconv.ParseBool(get("FHIR_XVER_TRANSLATE_CODES", "true")); err != nil {
		return nil, fmt.Errorf("FHIR_XVER_TRANSLATE_CODES: %q is not true or false", getenv("FHIR_XVER_TRANSLATE_CODES"))
	}
	if u, err := url.Parse(s.FHIRSourceBase); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.RawQuery != "" || u.Fragment != "" {
		return nil, fmt.Errorf("FHIR_SOURCE_BASE: %q is not an http(s) URL without query or fragment", s.FHIRSourceBase)
	}
	for _, d := range []struct {
		name, def string
		dest      *string
	}{
		{"FHIR_XVER_PACKAGE_DIR", defaultXverPackageDir, &s.XverPackageDir},
		{"FHIR_XVER_CONCEPTMAPS_DIR", "", &s.XverConceptMapDir},
		{"OMH_SCHEMA_DIR", defaultOMHSchemaDir, &s.OMHSchemaDir},
		{"OMH_IEEE_SCHEMA_DIR", "", &s.OMHIEEESchemaDir},
		{"FHIR_PACKAGES_DIR", defaultFHIRPackagesDir, &s.FHIRPackagesDir},
		{"FHIR_XVER_PATCHES_DIR", "", &s.XverPatchesDir},
	} {
		// A directory named explicitly must exist; a default one may be
		// missing until scripts/setup has run (the features that read it
		// say so when used).
		if v := strings.TrimSpace(getenv(d.name)); v != "" {
			if fi, err := os.Stat(v); err != nil || !fi.IsDir() {
				return nil, fmt.Errorf("%s: %q is not a directory", d.name, v)
			}
			*d.dest = v
		} else {
			*d.dest = d.def
		}
	}
	// The IEEE 1752 schemas are read beside the Open mHealth ones unless
	// named: setting OMH_SCHEMA_DIR alone moves both.
	if s.OMHIEEESchemaDir == "" {
		s.OMHIEEESchemaDir = omh.IEEEDirBeside(s.OMHSchemaDir)
	}
	if s.XverConceptMapDir == "" {
		// The ConceptMaps ship beside the maps (scripts/setup's layout).
		s.XverConceptMapDir = filepath.Join(filepath.Dir(s.XverPackageDir), "conceptmaps")
	}
	if s.PublicURL, err = publicURL(get("PUBLIC_URL", "")); err != nil {
		return nil, err
	}
	if v := get("SMTP_URL", ""); v != "" {
		if s.Mailer, err = mailer.New(v, get("SMTP_FROM", "")); err != nil {
			return nil, err
		}
		// An emailed link made on a request's Host would go wherever the
		// request's sender pointed it.
		if s.PublicURL == "" {
			return nil, errors.New("SMTP_URL: set PUBLIC_URL too, the origin patients reach the service at: emailed invitation links are made on it")
		}
	} else if get("SMTP_FROM", "") != "" {
		return nil, errors.New("SMTP_FROM: set SMTP_URL too, or neither")
	}
	if err := loadOperations(s, get); err != nil {
		return nil, err
	}
	if err := loadExports(s, get); err != nil {
		return nil, err
	}
	if err := loadSignIn(s, get); err != nil {
		return nil, err
	}
	return s, nil
}

// defaultExportConcurrency is EXPORT_CONCURRENCY's default: one job at a
// time per process, so an export never takes both cores of a small host.
const defaultExportConcurrency = 1

// loadExports reads the settings of bulk export.
func loadExports(s *settings, get func(name, def string) string) error {
	s.Exports = domain.DefaultExportLimits
	for _, n := range []struct {
		name string
		def  int
		dest *int
	}{
		{"EXPORT_CONCURRENCY", defaultExportConcurrency, &s.ExportConcurrency},
		{"EXPORT_QUEUE", domain.DefaultExportLimits.Queue, &s.Exports.Queue},
	} {
		v := get(n.name, strconv.Itoa(n.def))
		var err error
		if *n.dest, err = strconv.Atoi(v); err != nil || *n.dest < 1 {
			return fmt.Errorf("%s: %q is not a positive whole number", n.name, v)
		}
	}
	v := get("EXPORT_RETENTION", "2h")
	var err error
	if s.Exports.Retention, err = parseDays(v); err != nil || s.Exports.Retention < time.Minute {
		return fmt.Errorf("EXPORT_RETENTION: %q is not a duration of at least a minute (such as 2h, 1d or 7200)", v)
	}
	return nil
}

// loadSignIn reads the settings of institutional sign-in: the identity
// providers' file, whether passwords sign in, and the token exchange.
func loadSignIn(s *settings, get func(name, def string) string) error {
	if path := get("IDENTITY_PROVIDERS_FILE", ""); path != "" {
		f, err := os.Open(path)
		if err != nil {
			return fmt.Errorf("IDENTITY_PROVIDERS_FILE: %v", err)
		}
		defer f.Close()
		if s.IdentityProviders, err = handlers.DecodeIdentityProviders(f); err != nil {
			return fmt.Errorf("IDENTITY_PROVIDERS_FILE: %s: %v", path, err)
		}
	}
	var err error
	if s.PasswordSignIn, err = strconv.ParseBool(get("PASSWORD_SIGN_IN", "true")); err != nil {
		return fmt.Errorf("PASSWORD_SIGN_IN: %q is not true or false", get("PASSWORD_SIGN_IN", ""))
	}
	issuers := strings.FieldsFunc(get("TOKEN_EXCHANGE_TRUSTED_ISSUERS", ""), func(r rune) bool { return r == ',' || r == ' ' })
	for _, iss := range issuers {
		u, err := url.Parse(iss)
		if err != nil || u.Host == "" || !(u.Scheme == "https" || (u.Scheme == "http" && domain.IsLoopbackHost(u.Hostname()))) {
			return fmt.Errorf("TOKEN_EXCHANGE_TRUSTED_ISSUERS: %q is not an https URL (http only on a loopback address)", iss)
		}
	}
	s.TokenExchange = oauth.TokenExchangeConfig{TrustedIssuers: issuers, Audience: get("TOKEN_EXCHANGE_AUDIENCE", "")}
	if (len(issuers) == 0) != (s.TokenExchange.Audience == "") {
		return errors.New("TOKEN_EXCHANGE_TRUSTED_ISSUERS and TOKEN_EXCHANGE_AUDIENCE: set both, or neither")
	}
	return nil
}

// loadOperations reads the settings of logs, metrics, the audit trail and
// the embedded database's bounds.
func loadOperations(s *settings, get func(name, def string) string) error {
	var err error
	if s.Log, err = telemetry.ParseLogConfig(get("LOG_FORMAT", ""), get("LOG_LEVEL", "")); err != nil {
		return err
	}
	if s.Metrics, err = telemetry.ParseMetricsConfig(get("METRICS_ADDR", ""), get("METRICS_TOKEN", "")); err != nil {
		return err
	}
	if v := get("PATIENT_ACCESS_SYNC_INTERVAL", ""); v != "" && v != "0" && v != "off" {
		if s.PatientAccessSyncInterval, err = parseDays(v); err != nil || s.PatientAccessSyncInterval < 5*time.Minute {
			return fmt.Errorf("PATIENT_ACCESS_SYNC_INTERVAL: %q is not off or a duration of at least 5 minutes (such as 1d or 6h)", v)
		}
	}
	if v := get("AUDIT_RETENTION", ""); v != "" {
		if s.AuditRetention, err = parseDays(v); err != nil || s.AuditRetention <= 0 {
			return fmt.Errorf("AUDIT_RETENTION: %q is not a positive duration (such as 2190d for six years, or 720h)", v)
		}
	}
	for _, n := range []struct {
		name string
		def  int
		dest *int
	}{
		{"AUDIT_BUFFER", defaultAuditBuffer, &s.AuditBuffer},
		{"EMBEDDED_SEARCH_SLOTS", defaultEmbeddedSearchSlots, &s.EmbeddedSearchSlots},
	} {
		v := get(n.name, strconv.Itoa(n.def))
		if *n.dest, err = strconv.Atoi(v); err != nil || *n.dest < 1 {
			return fmt.Errorf("%s: %q is not a positive whole number", n.name, v)
		}
	}
	s.GoMemLimitSet = get("GOMEMLIMIT", "") != ""
	v := get("EMBEDDED_SEARCH_QUEUE", defaultEmbeddedSearchQueue.String())
	if s.EmbeddedSearchQueue, err = parseDays(v); err != nil || s.EmbeddedSearchQueue <= 0 {
		return fmt.Errorf("EMBEDDED_SEARCH_QUEUE: %q is not a positive duration (such as 10s)", v)
	}
	return nil
}

// parseDays parses a Go duration, a number of seconds, or a number of days
// with the suffix d.
func parseDays(v string) (time.Duration, error) {
	if n, err := strconv.ParseInt(v, 10, 64); err == nil {
		return time.Duration(n) * time.Second, nil
	}
	if days, ok := strings.CutSuffix(v, "d"); ok {
		n, err := strconv.ParseFloat(days, 64)
		if err != nil {
			return 0, err
		}
		return time.Duration(n * float64(24*time.Hour)), nil
	}
	return time.ParseDuration(v)
}

// publicURL checks PUBLIC_URL: an http or https origin (scheme and host,
// no path, query or user), returned without a trailing slash.
func publicURL(v string) (string, error) {
	if v == "" {
		return "", nil
	}
	u, err := url.Parse(strings.TrimSuffix(v, "/"))
	if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" || u.Path != "" || u.RawQuery != "" || u.User != nil || u.Fragment != "" {
		return "", fmt.Errorf("PUBLIC_URL: %q is not an origin such as https://exchange.example.org", v)
	}
	return u.Scheme + "://" + u.Host, nil
}
