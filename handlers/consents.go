package handlers

import (
	"context"
	"time"

	"github.com/gofiber/fiber/v2"

	"exchange/domain"
)

// consentsJSON is the consent overview of a patient, exactly as the
// endpoint is specified.
type consentsJSON struct {
	Patient                     patientJSON          `json:"patient"`
	ConsolidatedConsentedScopes []scopeCodeJSON      `json:"consolidatedConsentedScopes"`
	StudiesPendingConsent       []studyPendingJSON   `json:"studiesPendingConsent"`
	Studies                     []studyConsentedJSON `json:"studies"`
}

type studyConsentsBaseJSON struct {
	ID           int64                   `json:"id"`
	Name         string                  `json:"name"`
	Organization organizationJSON        `json:"organization"`
	DataSources  []dataSourceSummaryJSON `json:"dataSources"`
}

type studyPendingJSON struct {
	studyConsentsBaseJSON
	PendingScopeConsents []pendingScopeJSON `json:"pendingScopeConsents"`
}

type pendingScopeJSON struct {
	Code      scopeCodeJSON `json:"code"`
	Consented *bool         `json:"consented"` // always null: not answered
}

type studyConsentedJSON struct {
	studyConsentsBaseJSON
	ScopeConsents []scopeConsentJSON `json:"scopeConsents"`
}

type scopeConsentJSON struct {
	Code          scopeCodeJSON `json:"code"`
	Consented     bool          `json:"consented"`
	ConsentedTime time.Time     `json:"consentedTime"`
}

func studyConsentsBase(sc domain.StudyConsents) studyConsentsBaseJSON {
	return studyConsentsBaseJSON{ID: sc.ID, Name: sc.Name, Organization: toOrganizationJSON(sc.Organization),
		DataSources: mapSlice(sc.DataSources, toDataSourceSummaryJSON)}
}

// toConsentsJSON renders the overview around its patient, rendered.
func toConsentsJSON(o *domain.ConsentOverview, patient patientJSON) consentsJSON {
	return consentsJSON{
		Patient:                     patient,
		ConsolidatedConsentedScopes: mapSlice(o.ConsolidatedConsentedScopes, toScopeCodeJSON),
		StudiesPendingConsent: mapSlice(o.StudiesPendingConsent, func(sc domain.StudyConsents) studyPendingJSON {
			return studyPendingJSON{studyConsentsBase(sc), mapSlice(sc.Pending, func(c domain.ScopeCode) pendingScopeJSON {
				return pendingScopeJSON{Code: toScopeCodeJSON(c)}
			})}
		}),
		Studies: mapSlice(o.Studies, func(sc domain.StudyConsents) studyConsentedJSON {
			return studyConsentedJSON{studyConsentsBase(sc), mapSlice(sc.Answers, func(a domain.ScopeAnswer) scopeConsentJSON {
				return scopeConsentJSON{Code: toScopeCodeJSON(a.Code), Consented: a.Consented, ConsentedTime: a.ConsentedTime}
			})}
		}),
	}
}

// consentWriteJSON is the body of the consent writes.
type consentWriteJSON struct {
	StudyScopeConsents []struct {
		StudyID       int64 `json:"studyId"`
		ScopeConsents []struct {
			CodingSystem string `json:"codingSystem"`
			CodingCode   string `json:"codingCode"`
			Consented    *bool  `json:"consented"`
		} `json:"scopeConsents"`
	} `json:"studyScopeConsents"`
}

func (in consentWriteJSON) answers() []domain.StudyScopeConsents {
	out := make([]domain.StudyScopeConsents, len(in.StudyScopeConsents))
	for i, sc := range in.StudyScopeConsents {
		out[i].StudyID = sc.StudyID
		for _, a := range sc.ScopeConsents {
			out[i].Scopes = append(out[i].Scopes, domain.ScopeConsent{System: a.CodingSystem, Code: a.CodingCode, Consented: a.Consented})
		}
	}
	return out
}

func (s *server) getConsents(c *fiber.Ctx) error {
	id, err := idParam(c, "id")
	if err != nil {
		return err
	}
	return s.consentsResponse(c, fiber.StatusOK, id)
}

func (s *server) consentsResponse(c *fiber.Ctx, status int, patientID int64) error {
	o, err := s.service.PatientConsents(c.UserContext(), actor(c), patientID)
	if err != nil {
		return err
	}
	patient, err := s.patientsJSON(c.UserContext(), []domain.Patient{o.Patient})
	if err != nil {
		return err
	}
	return c.Status(status).JSON(toConsentsJSON(o, patient[0]))
}

// consentWrite is one of the consent use cases (answer, update, withdraw).
type consentWrite func(ctx context.Context, a *domain.Actor, patientID int64, in []domain.StudyScopeConsents) error

// writeConsents decodes a consent write, applies it with the use case, and
// answers the overview as it now is (or nothing, for 204).
func (s *server) writeConsents(status int, write consentWrite) fiber.Handler {
	return func(c *fiber.Ctx) error {
		id, err := idParam(c, "id")
		if err != nil {
			return err
		}
		var in consentWriteJSON
		if err := decodeJSON(c, &in); err != nil {
			return err
		}
		if err := write(c.UserContext(), actor(c), id, in.answers()); err != nil {
			return err
		}
		if status == fiber.StatusNoContent {
			return c.SendStatus(status)
		}
		return s.consentsResponse(c, status, id)
	}
}
