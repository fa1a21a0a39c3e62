package domain

import (
	"context"
	"fmt"
	"net/mail"
	"slices"
	"strings"
	"time"
	"unicode/utf8"
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
	if err := LimitEmail.Check(field, email); err != nil {
		return "", err
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
	u, err := s.newUser(in)
	if err != nil {
		return nil, err
	}
	if err := s.store.CreateUser(ctx, u); err != nil {
		return nil, err
	}
	return u, nil
}

// newUser validates a new user and hashes its password.
func (s *Service) newUser(in NewUser) (*User, error) {
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
	if err := LimitName.checkTexts("firstName", u.FirstName, "lastName", u.LastName); err != nil {
		return nil, err
	}
	if in.Password != "" {
		if u.PasswordHash, err = checkedPasswordHash(in.Password); err != nil {
			return nil, err
		}
	}
	return u, nil
}

// SetPassword replaces the password of the user with that email, then
// ends their login sessions and revokes their OAuth tokens: whoever held
// the old password, or a session or token obtained with it, is out. The
// change is stamped on the user (CredentialsChangedAt), which voids any
// session or token a sign-in racing the change creates after the
// credentials went (User.StillSignedIn); a failure is safe to retry.
func (s *Service) SetPassword(ctx context.Context, email, password string) error {
	email, err := NormalizeEmail("email", email)
	if err != nil {
		return err
	}
	u, err := s.store.UserByEmail(ctx, email)
	if err != nil {
		return err
	}
	hash, err := checkedPasswordHash(password)
	if err != nil {
		return err
	}
	changedAt := s.Now()
	if _, err := s.store.ChangeUser(ctx, u.ID, UserChange{PasswordHash: &hash, CredentialsChangedAt: &changedAt}); err != nil {
		return err
	}
	return s.endCredentials(ctx, u.ID)
}

// SetUserActive activates or deactivates a user; only a superuser may, and
// not for themselves (no superuser locks themselves out by a slip).
// Deactivating ends the user's login sessions and revokes their OAuth
// tokens, after the user is marked inactive. unchanged is the LastUpdated
// of the user the change was made from (the admin API's If-Match); nil:
// none. Returns CodeNotFound if there is no such user, and a Stale
// CodeConflict if unchanged is not the stored version.
func (s *Service) SetUserActive(ctx context.Context, actor *Actor, id int64, active bool, unchanged *time.Time) (*User, error) {
	if !actor.IsSuperuser() {
		return nil, Errorf(CodeForbidden, "only a superuser may activate or deactivate users")
	}
	if id == actor.User.ID && !active {
		return nil, FieldErrorf("isActive", "you may not deactivate yourself")
	}
	u, err := applyAgain(func() (*User, error) { return s.setUserActive(ctx, id, active, unchanged) }, "user %d", id)
	if err != nil {
		return nil, err
	}
	if !active {
		return u, s.endCredentials(ctx, u.ID)
	}
	return u, nil
}

// UserStatus returns the user as SetUserActive answers, changing nothing:
// a change that names no field. It is checked as SetUserActive checks:
// a superuser only, and unchanged (nil: none) must be the stored
// version.
func (s *Service) UserStatus(ctx context.Context, actor *Actor, id int64, unchanged *time.Time) (*User, error) {
	if !actor.IsSuperuser() {
		return nil, Errorf(CodeForbidden, "only a superuser may activate or deactivate users")
	}
	u, err := s.store.UserByID(ctx, id)
	if err != nil {
		return nil, err
	}
	return u, checkUnchanged(unchanged, u.LastUpdated, "user %d", id)
}

// setUserActive changes the stored user once, if it is not as asked.
func (s *Service) setUserActive(ctx context.Context, id int64, active bool, unchanged *time.Time) (*User, error) {
	u, err := s.store.UserByID(ctx, id)
	if err != nil {
		return nil, err
	}
	if err := checkUnchanged(unchanged, u.LastUpdated, "user %d", id); err != nil {
		return nil, err
	}
	if u.IsActive == active {
		return u, nil
	}
	from := u.LastUpdated
	u.IsActive = active
	ch := UserChange{IsActive: &u.IsActive, From: &from}
	if !active {
		u.CredentialsChangedAt = s.Now()
		ch.CredentialsChangedAt = &u.CredentialsChangedAt
	}
	u.LastUpdated, err = s.store.ChangeUser(ctx, u.ID, ch)
	return u, err
}

// endCredentials ends the user's login sessions and revokes their tokens.
func (s *Service) endCredentials(ctx context.Context, userID int64) error {
	if err := s.store.DeleteLoginSessionsOfUser(ctx, userID); err != nil {
		return err
	}
	return s.store.DeactivateOAuthTokensOfUser(ctx, userID)
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
	u.LastUpdated, err = s.store.ChangeUser(ctx, u.ID, UserChange{IsSuperuser: &u.IsSuperuser, IsStaff: &u.IsStaff})
	return u, err
}

func checkedPasswordHash(password string) (string, error) {
	if err := CheckNewPassword(password); err != nil {
		return "", err
	}
	return HashPassword(password)
}

// CheckNewPassword reports whether a password may be chosen; CodeInvalid
// (field password) when not. Checking first lets a caller refuse a
// password before it spends something single-use (an invitation).
func CheckNewPassword(password string) error {
	if err := LimitSecret.Check("password", password); err != nil {
		return err
	}
	if utf8.RuneCountInString(password) < MinPasswordLength {
		return FieldErrorf("password", "must be at least %d characters", MinPasswordLength)
	}
	return nil
}

// ErrInvitationGone is how every unusable invitation code answers: the
// holder of a code learns no more than that it does not work.
var ErrInvitationGone = Errorf(CodeNotFound, "this invitation link does not work: it was used, cancelled or has expired; ask for a new one")

// AcceptInvitation sets the password of the patient an invitation code is
// for, and uses the code: once, so that of two redemptions of a code with
// different passwords one wins and the other gets ErrInvitationGone. The
// code is the patient's proof: the caller must have authenticated it
// (package oauth). Like any password change it ends the patient's sessions
// and revokes their tokens. A password that may not be chosen is refused
// (CodeInvalid) before anything is spent; a patient user who is not active
// any more, or who has a login (User.HasLogin), gets ErrInvitationGone: a
// redemption never writes over a password.
//
// It converges without transactions. The store records the redemption,
// with the new password's hash, before it uses the code, and completes it
// when a crash cuts it short (repo: a write intent, rolled forward). So a
// redemption sent again, with the code and the same password, while its
// record stands (the first attempt's reply was lost, or a double submit)
// completes it and succeeds; after the repair completed it, the code is
// used and a retry is refused like any other use, while the password the
// patient chose works.
func (s *Service) AcceptInvitation(ctx context.Context, code *InvitationCode, password string) error {
	hash, err := checkedPasswordHash(password)
	if err != nil {
		return err
	}
	if !code.Used {
		// A patient who has a login keeps it: only a replacement, which
		// ends it first, makes way for an invitation (invitations.go).
		u, err := s.store.UserByID(ctx, code.UserID)
		if err != nil && !IsCode(err, CodeNotFound) {
			return err
		}
		if u == nil || u.HasLogin() {
			return ErrInvitationGone
		}
		err = s.store.RedeemInvitation(ctx, &InvitationRedemption{Signature: code.Signature, UserID: code.UserID,
			PasswordHash: hash, At: s.Now()})
		if !IsCode(err, CodeNotFound) {
			return err
		}
	}
	// The code is used: by this very redemption, sent before, or by another.
	return s.finishRedemption(ctx, code, password)
}

// finishRedemption completes the redemption of a used code that is still
// in progress and chose this password; ErrInvitationGone when there is
// none.
func (s *Service) finishRedemption(ctx context.Context, code *InvitationCode, password string) error {
	pending, err := s.store.InvitationRedemptions(ctx, code.Signature)
	if err != nil {
		return err
	}
	for i := range pending {
		if !passwordMatches(password, pending[i].PasswordHash) {
			continue
		}
		err := s.store.FinishInvitationRedemption(ctx, &pending[i])
		if IsCode(err, CodeNotFound) {
			return ErrInvitationGone
		}
		return err
	}
	return ErrInvitationGone
}

// SignInAttempt is an email and password typed into the login page, with
// what the browser proves beside them (throttle.go): the device cookie it
// holds, and the proof of work its page's script solved.
type SignInAttempt struct {
	Email, Password string
	// Address is the client's network address.
	Address string
	// Device is the device cookie the browser sent; "": none.
	Device string
	// Challenge and Work are the page's proof of work (SignInChallenge);
	// "": none.
	Challenge, Work string
}

// SignedIn is a successful sign-in: the user, and the device cookie the
// browser keeps from now on (it vouches for the browser at the account's
// next sign-ins).
type SignedIn struct {
	User   *User
	Device string
}

// Authenticate is SignIn of an email and password alone (no device
// cookie, no proof of work), from the client address addr.
func (s *Service) Authenticate(ctx context.Context, email, password, addr string) (*User, error) {
	in, err := s.SignIn(ctx, SignInAttempt{Email: email, Password: password, Address: addr})
	if err != nil {
		return nil, err
	}
	return in.User, nil
}

// SignIn checks a sign-in attempt. Returns CodeThrottled (with RetryAfter)
// while a throttle holds the attempt back, without checking the password,
// and CodeLogin for a wrong email or password or an inactive account,
// without saying which: both cost the same whether or not the account
// exists, and an unknown email is throttled like a known one. Which
// throttles apply depends on what the attempt proves (throttle.go).
// Refusals are logged with the user's id when known, never with the
// password, the email or a cookie.
func (s *Service) SignIn(ctx context.Context, a SignInAttempt) (*SignedIn, error) {
	in, err := s.signIn(ctx, a)
	var u *User
	if in != nil {
		u = in.User
	}
	s.auditSignIn(ctx, a.Email, u, err)
	return in, err
}

func (s *Service) signIn(ctx context.Context, a SignInAttempt) (*SignedIn, error) {
	email := strings.ToLower(strings.TrimSpace(a.Email))
	k := s.newLoginKeys(email, a.Address)
	defer s.signIns.lock(k.account, k.address)()
	now := s.Now()
	class, err := s.signInClass(ctx, &k, email, a, now)
	if err != nil {
		return nil, err
	}
	if wait, err := s.loginWait(ctx, k, class, now); err != nil || wait > 0 {
		if err != nil {
			return nil, err
		}
		s.log.Warn("sign-in throttled", "account", k.accountLog, "address", a.Address, "class", class.String(), "retryAfter", wait.String())
		return nil, &Error{Code: CodeThrottled, RetryAfter: wait,
			Message: fmt.Sprintf("too many failed sign-ins; try again in %s", waitText(wait))}
	}
	u, err := s.store.UserByEmail(ctx, email)
	if err != nil && !IsCode(err, CodeNotFound) {
		return nil, err
	}
	hash := ""
	if u != nil && u.IsActive {
		hash = u.PasswordHash
	}
	if passwordMatches(a.Password, hash) {
		for _, key := range []string{k.pair, k.device} {
			if key == "" {
				continue
			}
			if err := s.store.ForgetLoginFailures(ctx, key); err != nil {
				return nil, err
			}
		}
		if err := s.store.RememberLogin(ctx, k.known, now.Add(knownLoginPeriod)); err != nil {
			return nil, err
		}
		return &SignedIn{User: u, Device: s.newDevice(k, now)}, nil
	}
	for _, r := range loginThrottles {
		if slices.Contains(r.counts, class) {
			if err := s.store.RecordLoginFailure(ctx, r.key(k), now, now.Add(loginFailureMemory)); err != nil {
				return nil, err
			}
		}
	}
	attrs := []any{"account", k.accountLog, "address", a.Address, "class", class.String()}
	if u != nil {
		attrs = append(attrs, "user", u.ID)
	}
	s.log.Info("sign-in refused: incorrect credentials", attrs...)
	return nil, Errorf(CodeLogin, incorrectCredentials)
}

const incorrectCredentials = "the email or password is incorrect"

// signInClass decides what the attempt proves: a device cookie of the
// account (which sets k.device), an address the account is known at, a
// proof of work (spent here, whatever comes next), or nothing.
func (s *Service) signInClass(ctx context.Context, k *loginKeys, email string, a SignInAttempt, now time.Time) (signInClass, error) {
	if id, ok := s.deviceOf(*k, a.Device, now); ok {
		k.device = "device:" + id
		return classDevice, nil
	}
	known, err := s.store.KnownLogin(ctx, k.known, now)
	if err != nil || known {
		return classKnown, err
	}
	if a.Work != "" {
		done, err := s.workDone(ctx, email, a.Challenge, a.Work, now)
		if err != nil || done {
			return classWork, err
		}
	}
	return classPlain, nil
}

// String names the class in log lines.
func (c signInClass) String() string {
	return [...]string{"plain", "work", "known", "device"}[c]
}

// loginWait returns how long an attempt of the class, keyed k, must wait:
// the longest delay of the throttles that hold that class back.
func (s *Service) loginWait(ctx context.Context, k loginKeys, class signInClass, now time.Time) (time.Duration, error) {
	var wait time.Duration
	for _, r := range loginThrottles {
		if !slices.Contains(r.waits, class) {
			continue
		}
		n, last, err := s.store.LoginFailures(ctx, r.key(k), now)
		if err != nil {
			return 0, err
		}
		wait = max(wait, last.Add(r.delay(n)).Sub(now))
	}
	return wait, nil
}

// waitText says a wait in whole seconds or minutes, rounded up.
func waitText(d time.Duration) string {
	if d <= time.Minute {
		n := int((d + time.Second - 1) / time.Second)
		if n == 1 {
			return "1 second"
		}
		return fmt.Sprintf("%d seconds", n)
	}
	return fmt.Sprintf("%d minutes", int((d+time.Minute-1)/time.Minute))
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

// ListUsers is the user directory. A superuser finds users by a part of
// their email, or lists them all. A practitioner who manages an
// organization may look up a colleague to add to it by their exact email:
// they get that practitioner's id, email and type, nothing more, and
// never a patient, so the directory cannot be scraped for who uses the
// exchange. Anyone else is refused.
func (s *Service) ListUsers(ctx context.Context, actor *Actor, email string, p Page) (List[User], error) {
	if actor.IsSuperuser() {
		return s.store.ListUsers(ctx, UserQuery{EmailContains: strings.TrimSpace(email)}, p)
	}
	if !actor.managesAnOrganization() {
		return List[User]{}, Errorf(CodeForbidden, "only superusers and managers of an organization may look up users")
	}
	email, err := NormalizeEmail("email", email)
	if err != nil {
		return List[User]{}, err
	}
	u, err := s.store.UserByEmail(ctx, email)
	if IsCode(err, CodeNotFound) || (err == nil && u.Type != UserPractitioner) {
		return List[User]{Items: []User{}}, nil
	}
	if err != nil {
		return List[User]{}, err
	}
	return List[User]{Total: 1, Items: []User{{ID: u.ID, Email: u.Email, Type: u.Type}}}, nil
}

// CountUsers returns how many users exist.
func (s *Service) CountUsers(ctx context.Context) (int64, error) { return s.store.CountUsers(ctx) }
