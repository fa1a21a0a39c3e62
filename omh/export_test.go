package omh

import "regexp"

// Unexported parts the external tests compare.
var (
	ParsePlain     = parsePlain
	ParseReference = parseReference
	CheckKeys      = checkKeys
)

// AcceptVerdict is the accept check's verdict on v against the schema id:
// "accepted", "rejected" or "unsure".
func (r *Registry) AcceptVerdict(id SchemaID, v any) string {
	return [...]string{unsure: "unsure", accepted: "accepted", rejected: "rejected"}[r.schemas[id].accept.check(v, maxAcceptDepth)]
}

// LibraryValidate is the schema library's own validation of v against the
// schema id, without the accept check.
func (r *Registry) LibraryValidate(id SchemaID, v any) error {
	return r.schemas[id].compiled.Validate(v)
}

// HeaderSchema is the data point schema of dp's kind of header.
func HeaderSchema(dp *DataPoint) SchemaID {
	if dp.ieeeHeader {
		return SchemaID{NamespaceIEEE, "data-point", "1.0"}
	}
	return SchemaID{NamespaceOMH, "data-point", "1.0"}
}

// CodePattern is the pattern of a native code, whose groups ParseCode
// returns: the reference its hand check is compared with.
var CodePattern = regexp.MustCompile(`^(omh|ieee):([a-z0-9]+(?:-[a-z0-9]+)*):([0-9]+\.[0-9]+)$`)

// PlainDateTime is the date-time shortcut of the accept check, which
// TestPlainDateTime compares with the library's format check.
var PlainDateTime = plainDateTime
