package domain

import (
	"context"
	"fmt"
	"net/mail"
	"strings"
	"time"
)

// NewUser is the input of CreateUser.
type NewUser struct {
	Email       string
	Password    string // empty: the account cannot log in with a password
	FirstName   string
	LastName    string
	Type        UserType
	IsSuperuser bool
	IsStaff     bool
}

// NormalizeEmail returns the canonical form of an email address (trimmed,
// lower case), or a CodeInvalid error naming field if it is not a bare
// address.
func NormalizeEmail(field, email string) (string, error) {
	email = strings.ToLower(strings.TrimSpace(email))
	if email == "" {
		return "", FieldErrorf(field, "is required")
	}
	addr, err := mail.ParseAddress(email)
	if err != nil || addr.Address != email || addr.Name != "" {
		return "", FieldErrorf(field, "%q is not a valid email address", email)
	}
	return email, nil
}

// CreateUser validates and stores a new user. Returns CodeInvalid for bad
// input and CodeDuplicate if the email is taken.
func (s *Service) CreateUser(ctx context.Context, in NewUser) (*User, error) {
	email, err := NormalizeEmail("email", in.Email)
	if err != nil {
		return nil, err
	}
	if in.Type != UserPatient && in.Type != UserPractitioner {
		return nil, FieldErrorf("userType", "must be %q or %q", UserPatient, UserPractitioner)
	}
	if in.IsSuperuser && in.Type != UserPractitioner {
		return nil, FieldErrorf("isSuperuser", "only a practitioner can be a superuser")
	}
	u := &User{
		Email:       email,
		Type:        in.Type,
		FirstName:   strings.TrimSpace(in.FirstName),
		LastName:    strings.TrimSpace(in.LastName),
		IsSuperuser: in.IsSuperuser,
		IsStaff:     in.IsStaff || in.IsSuperuser,
		IsActive:    true,
		DateJoined:  s.Now(),
	}
	if in.Password != "" {
		if u.PasswordHash, err = checkedPasswordHash(in.Password); err != nil {
			return nil, err
		}
	}
	if err := s.store.CreateUser(ctx, u); err != nil {
		if IsCode(err, CodeDuplicate) {
			return nil, &Error{Code: CodeDuplicate, Field: "email", Message: fmt.Sprintf("email: a user with email %q already exists", email)}
		}
		return nil, err
	}
	return u, nil
}

// SetPassword replaces the password of the user with that email.
func (s *Service) SetPassword(ctx context.Context, email, password string) error {
	email, err := NormalizeEmail("email", email)
	if err != nil {
		return err
	}
	u, err := s.store.UserByEmail(ctx, email)
	if err != nil {
		return err
	}
	if u.PasswordHash, err = checkedPasswordHash(password); err != nil {
		return err
	}
	return s.store.UpdateUser(ctx, u)
}

// MakeSuperuser grants superuser and staff status to the practitioner with
// that email.
func (s *Service) MakeSuperuser(ctx context.Context, email string) (*User, error) {
	email, err := NormalizeEmail("email", email)
	if err != nil {
		return nil, err
	}
	u, err := s.store.UserByEmail(ctx, email)
	if err != nil {
		return nil, err
	}
	if u.Type != UserPractitioner {
		return nil, FieldErrorf("email", "%s is a patient; only a practitioner can be a superuser", email)
	}
	u.IsSuperuser, u.IsStaff = true, true
	return u, s.store.UpdateUser(ctx, u)
}

func checkedPasswordHash(password string) (string, error) {
	if len([]rune(password)) < MinPasswordLength {
		return "", FieldErrorf("password", "must be at least %d characters", MinPasswordLength)
	}
	return HashPassword(password)
}

// Login throttling: failures are counted per account and per client address
// in fixed windows; past the limit, logins are refused until the window ends,
// even with the right password.
const (
	loginWindow          = 15 * time.Minute
	maxFailuresAccount   = 5
	maxFailuresAddress   = 50
	throttleAccountKey   = "account:"
	throttleAddressKey   = "address:"
	incorrectCredentials = "the email or password is incorrect"
)

// Authenticate checks an email and password typed into the login page from
// the client address addr. Returns CodeThrottled while the account or the
// address is locked out, and CodeLogin for a wrong email or password or an
// inactive account, without saying which.
func (s *Service) Authenticate(ctx context.Context, email, password, addr string) (*User, error) {
	now := s.Now()
	window := now.Truncate(loginWindow)
	email = strings.ToLower(strings.TrimSpace(email))
	keys := []struct {
		key   string
		limit int
	}{{throttleAccountKey + email, maxFailuresAccount}, {throttleAddressKey + addr, maxFailuresAddress}}
	for _, k := range keys {
		n, err := s.store.LoginFailures(ctx, k.key, window)
		if err != nil {
			return nil, err
		}
		if n >= k.limit {
			wait := window.Add(loginWindow).Sub(now).Round(time.Minute)
			return nil, Errorf(CodeThrottled, "too many failed logins; try again in %d minutes", max(int(wait/time.Minute), 1))
		}
	}
	u, err := s.store.UserByEmail(ctx, email)
	if err != nil && !IsCode(err, CodeNotFound) {
		return nil, err
	}
	hash := ""
	if u != nil && u.IsActive {
		hash = u.PasswordHash
	}
	if passwordMatches(password, hash) {
		return u, nil
	}
	for _, k := range keys {
		if err := s.store.RecordLoginFailure(ctx, k.key, window, window.Add(loginWindow)); err != nil {
			return nil, err
		}
	}
	return nil, Errorf(CodeLogin, incorrectCredentials)
}

// UserByID returns the user; CodeNotFound if there is none.
func (s *Service) UserByID(ctx context.Context, id int64) (*User, error) {
	return s.store.UserByID(ctx, id)
}

// UserByEmail returns the user with that email; CodeNotFound if there is none.
func (s *Service) UserByEmail(ctx context.Context, email string) (*User, error) {
	email, err := NormalizeEmail("email", email)
	if err != nil {
		return nil, err
	}
	return s.store.UserByEmail(ctx, email)
}

// ListUsers finds users by a part of their email; for practitioners and
// superusers (to add members, for one), not patients.
func (s *Service) ListUsers(ctx context.Context, actor *Actor, emailContains string, p Page) (List[User], error) {
	if actor.User.Type != UserPractitioner {
		return List[User]{}, Errorf(CodeForbidden, "patients may not search users")
	}
	return s.store.ListUsers(ctx, UserQuery{EmailContains: strings.TrimSpace(emailContains)}, p)
}

// CountUsers returns how many users exist.
func (s *Service) CountUsers(ctx context.Context) (int64, error) { return s.store.CountUsers(ctx) }
