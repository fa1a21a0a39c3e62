package domain

import (
	"fmt"
	"net/url"
	"slices"
	"strings"
)

// The scopes a token can carry: the vocabulary of the authorization server
// and the ceiling they put on the permission model. Scopes never widen what
// a user may do; they can only narrow it:
//
//   - A token whose scopes name no resource access (openid, profile, email,
//     fhirUser, offline_access, online_access, launch/patient) acts with the
//     user's full access, as tokens did before scopes limited anything (the
//     tokens of `exchange token create`, and clients asking "openid email").
//   - Once a token carries any SMART resource scope (patient/... or
//     user/...) or an exchange/admin scope, every request needs both the
//     user's permission and a scope that covers it: a FHIR interaction on a
//     type needs a resource scope with that interaction and type, the admin
//     API needs exchange/admin.read (GET, HEAD) or exchange/admin.write
//     (every other method).
//   - patient/ scopes reach only the token's patient context (the SMART
//     launch patient); user/ scopes reach what the user may see; system/
//     scopes, which only backend clients (client_credentials) hold, reach
//     what the practitioner or organization the client acts for may see,
//     and only read and search it.
//   - Search constraints (?category=, ?code=) narrow reads and searches;
//     writes need a scope without constraints.

// The named scopes of the vocabulary.
const (
	ScopeOpenID        = "openid"
	ScopeProfile       = "profile"
	ScopeEmail         = "email"
	ScopeFHIRUser      = "fhirUser"
	ScopeOfflineAccess = "offline_access"
	ScopeOnlineAccess  = "online_access"
	ScopeLaunchPatient = "launch/patient"
	ScopeAdminRead     = "exchange/admin.read"
	ScopeAdminWrite    = "exchange/admin.write"
	// ScopeMCP lets a client the user trusts (a JupyterHub, a notebook
	// server) use the user's data through the MCP gateway, which accepts
	// its tokens as its own: it reads what the user may see and changes
	// nothing, the reach of the gateway's own grant (MCPReadScopes).
	ScopeMCP = "mcp"
)

// MCPReadScopes are what ScopeMCP stands for: reads of FHIR and of the
// admin API, within what the user may see.
var MCPReadScopes = []string{"user/*.rs", ScopeAdminRead}

// mcpPatientReadScopes are what ScopeMCP stands for in a token with a
// patient context (launch/patient): reads of that patient only, so that
// choosing a patient at sign-in narrows the assistant as it narrows an app.
var mcpPatientReadScopes = []string{"patient/*.rs", ScopeAdminRead}

// NamedScopes are the scopes of the vocabulary that are not resource
// scopes, in the order discovery lists them.
var NamedScopes = []string{ScopeOpenID, ScopeProfile, ScopeEmail, ScopeFHIRUser, ScopeOfflineAccess, ScopeOnlineAccess,
	ScopeLaunchPatient, ScopeAdminRead, ScopeAdminWrite, ScopeMCP}

// AllScopes are what a client may request when its registration names no
// scopes: every named scope and every resource scope (the wildcards cover
// any narrower one), so that a standard SMART app works with a default
// registration.
var AllScopes = append(slices.Clone(NamedScopes), "patient/*.cruds", "user/*.cruds")

// ConstraintParams are the search parameters a resource scope may be
// constrained with (SMART v2 granular scopes).
var ConstraintParams = []string{"category", "code"}

// Interactions is a set of FHIR interactions as SMART v2 resource scopes
// name them: c create, r read (and vread), u update (and patch), d delete,
// s search.
type Interactions uint8

// The interactions.
const (
	InteractionCreate Interactions = 1 << iota
	InteractionRead
	InteractionUpdate
	InteractionDelete
	InteractionSearch
)

const interactionLetters = "cruds"

var interactionVerbs = []string{"create", "read", "update", "delete", "search"}

// String spells the set as a scope does: "rs".
func (i Interactions) String() string {
	var b strings.Builder
	for k := range interactionLetters {
		if i&(1<<k) != 0 {
			b.WriteByte(interactionLetters[k])
		}
	}
	return b.String()
}

// Verbs names the interactions in words: "read, search".
func (i Interactions) Verbs() []string {
	var out []string
	for k, v := range interactionVerbs {
		if i&(1<<k) != 0 {
			out = append(out, v)
		}
	}
	return out
}

// SystemInteractions are what system/ scopes may allow: backend clients
// read and export, they never write.
const SystemInteractions = InteractionRead | InteractionSearch

// The SMART v1 spellings of interaction sets.
var v1Interactions = map[string]Interactions{
	"read":  InteractionRead | InteractionSearch,
	"write": InteractionCreate | InteractionUpdate | InteractionDelete,
	"*":     InteractionCreate | InteractionRead | InteractionUpdate | InteractionDelete | InteractionSearch,
}

