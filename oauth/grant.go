package oauth

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/ory/fosite"
	"github.com/ory/fosite/handler/openid"

	"exchange/domain"
)

// session is the fosite session of a grant: the ID token's claims, and
// the SMART launch context, which is stored with the grant so that it
// survives every refresh.
type session struct {
	openid.DefaultSession
	// LaunchPatient is the patient context (launch/patient): the patient
	// user's own record, or the one a practitioner chose. 0: none.
	LaunchPatient int64 `json:"launchPatient,omitempty"`
	// Organization is the organization a backend client's token acts for,
	// when it acts for no practitioner (the session then has no subject).
	Organization int64 `json:"organization,omitempty"`
}

var _ openid.Session = (*session)(nil)

// Clone implements fosite.Session, keeping the launch context.
func (s *session) Clone() fosite.Session {
	if s == nil {
		return nil
	}
	c := *s
	c.DefaultSession = *s.DefaultSession.Clone().(*openid.DefaultSession)
	return &c
}

// GetExtraClaims adds the launch context to introspection responses, as
// SMART's token introspection does.
func (s *session) GetExtraClaims() map[string]any {
	if s.LaunchPatient == 0 {
		return nil
	}
	return map[string]any{"patient": strconv.FormatInt(s.LaunchPatient, 10)}
}

// keepClaimsOf drops the ID token claims the scopes no longer grant (a
// refresh that narrowed email or fhirUser away).
func (s *session) keepClaimsOf(scopes fosite.Arguments) {
	for claim, scope := range identityClaims {
		if !scopes.Has(scope) {
			delete(s.Claims.Extra, claim)
		}
	}
}

// identityClaims are the ID token claims that a scope grants, by claim.
var identityClaims = map[string]string{"email": domain.ScopeEmail, "fhirUser": domain.ScopeFHIRUser}

// fhirPath is where the FHIR API is served on the exchange's origin: the
// fhirUser claim is an absolute URL under it, and a SMART app's aud must
// name it.
const fhirPath = "/FHIR/R5"

// fhirUser is the FHIR resource of the actor: their Patient record, or
// the Practitioner projection of a practitioner user.
func fhirUser(origin string, a *domain.Actor) string {
	if a.Patient != nil {
		return fmt.Sprintf("%s%s/Patient/%d", origin, fhirPath, a.Patient.ID)
	}
	return fmt.Sprintf("%s%s/Practitioner/%d", origin, fhirPath, a.User.ID)
}

// fhirAudience reports whether a SMART app's aud names this server's FHIR
// API (on the origin the request came through, at the canonical or the
// alias path): a token meant for another server is never issued here.
func fhirAudience(origin, aud string) bool {
	aud = strings.TrimSuffix(aud, "/")
	return aud == origin+fhirPath || aud == origin+strings.ToLower(fhirPath)
}

// checkScope accepts a scope of the vocabulary whose resource type, if it
// names one, the FHIR API serves. Returns domain.CodeInvalid.
func (p *Provider) checkScope(scope string) error {
	rs, err := domain.ParseScope(scope)
	if err != nil {
		return err
	}
	if rs != nil && rs.Type != "*" && !p.types[rs.Type] {
		return domain.Errorf(domain.CodeInvalid, "%q names %s, which is not a resource type of this server", scope, rs.Type)
	}
	return nil
}

// checkScopes checks a client registration's scopes: each one of the
// vocabulary. Returns a domain.CodeInvalid error on the scopes field.
func (p *Provider) checkScopes(scopes []string) error {
	for _, s := range scopes {
		if err := p.checkScope(s); err != nil {
			return domain.FieldErrorf("scopes", "%s", domain.ErrorMessage(err))
		}
	}
	return nil
}

// scopeStrategy is fosite's rule for whether a scope may be requested
// given the scopes a client is registered for (or a grant holds): a scope
// of the vocabulary, allowed as domain.ScopeAllowed says (a registered
// patient/*.cruds allows patient/Observation.rs?category=laboratory).
func scopeStrategy(types map[string]bool) fosite.ScopeStrategy {
	return func(allowed []string, scope string) bool {
		rs, err := domain.ParseScope(scope)
		if err != nil || (rs != nil && rs.Type != "*" && !types[rs.Type]) {
			return false
		}
		return domain.ScopeAllowed(allowed, scope)
	}
}

