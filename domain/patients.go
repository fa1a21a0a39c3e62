package domain

import (
	"context"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"time"
)

// NewPatient is the input of CreatePatient: the patient's login and record.
type NewPatient struct {
	Email           string
	Password        string // optional: patients usually log in through an invitation link
	FamilyName      string
	GivenNames      []string
	BirthDate       string // YYYY-MM-DD
	Phone           string
	Identifiers     []Identifier
	OrganizationIDs []int64
}

// CreatePatient creates a patient user and the patient record. The actor
// must be able to manage data in every organization named. Returns
// CodeInvalid, CodeForbidden, or CodeDuplicate (email or identifier taken);
// on any error nothing is left behind.
func (s *Service) CreatePatient(ctx context.Context, actor *Actor, in NewPatient) (*Patient, error) {
	p := &Patient{
		FamilyName:      strings.TrimSpace(in.FamilyName),
		GivenNames:      trimAll(in.GivenNames),
		BirthDate:       strings.TrimSpace(in.BirthDate),
		OrganizationIDs: slices.Compact(slices.Sorted(slices.Values(in.OrganizationIDs))),
	}
	email, err := NormalizeEmail("email", in.Email)
	if err != nil {
		return nil, err
	}
	if err := s.validatePatient(ctx, p, in.Identifiers); err != nil {
		return nil, err
	}
	for _, id := range p.OrganizationIDs {
		if !actor.CanManageDataIn(id) {
			return nil, Errorf(CodeForbidden, "you may not add patients to organization %d", id)
		}
	}
	p.Identifiers = in.Identifiers
	p.Telecom = []ContactPoint{{System: "email", Value: email}}
	if phone := strings.TrimSpace(in.Phone); phone != "" {
		p.Telecom = append(p.Telecom, ContactPoint{System: "phone", Value: phone})
	}
	given := ""
	if len(p.GivenNames) > 0 {
		given = p.GivenNames[0]
	}
	u, err := s.CreateUser(ctx, NewUser{Email: email, Password: in.Password, FirstName: given, LastName: p.FamilyName, Type: UserPatient})
	if err != nil {
		return nil, err
	}
	p.UserID = u.ID
	if err := s.store.CreatePatient(ctx, p); err != nil {
		// Undo the user so that a refused patient leaves no login behind.
		if derr := s.store.DeleteUser(ctx, u.ID); derr != nil {
			return nil, fmt.Errorf("create patient: %w (and removing its user failed: %v)", err, derr)
		}
		return nil, err
	}
	return p, nil
}

// PatientByID returns the patient if the actor may read it; CodeNotFound
// otherwise, so that ids of other organizations' patients are not revealed.
func (s *Service) PatientByID(ctx context.Context, actor *Actor, id int64) (*Patient, error) {
	p, err := s.store.PatientByID(ctx, id)
	if err != nil {
		return nil, err
	}
	if !actor.CanReadPatient(p) {
		return nil, Errorf(CodeNotFound, "patient %d does not exist", id)
	}
	return p, nil
}

// PatientByUserID returns the patient record of a patient user.
func (s *Service) PatientByUserID(ctx context.Context, userID int64) (*Patient, error) {
	return s.store.PatientByUserID(ctx, userID)
}

func (s *Service) validatePatient(ctx context.Context, p *Patient, identifiers []Identifier) error {
	if p.FamilyName == "" {
		return FieldErrorf("nameFamily", "is required")
	}
	if len(p.GivenNames) == 0 {
		return FieldErrorf("nameGiven", "is required")
	}
	if p.BirthDate != "" {
		d, err := time.Parse(time.DateOnly, p.BirthDate)
		if err != nil {
			return FieldErrorf("birthDate", "%q is not a date (YYYY-MM-DD)", p.BirthDate)
		}
		if d.After(s.Now()) {
			return FieldErrorf("birthDate", "%s is in the future", p.BirthDate)
		}
	}
	if err := ValidateIdentifiers("identifiers", identifiers); err != nil {
		return err
	}
	if len(p.OrganizationIDs) == 0 {
		return FieldErrorf("organizationIds", "a patient belongs to at least one organization")
	}
	for _, id := range p.OrganizationIDs {
		if _, err := s.store.OrganizationByID(ctx, id); err != nil {
			if IsCode(err, CodeNotFound) {
				return FieldErrorf("organizationIds", "organization %d does not exist", id)
			}
			return err
		}
	}
	return nil
}

// ValidateIdentifiers checks that each identifier has an absolute URI system
// and a value, and that none is repeated.
func ValidateIdentifiers(field string, ids []Identifier) error {
	seen := map[Identifier]bool{}
	for i, id := range ids {
		f := fmt.Sprintf("%s[%d]", field, i)
		if u, err := url.Parse(id.System); err != nil || !u.IsAbs() {
			return FieldErrorf(f+".system", "%q is not an absolute URI", id.System)
		}
		if strings.TrimSpace(id.Value) == "" || id.Value != strings.TrimSpace(id.Value) {
			return FieldErrorf(f+".value", "must be non-empty without surrounding spaces")
		}
		if seen[id] {
			return FieldErrorf(f, "%s|%s is repeated", id.System, id.Value)
		}
		seen[id] = true
	}
	return nil
}

func trimAll(ss []string) []string {
	var out []string
	for _, s := range ss {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, s)
		}
	}
	return out
}
