package console

import "exchange/domain"

// The words the pages use for codes, so that people read names: a code
// itself shows only in a detail line for staff.

// organizationTypes are the displays of the FHIR organization-type codes
// (http://terminology.hl7.org/CodeSystem/organization-type).
var organizationTypes = map[domain.OrganizationType]string{
	"prov": "Healthcare provider", "dept": "Hospital department", "team": "Organizational team",
	"govt": "Government", "ins": "Insurance company", "pay": "Payer", "edu": "Educational institute",
	"reli": "Religious institution", "crs": "Clinical research sponsor", "cg": "Community group",
	"bus": "Non-healthcare business", "other": "Other",
}

// dataSourceTypes name the kinds of data source.
var dataSourceTypes = map[domain.DataSourceType]string{
	domain.DataSourcePersonalDevice: "Personal device",
	domain.DataSourceMedicalDevice:  "Medical device",
	domain.DataSourcePatientApp:     "Patient app",
}

// orgTypeName is an organization type in words (its code when it has none).
func orgTypeName(t domain.OrganizationType) string {
	if name, ok := organizationTypes[t]; ok {
		return name
	}
	return string(t)
}

// sourceTypeName is a data source type in words (its code when it has none).
func sourceTypeName(t domain.DataSourceType) string {
	if name, ok := dataSourceTypes[t]; ok {
		return name
	}
	return string(t)
}