// withinCeiling reports whether a grant's scopes stay within a ceiling:
// the scopes a client is registered for, or the grant a refresh narrows.
// Each scope must be one the ceiling allows (domain.ScopeAllowed, as
// fosite checks requests against registrations), and a grant whose scopes
// name no resource or admin access, which acts with the user's full
// access (domain.NewAccess), stays within only a ceiling that does not
// limit access either: one that names no such access, or allows every
// access (widestAccess: a default registration, of this version's
// vocabulary or an earlier one's). So a client registered for reading
// only, asking for "openid" alone, skipping the consent page or unticking
// every scope on it, never obtains the user's full access; nor does a
// refresh that drops every resource scope.
func withinCeiling(granted, ceiling []string) bool {
	if slices.ContainsFunc(granted, func(s string) bool { return !domain.ScopeAllowed(ceiling, s) }) {
		return false
	}
	return !fullAccess(granted) || fullAccess(ceiling) ||
		!slices.ContainsFunc(widestAccess, func(s string) bool { return !domain.ScopeAllowed(ceiling, s) })
}

// widestAccess are the scopes that together allow everything a user may
// do. A ceiling that allows them limits no access, whichever other scopes
// it names: a default registration stores the vocabulary of its day
// (domain.AllScopes), and a scope added since (mcp, which stands for
// reads these allow) must not turn it into a limited one, which would
// void its clients' tokens of full access, those of `exchange token
// create` among them.
var widestAccess = []string{"patient/*.cruds", "user/*.cruds", domain.ScopeAdminRead, domain.ScopeAdminWrite}

// fullAccess reports whether scopes name no resource or admin access: a
// token of such scopes acts with everything its user may do.
func fullAccess(scopes []string) bool {
	acc, err := domain.NewAccess(scopes, 0)
	return err == nil && acc == nil
}

// withinRegistration refuses a refresh whose grant is beyond what its
// client is registered for now (withinCeiling): one granted before the
// registration was narrowed. (fosite refuses scopes the registration no
// longer allows; this adds the grants that name no access.) A code of such
// a grant lives minutes, and its tokens are refused where they are used
// (AuthenticateBearer).
func withinRegistration(ar fosite.AccessRequester) error {
	if ar.GetGrantTypes().ExactOne("refresh_token") && !withinCeiling(ar.GetGrantedScopes(), ar.GetClient().GetScopes()) {
		return fosite.ErrInvalidScope.WithHint("This grant is beyond what the client is now registered for: sign in again.")
	}
	return nil
}

// narrowRefresh applies the scope parameter of a refresh token request:
// fosite grants the original scopes again, whatever is asked. A refresh
// may narrow the grant to scopes the original covers, never widen it
// (withinCeiling); the new refresh token holds the narrowed grant.
func narrowRefresh(ar fosite.AccessRequester) error {
	requested := fosite.RemoveEmpty(strings.Split(ar.GetRequestForm().Get("scope"), " "))
	req, ok := ar.(*fosite.AccessRequest)
	if !ar.GetGrantTypes().ExactOne("refresh_token") || len(requested) == 0 || !ok {
		return nil
	}
	granted := ar.GetGrantedScopes()
	var narrowed fosite.Arguments
	for _, s := range requested {
		if !domain.ScopeAllowed(granted, s) {
			return fosite.ErrInvalidScope.WithHintf("The scope '%s' is not within the grant of this refresh token: a refresh may narrow a grant, never widen it.", s)
		}
		if !narrowed.Has(s) {
			narrowed = append(narrowed, s)
		}
	}
	if !withinCeiling(narrowed, granted) {
		return fosite.ErrInvalidScope.WithHint("A refresh that keeps no resource or admin scope of a grant that has some would act with the user's full access: keep at least one of them.")
	}
	req.GrantedScope = narrowed
	if s, ok := ar.GetSession().(*session); ok {
		s.keepClaimsOf(narrowed)
	}
	return nil
}

// grantedScopes is what the user allows of the requested scopes on the
// consent page: the ticked ones, and openid, which is not optional.
func grantedScopes(requested fosite.Arguments, ticked []string) fosite.Arguments {
	var out fosite.Arguments
	for _, s := range requested {
		if s == domain.ScopeOpenID || slices.Contains(ticked, s) {
			out = append(out, s)
		}
	}
	return out
}
