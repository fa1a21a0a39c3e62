package main

import (
	"bufio"
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"golang.org/x/term"

	"exchange/domain"
	"exchange/oauth"
)

// stringList is a repeatable string flag.
type stringList []string

func (l *stringList) String() string     { return strings.Join(*l, ",") }
func (l *stringList) Set(v string) error { *l = append(*l, v); return nil }

func createSuperuserCommand(ctx context.Context, s *settings, log *slog.Logger, io stdio, args []string) error {
	fs := newFlags("createsuperuser", io)
	email := fs.String("email", "", "the superuser's email address (required)")
	password := fs.String("password", "", "the password; else EXCHANGE_SUPERUSER_PASSWORD, else asked for on the terminal")
	first := fs.String("first-name", "", "first name")
	last := fs.String("last-name", "", "last name")
	pw, err := emailAndPassword(fs, args, io, email, password, "EXCHANGE_SUPERUSER_PASSWORD")
	if err != nil {
		return err
	}
	a, err := openApp(ctx, s, log, true)
	if err != nil {
		return err
	}
	defer a.Close()
	u, err := a.service.CreateUser(ctx, domain.NewUser{Email: *email, Password: pw, FirstName: *first, LastName: *last,
		Type: domain.UserPractitioner, IsSuperuser: true})
	if err != nil {
		return err
	}
	fmt.Fprintf(io.out, "Superuser %s created (id %d).\n", u.Email, u.ID)
	return nil
}

// changePasswordCommand sets a user's password. Their login sessions end
// and their OAuth tokens are revoked (domain.Service.SetPassword).
func changePasswordCommand(ctx context.Context, s *settings, log *slog.Logger, io stdio, args []string) error {
	fs := newFlags("changepassword", io)
	email := fs.String("email", "", "the user's email address (required)")
	password := fs.String("password", "", "the new password; else EXCHANGE_NEW_PASSWORD, else asked for on the terminal")
	pw, err := emailAndPassword(fs, args, io, email, password, "EXCHANGE_NEW_PASSWORD")
	if err != nil {
		return err
	}
	a, err := openApp(ctx, s, log, true)
	if err != nil {
		return err
	}
	defer a.Close()
	if err := a.service.SetPassword(ctx, *email, pw); err != nil {
		return err
	}
	fmt.Fprintf(io.out, "Password of %s changed; their sessions and tokens are ended.\n", *email)
	return nil
}

// emailAndPassword parses the flags of a command that sets a user's
// password: --email is required, and the password is that of --password,
// else of the environment variable env, else asked for.
func emailAndPassword(fs *flag.FlagSet, args []string, io stdio, email, password *string, env string) (string, error) {
	if err := parseFlags(fs, args); err != nil {
		return "", err
	}
	if *email == "" {
		return "", usageError(fs.Name() + ": --email is required")
	}
	if *password != "" {
		return *password, nil
	}
	if v := io.getenv(env); v != "" {
		return v, nil
	}
	return promptPassword(io)
}

// promptPassword asks for a password twice on a terminal, or reads one line
// from a pipe.
func promptPassword(io stdio) (string, error) {
	f, ok := io.in.(*os.File)
	if !ok || !term.IsTerminal(int(f.Fd())) {
		line, err := bufio.NewReader(io.in).ReadString('\n')
		if err != nil && line == "" {
			return "", errors.New("no password: pass --password, set EXCHANGE_SUPERUSER_PASSWORD, or type it on a terminal")
		}
		return strings.TrimRight(line, "\r\n"), nil
	}
	fmt.Fprint(io.err, "Password: ")
	first, err := term.ReadPassword(int(f.Fd()))
	fmt.Fprintln(io.err)
	if err != nil {
		return "", err
	}
	fmt.Fprint(io.err, "Password (again): ")
	second, err := term.ReadPassword(int(f.Fd()))
	fmt.Fprintln(io.err)
	if err != nil {
		return "", err
	}
	if string(first) != string(second) {
		return "", errors.New("the passwords do not match")
	}
	return string(first), nil
}

