package converter

import (
	"maps"
	"slices"
	"strings"

	"exchange/fhirdefs"
)

// undefinedReads lists the R4 element paths that the map of an R4
// resource type reads but the R4 definitions do not define: following
// the type's group, its nested blocks and the untyped (backbone) groups
// it calls, with each source variable bound to its element path.
func (e *Engine) undefinedReads(rt string) []string {
	g := e.typePlus[rt]
	sd, err := e.r4.Type(rt)
	if g == nil || err != nil {
		return nil
	}
	v := &reads{e: e, sd: sd, seen: map[string]bool{}}
	v.group(g, map[string]string{g.params[0].Name: rt})
	slices.Sort(v.undefined)
	return slices.Compact(v.undefined)
}

// reads walks the rules of one type's map with each source variable
// bound to the R4 element path it holds. Typed groups it reaches (the
// datatypes' and the `extends` chain's) are typed by their own definitions
// and not followed.
type reads struct {
	e         *Engine
	sd        *fhirdefs.StructureDefinition
	seen      map[string]bool
	undefined []string
}

// group walks a group once per set of bound paths (recursive backbone
// groups terminate).
func (v *reads) group(g *cgroup, bound map[string]string) {
	key := g.name + "(" + strings.Join(slices.Sorted(maps.Values(bound)), ",") + ")"
	if v.seen[key] {
		return
	}
	v.seen[key] = true
	v.rules(g.rules, bound)
}

func (v *reads) rules(rules []*crule, bound map[string]string) {
	for _, r := range rules {
		inner := maps.Clone(bound)
		for _, s := range r.sources {
			path, ok := inner[s.Context]
			if !ok {
				continue
			}
			if s.Element == "" {
				if s.Var != "" {
					inner[s.Var] = path
				}
				continue
			}
			info, ok := v.e.def(v.e.r4, v.sd, path).elem(s.Element)
			if !ok {
				v.undefined = append(v.undefined, path+"."+s.Element)
				continue
			}
			el := info.el
			child := ""
			switch {
			case el.ContentRef != "":
				child = el.ContentRef
			case len(v.sd.Children(el.Path)) > 0 && !el.Choice():
				child = el.Path
			}
			if s.Var != "" && child != "" {
				inner[s.Var] = child
			}
		}
		v.rules(r.then, inner)
		for _, c := range r.calls {
			args := map[string]string{}
			for i, a := range c.args {
				if p, ok := inner[a.Var]; ok && a.Var != "" && i < len(c.group.params) && c.group.params[i].Mode == "source" && c.group.params[i].Type == "" {
					args[c.group.params[i].Name] = p
				}
			}
			if len(args) > 0 {
				v.group(c.group, args)
			}
		}
	}
}
