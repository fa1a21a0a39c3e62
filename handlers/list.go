package handlers

import (
	"context"
	"net/url"
	"strconv"

	"github.com/gofiber/fiber/v2"

	"exchange/domain"
	"exchange/oauth"
)

// listJSON is the envelope of every admin API list.
type listJSON[T any] struct {
	Count    int64   `json:"count"`
	Next     *string `json:"next"`
	Previous *string `json:"previous"`
	Results  []T     `json:"results"`
}

// pageOf reads the page and pageSize query parameters (defaults 1 and 20,
// pageSize at most 1000).
func pageOf(c *fiber.Ctx) (domain.Page, error) {
	p := domain.Page{Number: 1, Size: domain.DefaultPageSize}
	if v := c.Query("page"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			return p, domain.FieldErrorf("page", "%q is not a page number (1 or more)", v)
		}
		p.Number = n
	}
	if v := c.Query("pageSize"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > domain.MaxPageSize {
			return p, domain.FieldErrorf("pageSize", "%q is not a page size (1 to %d)", v, domain.MaxPageSize)
		}
		p.Size = n
	}
	return p, nil
}

// proxiesKey holds the TRUSTED_PROXIES of the request's server in its
// Locals, so the helpers that build absolute URLs need no server.
const proxiesKey = "trustedProxies"

// withProxies is the first middleware: it hands the trusted proxies to the
// request.
func (s *server) withProxies(c *fiber.Ctx) error {
	c.Locals(proxiesKey, s.proxies)
	return c.Next()
}

// proxies returns the request's trusted proxies: with the connection's
// peer and requestHeader, what oauth.TrustedProxies needs to work out the
// client's address and origin.
func proxies(c *fiber.Ctx) oauth.TrustedProxies {
	t, _ := c.Locals(proxiesKey).(oauth.TrustedProxies)
	return t
}

// requestHeader returns every value of a request header, across repeated
// lines.
func requestHeader(c *fiber.Ctx) oauth.Header {
	return func(name string) []string {
		var values []string
		for _, v := range c.Request().Header.PeekAll(name) {
			values = append(values, string(v))
		}
		return values
	}
}

// origin is the scheme://host the client used: as forwarded by a trusted
// proxy, else the connection's own.
func origin(c *fiber.Ctx) string {
	return proxies(c).Origin(c.Context().RemoteAddr().String(), c.Context().IsTLS(), string(c.Request().Host()), requestHeader(c))
}

// pageURL is the absolute URL of the request with another page number.
func pageURL(c *fiber.Ctx, page int) *string {
	q, _ := url.ParseQuery(string(c.Request().URI().QueryString()))
	q.Set("page", strconv.Itoa(page))
	u := origin(c) + c.Path() + "?" + q.Encode()
	return &u
}

// writeList answers one page of a list: 404 past the end of the list.
func writeList[T, J any](c *fiber.Ctx, p domain.Page, l domain.List[T], toJSON func(T) J) error {
	if err := domain.CheckPage(p, l.Total); err != nil {
		return err
	}
	out := listJSON[J]{Count: l.Total, Results: mapSlice(l.Items, toJSON)}
	if p.Offset()+int64(len(l.Items)) < l.Total {
		out.Next = pageURL(c, p.Number+1)
	}
	if p.Number > 1 {
		out.Previous = pageURL(c, p.Number-1)
	}
	return c.JSON(out)
}

// idParam reads an integer id from the path; anything else names nothing
// that exists.
func idParam(c *fiber.Ctx, name string) (int64, error) {
	id, ok := domain.ParseID(c.Params(name))
	if !ok {
		return 0, domain.Errorf(domain.CodeNotFound, "%q is not an id", c.Params(name))
	}
	return id, nil
}

// queryID reads an optional integer id from the query string; 0 when
// absent.
func queryID(c *fiber.Ctx, name string) (int64, error) {
	v := c.Query(name)
	if v == "" {
		return 0, nil
	}
	id, ok := domain.ParseID(v)
	if !ok {
		return 0, domain.FieldErrorf(name, "%q is not an id", v)
	}
	return id, nil
}

// writeAll answers a short list that is never paged.
func writeAll[T, J any](c *fiber.Ctx, items []T, toJSON func(T) J) error {
	return c.JSON(listJSON[J]{Count: int64(len(items)), Results: mapSlice(items, toJSON)})
}

// readOf answers GET of one entity by the path's id, as the actor may
// see it.
func readOf[T, J any](read func(context.Context, *domain.Actor, int64) (*T, error), toJSON func(T) J) fiber.Handler {
	return readWith(read, func(c *fiber.Ctx, v T) error { return c.JSON(toJSON(v)) })
}

// readWith is readOf with its own answer (headers beside the JSON).
func readWith[T any](read func(context.Context, *domain.Actor, int64) (*T, error), write func(*fiber.Ctx, T) error) fiber.Handler {
	return func(c *fiber.Ctx) error {
		id, err := idParam(c, "id")
		if err != nil {
			return err
		}
		v, err := read(c.UserContext(), actor(c), id)
		if err != nil {
			return err
		}
		return write(c, *v)
	}
}

// listOf answers the list one id selects (an organization's members, a
// organization's studies, ...): the id from the request, then the page.
func listOf[T, J any](idOf func(*fiber.Ctx) (int64, error),
	list func(context.Context, *domain.Actor, int64, domain.Page) (domain.List[T], error), toJSON func(T) J) fiber.Handler {
	return listWith(idOf, list, func(c *fiber.Ctx, p domain.Page, l domain.List[T]) error { return writeList(c, p, l, toJSON) })
}

// listWith is listOf with its own answer of the page (one that reads
// more to render it).
func listWith[T any](idOf func(*fiber.Ctx) (int64, error),
	list func(context.Context, *domain.Actor, int64, domain.Page) (domain.List[T], error),
	write func(*fiber.Ctx, domain.Page, domain.List[T]) error) fiber.Handler {
	return func(c *fiber.Ctx) error {
		id, err := idOf(c)
		if err != nil {
			return err
		}
		p, err := pageOf(c)
		if err != nil {
			return err
		}
		l, err := list(c.UserContext(), actor(c), id, p)
		if err != nil {
			return err
		}
		return write(c, p, l)
	}
}

// pathID reads an id from the path; queryIDOf one from the query (0 when
// absent).
func pathID(name string) func(*fiber.Ctx) (int64, error) {
	return func(c *fiber.Ctx) (int64, error) { return idParam(c, name) }
}

func queryIDOf(name string) func(*fiber.Ctx) (int64, error) {
	return func(c *fiber.Ctx) (int64, error) { return queryID(c, name) }
}

// unlink answers the removal of a link between the path's resource and
// the one its second id names (a member, a scope request, a data source
// of a study): 204.
func unlink(child string, remove func(context.Context, *domain.Actor, int64, int64) error) fiber.Handler {
	return func(c *fiber.Ctx) error {
		id, err := idParam(c, "id")
		if err != nil {
			return err
		}
		childID, err := idParam(c, child)
		if err != nil {
			return err
		}
		if err := remove(c.UserContext(), actor(c), id, childID); err != nil {
			return err
		}
		return c.SendStatus(fiber.StatusNoContent)
	}
}
