package domain

import "math"

// Page selects one page of a list.
type Page struct {
	Number int // from 1
	Size   int // items per page
}

// The page size limits of the admin API.
const (
	DefaultPageSize = 20
	MaxPageSize     = 1000
)

// Offset returns how many items come before the page. A page so far out
// that the count overflows is past the end of every list: the offset
// saturates rather than wrapping to a negative skip.
func (p Page) Offset() int64 {
	n, size := int64(p.Number-1), int64(p.Size)
	if size > 0 && n > math.MaxInt64/size {
		return math.MaxInt64
	}
	return n * size
}

// List is one page of items and the total number of items in the list.
type List[T any] struct {
	Items []T
	Total int64
}

// CheckPage returns CodeNotFound for a page past the end of a list of total
// items; the first page always exists, even when empty.
func CheckPage(p Page, total int64) error {
	if p.Number > 1 && p.Offset() >= total {
		return Errorf(CodeNotFound, "page %d does not exist: the list has %d items, %d a page", p.Number, total, p.Size)
	}
	return nil
}

// everything is a page that holds a whole list, for lists the domain
// reads in full (an organization's memberships, a study's enrollments).
var everything = Page{Number: 1, Size: 1 << 30}
