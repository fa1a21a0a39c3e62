package handlers

import (
	"strings"

	"github.com/gofiber/fiber/v2"

	"exchange/domain"
)

const actorKey = "actor"

// authenticate turns the request's bearer token into the acting user,
// limited to what the token's scopes allow, or refuses the request with
// 401 and WWW-Authenticate.
func (s *server) authenticate(c *fiber.Ctx) error {
	scheme, token, _ := strings.Cut(c.Get(fiber.HeaderAuthorization), " ")
	token = strings.TrimSpace(token)
	if !strings.EqualFold(scheme, "Bearer") || token == "" {
		return domain.Errorf(domain.CodeLogin, "authentication credentials were not provided")
	}
	bearer, err := s.oauth.AuthenticateBearer(c.UserContext(), token)
	if err == nil {
		var actor *domain.Actor
		if bearer.Organization != 0 {
			actor, err = s.service.OrganizationActor(c.UserContext(), bearer.Organization, bearer.Scopes)
		} else {
			actor, err = s.service.TokenActor(c.UserContext(), bearer.UserID, bearer.User, bearer.Scopes, bearer.Patient)
		}
		if err == nil {
			actor.ClientID = bearer.ClientID
			c.Locals(actorKey, actor)
			return c.Next()
		}
	}
	if domain.IsCode(err, domain.CodeLogin) {
		c.Set(fiber.HeaderWWWAuthenticate, `Bearer realm="exchange", error="invalid_token"`)
	}
	return err
}

// adminScope refuses admin API requests that the token's scopes do not
// allow (exchange/admin.read or exchange/admin.write; see domain.Access),
// and holds a token with a patient context to that patient
// (domain.Actor.ForAdminAPI).
func (s *server) adminScope(c *fiber.Ctx) error {
	a := actor(c)
	if err := a.AllowAdmin(c.Method()); err != nil {
		return err
	}
	c.Locals(actorKey, a.ForAdminAPI())
	return c.Next()
}

// actor returns the authenticated actor of the request.
func actor(c *fiber.Ctx) *domain.Actor {
	return c.Locals(actorKey).(*domain.Actor)
}
