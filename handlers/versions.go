package handlers

import (
	"strconv"
	"strings"
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
// Imported FHIR resources carry theirs as versionId; both kinds are
// answered with etag and checked with ifMatch, below.

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
	writePractitioner = versioned(toPractitionerJSON, func(p domain.Practitioner) time.Time { return p.User.LastUpdated })
	writeStudy        = versioned(toStudyJSON, func(s domain.StudyView) time.Time { return s.LastUpdated })
	writeDataSource   = versioned(toDataSourceJSON, func(d domain.DataSourceView) time.Time { return d.LastUpdated })
)

// writePatient answers a patient, with the organizations it names, and
// its version.
func (s *server) writePatient(c *fiber.Ctx, p domain.Patient) error {
	out, err := s.patientsJSON(c.UserContext(), []domain.Patient{p})
	if err != nil {
		return err
	}
	c.Set(fiber.HeaderETag, etag(p.LastUpdated.UnixMilli()))
	return c.JSON(out[0])
}

// writeOrganization answers an organization of the directory, with the
// caller's role in it and what is below it, and its version: ROOT, which
// no request changes, has none.
func writeOrganization(c *fiber.Ctx, n domain.OrganizationNode) error {
	if n.ID != domain.RootOrganizationID {
		c.Set(fiber.HeaderETag, etag(n.LastUpdated.UnixMilli()))
	}
	return c.JSON(toOrganizationEntryJSON(actor(c), n))
}

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

// etag is the weak ETag of a version: of an imported FHIR resource
// (its versionId) or of an admin record (its lastUpdated in Unix ms).
func etag(version int64) string { return `W/"` + strconv.FormatInt(version, 10) + `"` }

// ifMatch reads If-Match: the version W/"<version>" (or "<version>")
// names; 0, any version, when absent or "*". Every write it guards needs
// its record to exist already (none creates), so "*" (RFC 9110 13.1.1:
// the record exists) asks nothing more than no If-Match. Tags compare
// weakly, as FHIR asks (http.html#concurrency): ours name a version, not
// the bytes of a body. One tag only: a list, or a tag not spelled as ETag
// writes it, is CodeInvalid; so are several If-Match fields, which HTTP
// reads as one list (RFC 9110 5.3) and c.Get would cut to the first.
func ifMatch(c *fiber.Ctx) (int64, error) {
	if fields := c.Request().Header.PeekAll(fiber.HeaderIfMatch); len(fields) > 1 {
		return 0, domain.Errorf(domain.CodeInvalid, "If-Match: sent %d times; send it once, with one version tag such as W/\"1\"", len(fields))
	}
	return parseIfMatch(c.Get(fiber.HeaderIfMatch))
}

// parseIfMatch is ifMatch of the header's value.
func parseIfMatch(h string) (int64, error) {
	h = strings.TrimSpace(h)
	if h == "" || h == "*" {
		return 0, nil
	}
	v, quoted := strings.CutPrefix(strings.TrimPrefix(h, "W/"), `"`)
	v, closed := strings.CutSuffix(v, `"`)
	n, ok := domain.ParseID(v) // versions are spelled as ETag writes them
	if !quoted || !closed || !ok {
		return 0, domain.Errorf(domain.CodeInvalid, "If-Match: %q is not * or one version tag such as W/\"1\"", h)
	}
	return n, nil
}
