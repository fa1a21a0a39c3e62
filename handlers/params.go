package handlers

import (
	"slices"

	"github.com/gofiber/fiber/v2"
	"github.com/valyala/fasthttp"

	"exchange/domain"
)

// The admin API's query parameters. Every route reads only the query
// parameters it declares (accepts); any other is refused with 400
// {"detail": "unknown parameter X"}, never ignored: a filter the service
// does not know, ignored, answers more than was asked for (every patient
// instead of a study's), and a JupyterHealth Exchange client's DELETE
// /patients/{id}?organization_id=N, which there only takes the patient out
// of one organization, must not delete them here.
//
// adminRoutes registers the routes, so that every one gets the check: a
// route without a declaration takes only the paging parameters on GET
// (page, pageSize), none otherwise. JupyterHealth Exchange's snake_case
// spellings (organization_id, study_id, page_size, part_of) are read as
// the camelCase ones, which the request then carries instead (the next
// and previous links too). A parameter given twice, under either spelling,
// is refused as well.

// pagingParams are the parameters of every list.
var pagingParams = []string{"page", "pageSize"}

// queryAliases are JupyterHealth Exchange's spellings of our parameters.
var queryAliases = map[string]string{
	"organization_id": "organizationId",
	"study_id":        "studyId",
	"patient_id":      "patientId",
	"page_size":       "pageSize",
	"part_of":         "partOf",
}

// queryCheckedKey marks, in a request's Locals, that a route's own
// declaration checked its query.
const queryCheckedKey = "queryChecked"

// adminRoutes is the router of the admin API: each route's last handler
// runs after its query has been checked, against the route's declaration
// or the default.
type adminRoutes struct{ fiber.Router }

func (r adminRoutes) Get(path string, handlers ...fiber.Handler) fiber.Router {
	return r.Router.Get(path, checkedQuery(handlers)...)
}

func (r adminRoutes) Post(path string, handlers ...fiber.Handler) fiber.Router {
	return r.Router.Post(path, checkedQuery(handlers)...)
}

func (r adminRoutes) Patch(path string, handlers ...fiber.Handler) fiber.Router {
	return r.Router.Patch(path, checkedQuery(handlers)...)
}

func (r adminRoutes) Put(path string, handlers ...fiber.Handler) fiber.Router {
	return r.Router.Put(path, checkedQuery(handlers)...)
}

func (r adminRoutes) Delete(path string, handlers ...fiber.Handler) fiber.Router {
	return r.Router.Delete(path, checkedQuery(handlers)...)
}

// checkedQuery puts the default check of the query before the last
// handler.
func checkedQuery(handlers []fiber.Handler) []fiber.Handler {
	n := len(handlers)
	if n == 0 {
		return handlers
	}
	return append(slices.Clone(handlers[:n-1]), defaultQuery, handlers[n-1])
}

// accepts declares the query parameters of a route, beside the paging
// ones on GET.
func accepts(names ...string) fiber.Handler {
	return func(c *fiber.Ctx) error {
		if err := checkQuery(c, names); err != nil {
			return err
		}
		c.Locals(queryCheckedKey, true)
		return c.Next()
	}
}

// defaultQuery checks the query of a route that declares none.
func defaultQuery(c *fiber.Ctx) error {
	if c.Locals(queryCheckedKey) == nil {
		if err := checkQuery(c, nil); err != nil {
			return err
		}
	}
	return c.Next()
}

// checkQuery refuses a parameter that is not among names (nor a paging
// one, on GET), or that comes twice, and renames the aliases.
func checkQuery(c *fiber.Ctx, names []string) error {
	args := c.Request().URI().QueryArgs()
	if args.Len() == 0 {
		return nil
	}
	read := c.Method() == fiber.MethodGet || c.Method() == fiber.MethodHead
	var seen []string
	aliased := false
	var err error
	args.VisitAll(func(key, _ []byte) {
		name := string(key)
		if canonical, ok := queryAliases[name]; ok {
			name, aliased = canonical, true
		}
		switch {
		case err != nil:
		case !slices.Contains(names, name) && !(read && slices.Contains(pagingParams, name)):
			err = domain.Errorf(domain.CodeInvalid, "unknown parameter %s", key)
		case slices.Contains(seen, name):
			err = domain.Errorf(domain.CodeInvalid, "%s: given more than once", name)
		}
		seen = append(seen, name)
	})
	if err != nil || !aliased {
		return err
	}
	var renamed fasthttp.Args
	args.VisitAll(func(key, value []byte) {
		name := string(key)
		if canonical, ok := queryAliases[name]; ok {
			name = canonical
		}
		renamed.AddBytesV(name, value)
	})
	c.Request().URI().SetQueryStringBytes(renamed.QueryString())
	return nil
}
