package domain

import (
	"context"
	"strings"
)

// EHR launch to exchange token (RFC 8693): a SMART app launched from an
// EHR holds the EHR's ID token for the clinician, and trades it at
// /o/token-exchange for a token of this exchange. Package oauth checks the
// ID token (a trusted issuer, its signature, audience and lifetime);
// ExchangedPractitioner decides whose token it becomes.

// ExchangedPractitioner returns the practitioner an EHR's ID token names
// in its fhirUser claim (Practitioner/<id>, relative or absolute): the one
// practitioner whose Identifier is that id. It records the attempt in the
// audit trail as a token issue to the client, vouched for by the issuer.
// Returns CodeInvalid for a malformed reference, CodeForbidden when it is
// not a Practitioner, CodeNotFound when no practitioner, or more than one,
// has the identifier, and CodeLogin for a deactivated account.
func (s *Service) ExchangedPractitioner(ctx context.Context, issuer, fhirUser, clientID string) (*User, error) {
	u, err := s.exchangedPractitioner(ctx, fhirUser)
	s.auditUserEvent(ctx, u, AuditKindToken, clientID, issuer, err)
	return u, err
}

func (s *Service) exchangedPractitioner(ctx context.Context, fhirUser string) (*User, error) {
	parts := strings.Split(strings.TrimRight(fhirUser, "/"), "/")
	if len(parts) < 2 || parts[len(parts)-1] == "" || parts[len(parts)-2] == "" {
		return nil, Errorf(CodeInvalid, "the fhirUser claim %q is not a reference to a FHIR resource", fhirUser)
	}
	kind, id := parts[len(parts)-2], parts[len(parts)-1]
	if kind != "Practitioner" {
		return nil, Errorf(CodeForbidden, "the fhirUser claim names a %s, not a Practitioner: only practitioners exchange EHR tokens", kind)
	}
	if err := LimitIdentifier.Check("fhirUser", id); err != nil {
		return nil, err
	}
	found, err := s.store.PractitionersByIdentifier(ctx, id, 2)
	if err != nil {
		return nil, err
	}
	if len(found) != 1 {
		if len(found) > 1 {
			s.log.Warn("token exchange refused: several practitioners share an EHR identifier", "users", []int64{found[0].ID, found[1].ID})
		}
		return nil, Errorf(CodeNotFound, "no practitioner here is known by the EHR's identifier")
	}
	u := &found[0]
	if !u.IsActive {
		return u, Errorf(CodeLogin, "this account is deactivated")
	}
	return u, nil
}
