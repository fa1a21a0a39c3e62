package omh

// Unexported parts the external tests compare.
var (
	ParsePlain     = parsePlain
	ParseReference = parseReference
	CheckKeys      = checkKeys
)
