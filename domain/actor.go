package domain

import "context"

// Actor is the authenticated user a request acts as, with what the
// permission model needs to decide: the patient record of a patient user and
// the roles of a practitioner in each organization, and what the request's
// token allows of that (see Access).
type Actor struct {
	User    User
	Patient *Patient // the user's own patient record; nil for practitioners
	// ClientID is the OAuth client whose token the request bears; "" for
	// the console and commands. The audit trail records it.
	ClientID string
	// Organization is the organization a backend client acts for (see
	// OrganizationActor); 0 for users. Such an actor has no user.
	Organization int64
	roles        map[int64]Role
	access       *Access // nil: full access
	// heldTo is the only patient the actor reaches, when not 0: the
	// admin API under a token with a patient context (ForAdminAPI).
	heldTo int64
}

// IsSuperuser reports whether the actor acts as super_user everywhere.
func (a *Actor) IsSuperuser() bool { return a.User.IsSuperuser }

// RoleIn returns the actor's role in the organization and whether the actor
// is a member at all. A superuser is RoleSuperUser everywhere, without
// membership.
func (a *Actor) RoleIn(organizationID int64) (Role, bool) {
	if a.IsSuperuser() {
		return RoleSuperUser, true
	}
	r, ok := a.roles[organizationID]
	return r, ok
}

// OrganizationIDs returns the organizations the actor is a member of.
func (a *Actor) OrganizationIDs() []int64 {
	ids := make([]int64, 0, len(a.roles))
	for id := range a.roles {
		ids = append(ids, id)
	}
	return ids
}

// TokenActor loads the actor of a bearer token: the user, limited to what
// the token's granted scopes allow (see Access), with the token's patient
// context. user is the token's user when the token's check read it
// already (oauth.Bearer.User), so that a request reads it once; nil: it
// is read by userID. Returns CodeLogin when the user is gone or inactive,
// or when the scopes are no longer understood.
func (s *Service) TokenActor(ctx context.Context, userID int64, user *User, scopes []string, patient int64) (*Actor, error) {
	acc, err := NewAccess(scopes, patient)
	if err != nil {
		return nil, Errorf(CodeLogin, "the access token's scopes are not understood: %v", err)
	}
	var a *Actor
	if user != nil && user.ID == userID {
		a, err = s.ActorOf(ctx, user)
	} else {
		a, err = s.Actor(ctx, userID)
	}
	if err != nil {
		return nil, err
	}
	return a.WithAccess(acc), nil
}

// Actor loads the actor for an active user, with full access: how a login
// session acts (the OAuth pages, the console). Returns CodeLogin if the
// user no longer exists or is inactive, so a token outliving its user is
// refused.
func (s *Service) Actor(ctx context.Context, userID int64) (*Actor, error) {
	u, err := s.store.UserByID(ctx, userID)
	if IsCode(err, CodeNotFound) {
		u = nil
	} else if err != nil {
		return nil, err
	}
	return s.ActorOf(ctx, u)
}

// ActorOf loads the actor, with full access, of a user that the caller
// read already (nil: gone), so that a request reads its user once: a
// login session's check reads it (oauth.Provider.SessionUser), and the
// console acts as it. CodeLogin for a user gone or inactive.
func (s *Service) ActorOf(ctx context.Context, u *User) (*Actor, error) {
	if u == nil || !u.IsActive {
		return nil, Errorf(CodeLogin, "the user of this token is no longer active")
	}
	a := &Actor{User: *u, roles: map[int64]Role{}}
	switch u.Type {
	case UserPatient:
		p, err := s.store.PatientByUserID(ctx, u.ID)
		if err != nil && !IsCode(err, CodeNotFound) {
			return nil, err
		}
		a.Patient = p
	case UserPractitioner:
		ms, err := s.store.MembershipsOfUsers(ctx, []int64{u.ID})
		if err != nil {
			return nil, err
		}
		if len(ms) > 0 {
			below, err := s.organizationsBelow(ctx, ms)
			if err != nil {
				return nil, err
			}
			a.roles = inheritedRoles(ms, below)
		}
	}
	return a, nil
}

