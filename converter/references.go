package converter

import (
	"strings"
	"unicode"

	"exchange/domain"
)

// References between the resources of one source. An upstream system's
// resources refer to each other by its ids (Patient/p1), which the
// imported store does not keep as ids: it stores each resource under a
// UUID derived from its source, type and upstream id. A conversion given
// a domain.ReferenceRewriter points every Reference it writes to the id
// the target has (or will have: the id is derived, not looked up, so
// the order of the imports does not matter), and keeps the upstream id
// readable as the Reference's identifier, in the source's id system.
// The R4 value is carried by the rewritten reference: a rewrite is no
// loss.

// The elements a rewrite reads and writes, resolved once (elemRef
// caches the element it found last).
var (
	identifierElem = newElemRef("identifier")
	systemElem     = newElemRef("system")
	valueElem      = newElemRef("value")
)

// rewriteReferences rewrites the References of v and of every value below
// it (contained resources, CodeableReferences, extensions).
func (e *Engine) rewriteReferences(v *tval, st *stacks, refs domain.ReferenceRewriter) {
	if v.typ == "Reference" {
		e.rewriteReference(v, st, refs)
		return
	}
	for i := range v.members {
		m := &v.members[i]
		if m.one != nil {
			e.rewriteReferences(m.one, st, refs)
		}
		for _, item := range m.list {
			e.rewriteReferences(item, st, refs)
		}
	}
}

// rewriteReference rewrites one Reference, when refs maps its literal
// reference. One that has an identifier of its own keeps both as sent:
// the upstream id would have no place.
func (e *Engine) rewriteReference(v *tval, st *stacks, refs domain.ReferenceRewriter) {
	m := v.member("reference")
	if m == nil || m.one == nil || v.member("identifier") != nil {
		return
	}
	ref, ok := m.one.scalar.(string)
	if !ok {
		return
	}
	base, typ, id, ok := splitReference(ref)
	if !ok {
		return
	}
	if g := e.typePlus[typ]; g != nil && g.targetType != "" {
		typ = g.targetType // an R4 type R5 renamed: DeviceUseStatement is DeviceUsage
	}
	stored, system, ok := refs(base, typ, id)
	if !ok {
		return
	}
	ident, err := e.makeChild(v, identifierElem, "", false, st)
	if err != nil {
		return
	}
	if _, err := e.assign(ident, systemElem, system, "", st); err != nil {
		return
	}
	if _, err := e.assign(ident, valueElem, id, "", st); err != nil {
		return
	}
	m.one.scalar = stored
}

// splitReference reads a literal reference: [base/]Type/id, a version
// (/_history/n) ignored. Contained (#x), conditional (Type?search) and
// URN references are not literal references to a resource of a server.
func splitReference(ref string) (base, typ, id string, ok bool) {
	if ref == "" || strings.ContainsAny(ref, "#?") || strings.HasPrefix(ref, "urn:") {
		return "", "", "", false
	}
	ref, _, _ = strings.Cut(ref, "/_history/")
	slash := strings.LastIndex(ref, "/")
	if slash < 0 || slash == len(ref)-1 {
		return "", "", "", false
	}
	rest, id := ref[:slash], ref[slash+1:]
	typ = rest
	if slash = strings.LastIndex(rest, "/"); slash >= 0 {
		base, typ = rest[:slash], rest[slash+1:]
	}
	if typ == "" || !unicode.IsUpper(rune(typ[0])) || strings.ContainsFunc(typ, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9')
	}) {
		return "", "", "", false
	}
	return base, typ, id, true
}