// ResourceScope is a SMART resource scope, such as
// patient/Observation.rs?code=http://loinc.org|8867-4.
type ResourceScope struct {
	// Patient: the scope reaches the token's patient context only
	// (patient/); otherwise what the user may see (user/, or system/ for
	// a backend client's identity).
	Patient bool
	// System: a system/ scope, a backend client's; it reaches what user/
	// would, with reads and searches only.
	System bool
	// Type is a resource type, or "*" for every type.
	Type         string
	Interactions Interactions
	// Constraints narrow the scope to the resources matching every one.
	Constraints []ScopeConstraint
}

// ScopeConstraint is one search parameter of a granular scope: a resource
// matches it when it matches one of the values (FHIR token search:
// system|code, |code, system| or code).
type ScopeConstraint struct {
	Param  string
	Values []string
}

// ParseScope reads one scope of the vocabulary. A named scope gives nil;
// a resource scope, its parsed form. Anything else is CodeInvalid naming
// the scope. The resource type is checked for form only: which types exist
// is the caller's to say.
func ParseScope(scope string) (*ResourceScope, error) {
	if slices.Contains(NamedScopes, scope) {
		return nil, nil
	}
	bad := func(why string) error { return Errorf(CodeInvalid, "%q is not a scope of this server: %s", scope, why) }
	context, rest, ok := strings.Cut(scope, "/")
	if !ok || (context != "patient" && context != "user" && context != "system") {
		return nil, bad("scopes are openid, profile, email, fhirUser, offline_access, online_access, launch/patient, exchange/admin.read, exchange/admin.write, patient/<type>.<cruds>, user/<type>.<cruds> and system/<type>.<rs>")
	}
	rest, query, constrained := strings.Cut(rest, "?")
	typ, verbs, ok := strings.Cut(rest, ".")
	if !ok || !isScopeType(typ) {
		return nil, bad("a resource scope is " + context + "/<type or *>.<interactions>")
	}
	rs := &ResourceScope{Patient: context == "patient", System: context == "system", Type: typ}
	if v1, ok := v1Interactions[verbs]; ok {
		rs.Interactions = v1
	} else if rs.Interactions, ok = parseInteractions(verbs); !ok {
		return nil, bad("the interactions are a non-empty subset of c, r, u, d, s in that order (or read, write, *)")
	}
	if rs.System && rs.Interactions&^SystemInteractions != 0 {
		return nil, bad("system/ scopes read and search only: system/<type>.rs, .r or .s (or .read)")
	}
	if constrained {
		var err error
		if rs.Constraints, err = parseConstraints(query); err != nil {
			return nil, bad(err.Error())
		}
	}
	return rs, nil
}

// isScopeType accepts "*" and names shaped as FHIR resource types.
func isScopeType(t string) bool {
	if t == "*" {
		return true
	}
	if t == "" || len(t) > 64 || t[0] < 'A' || t[0] > 'Z' {
		return false
	}
	for _, r := range t {
		if !(r >= 'A' && r <= 'Z' || r >= 'a' && r <= 'z') {
			return false
		}
	}
	return true
}

// parseInteractions reads a SMART v2 interaction set: each letter of cruds
// at most once, in that order.
func parseInteractions(s string) (Interactions, bool) {
	var set Interactions
	next := 0
	for _, r := range s {
		k := strings.IndexRune(interactionLetters[next:], r)
		if k < 0 {
			return 0, false
		}
		next += k
		set |= 1 << next
		next++
	}
	return set, set != 0
}

// parseConstraints reads the query of a granular scope: param=value pairs
// joined by &, each param one of ConstraintParams, each value a comma
// separated list of tokens. Values are percent-decoded; a backslash (a
// FHIR search escape) is refused so that one spelling means one thing.
func parseConstraints(query string) ([]ScopeConstraint, error) {
	var out []ScopeConstraint
	for _, pair := range strings.Split(query, "&") {
		param, value, ok := strings.Cut(pair, "=")
		if !ok || !slices.Contains(ConstraintParams, param) {
			return nil, fmt.Errorf("a scope is constrained with %s=<system>|<code>", strings.Join(ConstraintParams, " or "))
		}
		decoded, err := url.PathUnescape(value)
		if err != nil || strings.ContainsAny(decoded, "\\ ") {
			return nil, fmt.Errorf("%s: %q is not a list of tokens", param, value)
		}
		c := ScopeConstraint{Param: param}
		for _, v := range strings.Split(decoded, ",") {
			system, code, hasSystem := strings.Cut(v, "|")
			if v == "" || strings.Contains(code, "|") || (hasSystem && system == "" && code == "") {
				return nil, fmt.Errorf("%s: %q is not a token (system|code, |code, system| or code)", param, v)
			}
			c.Values = append(c.Values, v)
		}
		out = append(out, c)
	}
	return out, nil
}

