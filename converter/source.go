package converter

import (
	"fmt"
	"slices"
	"strings"
)

// snode is a typed value of the R4 source: a JSON value with its R4
// type, and where its children are defined (the element path in sd).
// A primitive's `value` is an snode with no sd.
type snode struct {
	v any // a primitive's scalar: nil when it has only its `_x` sibling
	// ext is a primitive's `_x` sibling (its id and extensions): the
	// members of the primitive's other elements than value.
	ext map[string]any
	typ string
	def *tdef // nil for a primitive's value
	at  leaf  // where a primitive's scalar sits in the R4 JSON
}

func (n *snode) primitive() bool { return n.def == nil || n.def.primitive }

func (e *Engine) sourceNode(v any, typ string) (*snode, error) {
	d, err := e.typeDef(e.r4, typ)
	if err != nil {
		return nil, err
	}
	return &snode{v: v, typ: typ, def: d}, nil
}

// sourceChildren returns the items of element name of a source node,
// typed. A primitive's items pair its values with their `_x` siblings by
// index (either may be missing); a primitive's own id and extension are
// read from its `_x` sibling.
//
// The items are pushed on the conversion's stack of items (st.nodes): the
// caller cuts it back when it is done with them.
func (e *Engine) sourceChildren(n *snode, ref *elemRef, st *stacks) ([]snode, error) {
	name := ref.name
	var obj map[string]any
	switch {
	case n.primitive() && name == "value":
		if n.def != nil && n.v != nil {
			st.nodes = append(st.nodes, snode{v: n.v, at: n.at})
			return st.nodes[len(st.nodes)-1:], nil
		}
		return nil, nil
	case n.primitive():
		if n.def == nil || n.ext == nil {
			return nil, nil
		}
		obj = n.ext
	default:
		var ok bool
		if obj, ok = n.v.(map[string]any); !ok {
			return nil, nil
		}
	}
	info, ok := ref.in(n.def)
	if !ok {
		return nil, fmt.Errorf("%s has no element %s", n.def.path, name)
	}
	el := info.el
	if !el.Choice() && obj[name] == nil && obj[info.sibling] == nil {
		return nil, nil // most elements a rule reads are absent
	}
	start, out := len(st.nodes), st.nodes
	defer func() { st.nodes = out }()
	addr := mapAddr(obj)
	add := func(key, sibling, typ string) error {
		if typ == "Resource" {
			for _, item := range asList(obj[key]) {
				m, _ := item.(map[string]any)
				rt, _ := m["resourceType"].(string)
				d, err := e.typeDef(e.r4, rt)
				if err != nil {
					return err
				}
				out = append(out, snode{v: item, typ: rt, def: d})
			}
			return nil
		}
		d, err := e.childDef(n.def, info, typ)
		if err != nil {
			return err
		}
		if typ == "BackboneElement" || typ == "Element" || el.ContentRef != "" {
			typ = "BackboneElement"
		}
		if d.primitive {
			out = appendPrimitives(out, obj, addr, key, sibling, typ, d)
			return nil
		}
		switch items := obj[key].(type) {
		case nil:
		case []any:
			out = slices.Grow(out, len(items))
			for _, item := range items {
				out = append(out, snode{v: item, typ: typ, def: d})
			}
		default:
			out = append(out, snode{v: items, typ: typ, def: d})
		}
		return nil
	}
	if el.Choice() {
		if 2*len(info.types) <= len(obj) {
			// Fewer keys to look up than the object has (effective[x] in
			// an Observation): each key of the choice, and its sibling.
			for _, c := range info.choices {
				if obj[c.key] != nil || obj[c.sibling] != nil {
					if err := add(c.key, c.sibling, c.typ); err != nil {
						return nil, err
					}
				}
			}
			return out[start:], nil
		}
		for key := range obj { // a few keys, where a choice may have fifty types
			k, sibling := strings.CutPrefix(key, "_")
			if !strings.HasPrefix(k, info.name) { // every key of the choice starts with its name
				continue
			}
			if c, ok := info.keyType[k]; ok && !(sibling && obj[k] != nil) {
				if err := add(k, c.sibling, c.typ); err != nil {
					return nil, err
				}
			}
		}
		return out[start:], nil
	}
	typ := elemType(el)
	if el.ContentRef != "" {
		typ = "BackboneElement"
	}
	err := add(name, info.sibling, typ)
	return out[start:], err
}

// appendPrimitives appends the items of a primitive element key of obj:
// each value with the item of the same index of its `_key` sibling.
func appendPrimitives(out []snode, obj map[string]any, addr uintptr, key, sibling, typ string, d *tdef) []snode {
	values, exts := obj[key], obj[sibling]
	if values == nil && exts == nil {
		return out
	}
	list, isList := values.([]any)
	extList, extIsList := exts.([]any)
	if !isList && !extIsList {
		ext, _ := exts.(map[string]any)
		return append(out, snode{v: values, ext: ext, typ: typ, def: d, at: leaf{addr, key, -1}})
	}
	out = slices.Grow(out, max(len(list), len(extList)))
	for i := range max(len(list), len(extList)) {
		var v any
		var ext map[string]any
		if i < len(list) {
			v = list[i]
		}
		if i < len(extList) {
			ext, _ = extList[i].(map[string]any)
		}
		if v != nil || ext != nil {
			out = append(out, snode{v: v, ext: ext, typ: typ, def: d, at: leaf{addr, key, i}})
		}
	}
	return out
}

func asList(v any) []any {
	switch v := v.(type) {
	case nil:
		return nil
	case []any:
		return v
	}
	return []any{v}
}