func clientsCommand(ctx context.Context, s *settings, log *slog.Logger, io stdio, args []string) error {
	if len(args) == 0 {
		return usageError("clients: want a subcommand: register, list or rotate-secret")
	}
	sub, args := args[0], args[1:]
	var reg oauth.ClientRegistration
	var redirects, logoutRedirects, origins stringList
	var owner, scopes, jwksFile, actsFor string
	fs := newFlags("clients "+sub, io)
	switch sub {
	case "register":
		fs.StringVar(&reg.Name, "name", "", "the client's name (required)")
		kind := fs.String("type", "confidential", "confidential, public or backend (SMART Backend Services)")
		fs.StringVar(&jwksFile, "jwks-file", "", "a backend client's public keys: a JWKS file (RS384 or ES384 keys)")
		fs.StringVar(&reg.JWKSURL, "jwks-url", "", "a backend client's public keys: the https URL of its JWKS")
		fs.StringVar(&actsFor, "acts-for", "", "the practitioner (email) a backend client acts for")
		fs.Int64Var(&reg.ActsForOrganizationID, "acts-for-organization", 0, "the organization (id) a backend client acts for, as a viewer")
		fs.Var(&redirects, "redirect-uri", "a redirect URI (repeatable; matched exactly)")
		fs.Var(&logoutRedirects, "post-logout-redirect-uri", "a post-logout redirect URI (repeatable)")
		fs.Var(&origins, "allowed-origin", "an allowed origin (repeatable)")
		fs.BoolVar(&reg.SkipAuthorization, "trusted", false, "skip the consent page")
		fs.StringVar(&reg.ID, "id", "", "the client id (generated when empty)")
		fs.StringVar(&reg.Secret, "secret", "", "the secret of a confidential client (generated when empty)")
		fs.StringVar(&reg.TokenEndpointAuthMethod, "auth-method", "", "pin a confidential client to client_secret_basic or client_secret_post (default: either)")
		fs.StringVar(&scopes, "scopes", "", "the scopes the client may request, space-separated (default: every scope)")
		fs.StringVar(&owner, "user", "", "email of the user the client belongs to")
		if err := parseFlags(fs, args); err != nil {
			return err
		}
		reg.Type = domain.ClientType(*kind)
	case "list":
		if err := parseFlags(fs, args); err != nil {
			return err
		}
	case "rotate-secret":
		fs.StringVar(&reg.ID, "id", "", "the client id (required)")
		if err := parseFlags(fs, args); err != nil {
			return err
		}
		if reg.ID == "" {
			return usageError("clients rotate-secret: --id is required")
		}
	default:
		return usageError(fmt.Sprintf("clients: unknown subcommand %q (register, list, rotate-secret)", sub))
	}
	a, err := openApp(ctx, s, log, true)
	if err != nil {
		return err
	}
	defer a.Close()
	switch sub {
	case "register":
		reg.RedirectURIs, reg.PostLogoutRedirectURIs, reg.AllowedOrigins = redirects, logoutRedirects, origins
		reg.Scopes = strings.Fields(scopes)
		if jwksFile != "" {
			b, err := os.ReadFile(jwksFile)
			if err != nil {
				return fmt.Errorf("--jwks-file: %w", err)
			}
			reg.JWKS = string(b)
		}
		if actsFor != "" {
			u, err := a.service.UserByEmail(ctx, actsFor)
			if err != nil {
				return fmt.Errorf("--acts-for: %w", err)
			}
			reg.ActsForUserID = u.ID
		}
		if owner != "" {
			u, err := a.service.UserByEmail(ctx, owner)
			if err != nil {
				return err
			}
			reg.UserID = u.ID
		}
		c, secret, err := a.oauth.RegisterClient(ctx, reg)
		if err != nil {
			return err
		}
		fmt.Fprintf(io.out, "client_id=%s\n", c.ID)
		if secret != "" {
			fmt.Fprintf(io.out, "client_secret=%s\n", secret)
			fmt.Fprintln(io.err, "The secret is shown only now; if it is lost, run `exchange clients rotate-secret`.")
		}
	case "list":
		clients, err := a.oauth.Clients(ctx)
		if err != nil {
			return err
		}
		w := tabwriter.NewWriter(io.out, 0, 0, 2, ' ', 0)
		fmt.Fprintln(w, "CLIENT ID\tNAME\tTYPE\tAUTH METHOD\tTRUSTED\tREDIRECT URIS\tSCOPES")
		for _, c := range clients {
			method := c.TokenEndpointAuthMethod
			if c.Type == domain.ClientConfidential && !c.AuthMethodPinned {
				method = "client_secret_basic|client_secret_post"
			}
			fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%t\t%s\t%s\n", c.ID, c.Name, c.Type, method, c.SkipAuthorization,
				strings.Join(c.RedirectURIs, " "), strings.Join(c.Scopes, " "))
		}
		return w.Flush()
	case "rotate-secret":
		secret, err := a.oauth.RotateClientSecret(ctx, reg.ID)
		if err != nil {
			return err
		}
		fmt.Fprintf(io.out, "client_secret=%s\n", secret)
	}
	return nil
}