// Covers reports whether the scope allows everything other allows: the
// same context, a type it names (or every type), a subset of its
// interactions, and at least its constraints (each with a subset of its
// values). This is the rule of registrations (a client registered for
// patient/*.cruds may request patient/Observation.rs?category=vital-signs)
// and of refreshes (a refresh may narrow a grant, never widen it).
func (rs *ResourceScope) Covers(other *ResourceScope) bool {
	if rs.Patient != other.Patient || rs.System != other.System || (rs.Type != "*" && rs.Type != other.Type) || other.Interactions&^rs.Interactions != 0 {
		return false
	}
	for _, c := range rs.Constraints {
		if !slices.ContainsFunc(other.Constraints, func(o ScopeConstraint) bool {
			return o.Param == c.Param && !slices.ContainsFunc(o.Values, func(v string) bool { return !slices.Contains(c.Values, v) })
		}) {
			return false
		}
	}
	return true
}

// ScopeAllowed reports whether a list of scopes (a registration, or a
// grant) lets a client request scope: the scope itself, or for a resource
// scope one that covers it. A scope outside the vocabulary is never
// allowed.
func ScopeAllowed(allowed []string, scope string) bool {
	rs, err := ParseScope(scope)
	if err != nil {
		return false
	}
	if slices.Contains(allowed, scope) {
		return true
	}
	if rs == nil {
		return false
	}
	return slices.ContainsFunc(allowed, func(a string) bool {
		ars, err := ParseScope(a)
		return err == nil && ars != nil && ars.Covers(rs)
	})
}

// IsSystemScope reports whether scope is a system/ scope of the
// vocabulary: what backend clients, and only they, are granted.
func IsSystemScope(scope string) bool {
	rs, err := ParseScope(scope)
	return err == nil && rs != nil && rs.System
}

// Access is what a token lets its bearer do, within the user's
// permissions. A nil *Access is full access: the token names no resource
// or admin scope.
type Access struct {
	scopes                []string // as granted
	resources             []ResourceScope
	adminRead, adminWrite bool
	// patient is the token's patient context: what patient/ scopes reach
	// (0: none, and they reach nothing).
	patient int64
}

// NewAccess reads a token's granted scopes and its patient context (the
// SMART launch patient, 0 when it has none). It returns nil, full access,
// when the scopes name no resource and no admin access. A scope outside
// the vocabulary is CodeInvalid.
func NewAccess(scopes []string, patient int64) (*Access, error) {
	acc := &Access{patient: patient, scopes: scopes}
	limited := false
	if slices.Contains(scopes, ScopeMCP) {
		stands := MCPReadScopes
		if patient != 0 {
			stands = mcpPatientReadScopes
		}
		scopes = append(slices.Clone(scopes), stands...)
	}
	for _, s := range scopes {
		rs, err := ParseScope(s)
		if err != nil {
			return nil, err
		}
		switch {
		case rs != nil:
			acc.resources = append(acc.resources, *rs)
		case s == ScopeAdminRead:
			acc.adminRead = true
		case s == ScopeAdminWrite:
			acc.adminWrite = true
		default:
			continue
		}
		limited = true
	}
	if !limited {
		return nil, nil
	}
	return acc, nil
}

// WithAccess returns the actor limited to what a token allows (nil: full
// access). The patient context of a patient user's token, when it has
// none, is their own record.
func (a *Actor) WithAccess(acc *Access) *Actor {
	limited := *a
	if acc != nil && acc.patient == 0 && a.Patient != nil {
		withPatient := *acc
		withPatient.patient = a.Patient.ID
		acc = &withPatient
	}
	limited.access = acc
	return &limited
}

// ForAdminAPI returns the actor as the admin API serves it. A token with
// a patient context (a SMART launch, a patient's own token) is held to
// that patient there too: exchange/admin.read and exchange/admin.write
// reach the context patient's record and data, and no other patient's,
// as its patient/ scopes would on FHIR. Records that are nobody's data
// (organizations, studies, data sources) stay as the user's permissions
// say.
func (a *Actor) ForAdminAPI() *Actor {
	if a.access == nil || a.access.patient == 0 {
		return a
	}
	held := *a
	held.heldTo = a.access.patient
	return &held
}

// withoutHold is the actor without ForAdminAPI's hold.
func (a *Actor) withoutHold() *Actor {
	free := *a
	free.heldTo = 0
	return &free
}

// holdsOff reports whether the actor is held to a patient other than
// patientID (ForAdminAPI).
func (a *Actor) holdsOff(patientID int64) bool { return a.heldTo != 0 && a.heldTo != patientID }

// HasFullAccess reports whether the actor acts with everything the user
// may do: a login session, a command-line token, a token without resource
// or admin scopes.
func (a *Actor) HasFullAccess() bool { return a.access == nil }

