package handlers

import (
	"time"

	"github.com/gofiber/fiber/v2"

	"exchange/domain"
)

// The admin API's records that a PATCH changes (users, organizations,
// practitioners, patients, studies, data sources) carry their version:
// their lastUpdated in Unix milliseconds, the precision the store keeps
// and moves on at every change. Their answers give it as ETag, and a
// PATCH with If-Match passes the version it names to its use case, which
// writes nothing if the record has moved on since (a Stale conflict: 412,
// handleError), so that two editors never silently write over each other.

// versioned returns how a record with a version is answered: its JSON,
// and its version as ETag. Weak, because it names the record's version,
// not the bytes of its JSON, which may carry other records too (a study's
// organization, a practitioner's memberships) that change without it;
// If-Match compares it weakly (ifMatch), as FHIR does.
func versioned[T, J any](toJSON func(T) J, lastUpdated func(T) time.Time) func(*fiber.Ctx, T) error {
	return func(c *fiber.Ctx, v T) error {
		c.Set(fiber.HeaderETag, etag(lastUpdated(v).UnixMilli()))
		return c.JSON(toJSON(v))
	}
}

// The answers of the records a PATCH changes.
var (
	writeUserStatus   = versioned(toUserStatusJSON, func(u domain.User) time.Time { return u.LastUpdated })
	writeOrganization = versioned(toOrganizationJSON, func(o domain.Organization) time.Time { return o.LastUpdated })
	writePractitioner = versioned(toPractitionerJSON, func(p domain.Practitioner) time.Time { return p.User.LastUpdated })
	writePatient      = versioned(toPatientJSON, func(p domain.Patient) time.Time { return p.LastUpdated })
	writeStudy        = versioned(toStudyJSON, func(s domain.StudyView) time.Time { return s.LastUpdated })
	writeDataSource   = versioned(toDataSourceJSON, func(d domain.DataSourceView) time.Time { return d.LastUpdated })
)

// ifMatchVersion is the lastUpdated of the version a PATCH's If-Match
// names (ifMatch): nil for any, the use cases' "Unchanged".
func ifMatchVersion(c *fiber.Ctx) (*time.Time, error) {
	version, err := ifMatch(c)
	if err != nil || version == 0 {
		return nil, err
	}
	t := time.UnixMilli(version)
	return &t, nil
}