// organizationsBelow returns the organizations below those of the
// memberships, level by level: all that inheritedRoles needs (a role
// passes down the tree, never up or sideways), so a practitioner's
// request reads their part of the tree, not the whole of it. Each
// organization is visited once, so a cycle in stored data ends.
func (s *Service) organizationsBelow(ctx context.Context, ms []Membership) ([]Organization, error) {
	seen := map[int64]bool{}
	var level []int64
	for _, m := range ms {
		if !seen[m.OrganizationID] {
			seen[m.OrganizationID] = true
			level = append(level, m.OrganizationID)
		}
	}
	var below []Organization
	for len(level) > 0 {
		children, err := s.store.OrganizationsPartOf(ctx, level)
		if err != nil {
			return nil, err
		}
		level = level[:0]
		for _, o := range children {
			if !seen[o.ID] {
				seen[o.ID] = true
				below = append(below, o)
				level = append(level, o.ID)
			}
		}
	}
	return below, nil
}

// inheritedRoles gives a practitioner their role in every organization
// below one they are a member of (orgs: at least those below them, see
// organizationsBelow): a manager of a hospital manages its departments
// too. The nearest membership up the tree decides, so a
// direct membership of a sub-organization overrides the inherited role.
func inheritedRoles(ms []Membership, orgs []Organization) map[int64]Role {
	direct := map[int64]Role{}
	for _, m := range ms {
		direct[m.OrganizationID] = m.Role
	}
	parent := map[int64]int64{}
	for _, o := range orgs {
		parent[o.ID] = o.PartOf
	}
	roles := map[int64]Role{}
	for _, o := range orgs {
		// Walk up to the nearest membership; the depth bound guards
		// against a cycle in stored data.
		for id, depth := o.ID, 0; id != 0 && depth <= len(orgs); id, depth = parent[id], depth+1 {
			if r, ok := direct[id]; ok {
				roles[o.ID] = r
				break
			}
		}
	}
	for id, r := range direct { // memberships of organizations since deleted
		if _, ok := roles[id]; !ok {
			roles[id] = r
		}
	}
	return roles
}

// OrganizationActor loads the actor of a backend client's token that acts
// for an organization rather than a practitioner: a viewer of the
// organization and of those below it (read only, as a member without the
// right to manage data), limited to the token's scopes. It has no user:
// the audit trail names the organization and the client. CodeLogin when
// the organization is gone, or the scopes are no longer understood.
func (s *Service) OrganizationActor(ctx context.Context, organizationID int64, scopes []string) (*Actor, error) {
	acc, err := NewAccess(scopes, 0)
	if err != nil {
		return nil, Errorf(CodeLogin, "the access token's scopes are not understood: %v", err)
	}
	if _, err := s.store.OrganizationByID(ctx, organizationID); IsCode(err, CodeNotFound) {
		return nil, Errorf(CodeLogin, "the organization this client acts for no longer exists")
	} else if err != nil {
		return nil, err
	}
	ms := []Membership{{OrganizationID: organizationID, Role: RoleViewer}}
	below, err := s.organizationsBelow(ctx, ms)
	if err != nil {
		return nil, err
	}
	a := &Actor{User: User{Type: UserPractitioner, IsActive: true}, Organization: organizationID, roles: inheritedRoles(ms, below)}
	return a.WithAccess(acc), nil
}

// isSystem reports whether the actor is the system (SystemActor): an
// operator at the command line, whom the audit trail does not record. An
// organization's backend client has no user either, but is recorded.
func (a *Actor) isSystem() bool { return a.User.ID == 0 && a.Organization == 0 }

// SystemActor is the actor of trusted operator commands (seed, the command
// line): a superuser that is no user.
func SystemActor() *Actor {
	return &Actor{User: User{Email: "system", IsSuperuser: true, IsActive: true, Type: UserPractitioner}}
}
