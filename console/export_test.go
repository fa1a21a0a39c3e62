package console

import (
	"maps"
	"slices"
)

// SignedInPatterns are the route patterns of the signed-in user's pages
// and forms, for the permission tests to check that they cover each one.
func SignedInPatterns() []string {
	return slices.Sorted(maps.Keys((&Console{}).signedInRoutes()))
}