// AllowAdmin decides whether the actor's token may call the admin API with
// an HTTP method: GET and HEAD need exchange/admin.read, every other
// method exchange/admin.write. Returns CodeForbidden naming the scope.
func (a *Actor) AllowAdmin(method string) error {
	if a.access == nil {
		return nil
	}
	if method == "GET" || method == "HEAD" {
		if !a.access.adminRead {
			return Errorf(CodeForbidden, "this token's scopes do not allow reading the admin API: it needs %s", ScopeAdminRead)
		}
		return nil
	}
	if !a.access.adminWrite {
		return Errorf(CodeForbidden, "this token's scopes do not allow changes through the admin API: it needs %s", ScopeAdminWrite)
	}
	return nil
}

// covering returns the token's resource scopes that allow the interaction
// on the type; CodeForbidden, naming the scope needed, when none does.
func (acc *Access) covering(i Interactions, resourceType string) ([]ResourceScope, error) {
	var out []ResourceScope
	for _, rs := range acc.resources {
		if rs.Interactions&i != 0 && (rs.Type == "*" || rs.Type == resourceType) {
			out = append(out, rs)
		}
	}
	if len(out) == 0 {
		return nil, Errorf(CodeForbidden, "this token's scopes do not allow %s of %s: it needs patient/%s.%s or user/%s.%s",
			i.Verbs()[0], resourceType, resourceType, i, resourceType, i)
	}
	return out, nil
}

// reachesPatient reports whether the token lets a search of the type name
// the patient (a join): it does unless its scopes that allow the
// interaction are all patient/ scopes, which reach the token's patient
// context only. A token that does not allow the interaction at all is
// refused before (AllowFHIR).
func (a *Actor) reachesPatient(i Interactions, resourceType string, patientID int64) bool {
	terms, narrowed, err := a.reach(i, resourceType)
	if err != nil || !narrowed {
		return true
	}
	return slices.ContainsFunc(terms, func(rs ResourceScope) bool { return !rs.Patient || patientID == a.access.patient })
}

// outsideContext reports whether the token reaches nothing of the
// patient, whatever the type: its resource scopes are all patient/ scopes
// and the patient is not its patient context.
func (a *Actor) outsideContext(patientID int64) bool {
	if a.access == nil || len(a.access.resources) == 0 || patientID == a.access.patient {
		return false
	}
	return !slices.ContainsFunc(a.access.resources, func(rs ResourceScope) bool { return !rs.Patient })
}

// reach returns the scopes that bound an interaction on a type, and
// whether they narrow it at all: they do not when the access is full or
// one of them is a user/ scope without constraints (it reaches everything
// the user may see). CodeForbidden when no scope allows the interaction.
func (a *Actor) reach(i Interactions, resourceType string) (terms []ResourceScope, narrowed bool, err error) {
	if a.access == nil {
		return nil, false, nil
	}
	terms, err = a.access.covering(i, resourceType)
	if err != nil {
		return nil, false, err
	}
	if slices.ContainsFunc(terms, func(rs ResourceScope) bool { return !rs.Patient && len(rs.Constraints) == 0 }) {
		return nil, false, nil
	}
	return terms, true, nil
}

// AllowFHIR decides whether the actor's token allows an interaction on a
// type at all, before anything is read; which records it reaches is
// decided with them. Returns CodeForbidden naming the scope needed.
func (a *Actor) AllowFHIR(i Interactions, resourceType string) error {
	_, _, err := a.reach(i, resourceType)
	return err
}

// allowWrite decides whether the actor's token allows a write (create,
// update or delete) of a resource of the type that belongs to the patient:
// a user/ scope, or a patient/ scope when the patient is the token's
// patient context; in either case without search constraints, which narrow
// reads and searches only. Returns CodeForbidden naming the scope needed.
func (a *Actor) allowWrite(i Interactions, resourceType string, patientID int64) error {
	terms, narrowed, err := a.reach(i, resourceType)
	if err != nil || !narrowed {
		return err
	}
	for _, rs := range terms {
		if len(rs.Constraints) == 0 && (!rs.Patient || patientID == a.access.patient) {
			return nil
		}
	}
	if a.access.patient == 0 || patientID != a.access.patient {
		return Errorf(CodeForbidden, "this token's patient/ scopes reach only the data of its patient context, "+
			"and this %s belongs to another patient: %s of it needs user/%s.%s", resourceType, i.Verbs()[0], resourceType, i)
	}
	return Errorf(CodeForbidden, "this token's scopes for %s are constrained to some codes or categories, which allow reads and searches only: "+
		"%s needs patient/%s.%s or user/%s.%s without constraints", resourceType, i.Verbs()[0], resourceType, i, resourceType, i)
}