func tokenCommand(ctx context.Context, s *settings, log *slog.Logger, io stdio, args []string) error {
	if len(args) == 0 || args[0] != "create" {
		return usageError("token: want `token create --email USER [--ttl 24h] [--scopes S] [--patient N]`")
	}
	fs := newFlags("token create", io)
	email := fs.String("email", "", "the user the token acts for (required)")
	ttl := fs.Duration("ttl", 24*time.Hour, "how long the token is valid")
	scopes := fs.String("scopes", "", "the scopes granted, space-separated (default: openid profile email, the user's full access)")
	patient := fs.Int64("patient", 0, "the token's patient context, which patient/ scopes reach (a practitioner's token)")
	if err := parseFlags(fs, args[1:]); err != nil {
		return err
	}
	if *email == "" {
		return usageError("token create: --email is required")
	}
	a, err := openApp(ctx, s, log, true)
	if err != nil {
		return err
	}
	defer a.Close()
	u, err := a.service.UserByEmail(ctx, *email)
	if err != nil {
		return err
	}
	granted := strings.Fields(*scopes)
	if len(granted) == 0 {
		granted = oauth.ScriptScopes
	}
	token, expires, err := a.oauth.IssueScopedAccessToken(ctx, u.ID, *ttl, granted, *patient)
	if err != nil {
		return err
	}
	fmt.Fprintln(io.out, token)
	fmt.Fprintf(io.err, "Bearer token for %s, valid until %s.\n", u.Email, expires.Format(time.RFC3339))
	return nil
}

func invitationCommand(ctx context.Context, s *settings, log *slog.Logger, io stdio, args []string) error {
	fs := newFlags("invitation", io)
	patientID := fs.Int64("patient-id", 0, "the patient (required)")
	clientID := fs.String("client-id", demoClientID, "the client app that redeems the code: an app's client id, or "+oauth.ConsoleClientID+" for the web console")
	base := fs.String("url", cmp.Or(io.getenv("EXCHANGE_URL"), fmt.Sprintf("http://localhost:%d", s.Port)),
		"where patients' browsers reach the service, for a console invitation's link (else EXCHANGE_URL)")
	replace := fs.Bool("replace-login", false, "replace the patient's login if they have one: it ends at once")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *patientID <= 0 {
		return usageError("invitation: --patient-id is required")
	}
	origin, ok := httpOrigin(*base)
	if !ok {
		return usageError(fmt.Sprintf("invitation: --url %q is not an http(s) URL without path, query or fragment", *base))
	}
	a, err := openApp(ctx, s, log, true)
	if err != nil {
		return err
	}
	defer a.Close()
	// A console invitation's link is a path on the service, made absolute
	// on origin; an app's is its absolute redirect URI.
	sent, err := a.oauth.Invite(ctx, domain.SystemActor(), oauth.InvitationRequest{PatientID: *patientID, ClientID: *clientID,
		ReplaceLogin: *replace, Origin: origin})
	if err != nil {
		return err
	}
	if sent.LoginReplaced {
		fmt.Fprintln(io.err, "The patient's login was replaced: their password no longer works and their sessions and tokens ended.")
	}
	if sent.SentTo != "" {
		fmt.Fprintf(io.err, "Emailed to %s; single use, valid until %s.\n", sent.SentTo, sent.ExpiresAt.Format(time.RFC3339))
		return nil
	}
	fmt.Fprintln(io.out, sent.Link)
	fmt.Fprintf(io.err, "Single use, valid until %s; whoever opens it first becomes the patient: hand it to them only. "+
		"An app redeems it with PATIENT_AUTHORIZATION_CODE_VERIFIER.\n", sent.ExpiresAt.Format(time.RFC3339))
	return nil
}

// httpOrigin reads an http(s) origin: scheme and host, a trailing slash
// allowed, nothing else.
func httpOrigin(raw string) (string, bool) {
	u, err := url.Parse(strings.TrimSuffix(raw, "/"))
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User != nil ||
		u.Path != "" || u.RawQuery != "" || u.Fragment != "" || u.ForceQuery {
		return "", false
	}
	return u.Scheme + "://" + u.Host, true
}

func migrateCommand(ctx context.Context, s *settings, log *slog.Logger, io stdio, args []string) error {
	if err := parseFlags(newFlags("migrate", io), args); err != nil {
		return err
	}
	a, err := openApp(ctx, s, log, true)
	if err != nil {
		return err
	}
	defer a.Close()
	fmt.Fprintf(io.out, "Indexes of database %q are in place (%d created now).\n", s.MongoDatabase, a.indexes)
	return nil
}

// healthcheckCommand asks the local service's /health (the process
// answers) and then its /ready (the database answers, indexes and
// standards data in place); for container health checks. --live asks
// /health only.
func healthcheckCommand(ctx context.Context, s *settings, _ *slog.Logger, io stdio, args []string) error {
	fs := newFlags("healthcheck", io)
	live := fs.Bool("live", false, "check liveness (/health) only, not readiness (/ready)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	paths := []string{"/health", "/ready"}
	if *live {
		paths = paths[:1]
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	for _, path := range paths {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("http://127.0.0.1:%d%s", s.Port, path), nil)
		if err != nil {
			return err
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return fmt.Errorf("healthcheck: %w", err)
		}
		body := firstKiB(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("healthcheck: %s answered %s: %s", path, resp.Status, body)
		}
	}
	fmt.Fprintln(io.out, "ok")
	return nil
}

// firstKiB is the start of an answer's body, for a message.
func firstKiB(r io.Reader) string {
	b, _ := io.ReadAll(io.LimitReader(r, 1<<10))
	return strings.TrimSpace(string(b))
}
