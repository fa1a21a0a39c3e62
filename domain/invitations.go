package domain

import (
	"context"
	"fmt"
	"strings"
	"time"
)

// An invitation hands a patient their account: a single-use code that the
// web console redeems by letting its holder choose the patient's password,
// or that an app redeems at the token endpoint for tokens acting as the
// patient (package oauth issues and authenticates the codes). Whoever
// holds the code becomes the patient, so the rules are about who can
// hold it:
//
//   - Only a patient without a login is invited (User.HasLogin: no
//     password chosen, no invitation redeemed): an invitation never takes
//     over an account someone already uses, and a code stands only while
//     its patient has no login, so redeeming one ends every other.
//   - Inviting is a write of the patient's data: a superuser, or a manager
//     or member of one of the patient's organizations.
//   - A login is replaced only on purpose, by a manager of one of the
//     patient's organizations or a superuser (ReplaceLogin): it ends at
//     once (password, sessions, tokens), the patient is told, and both the
//     replacement and the new invitation are in the patient's audit trail.
//   - With a delivery channel (a Mailer: SMTP settings), the invitation
//     goes to the patient's registered email address and its creator
//     never sees the link, so only the mailbox's owner can redeem it.
//     Without one the link is shown to its creator, who hands it over and
//     could redeem it alone; the rules above bound what that gives them:
//     a patient nobody uses yet, whose data they may already write, in an
//     audited act the patient sees, that a manager can undo by replacing
//     the login.

// Mailer sends email to users' registered addresses: the delivery channel
// of invitations and of notices to patients. nil in a Service: no channel.
type Mailer interface {
	// Send sends one plain-text message. It returns when the message was
	// handed to the mail server, or failed to be.
	Send(ctx context.Context, m Mail) error
}

// Mail is one plain-text message to one address.
type Mail struct {
	To      string
	Subject string
	Text    string
}

// Invitee is a patient an actor may invite now (Service.Invite).
type Invitee struct {
	Patient *Patient
	User    *User
	// Replaced says that the patient's login was just replaced (ended) for
	// this invitation.
	Replaced bool
}

// InvitationDelivery says how a new invitation reached its patient:
// exactly one field is set.
type InvitationDelivery struct {
	// Link is the invitation link, for its creator to hand over: the
	// service has no delivery channel.
	Link string
	// SentTo is the patient's email address the link was sent to, masked
	// (j•••@example.org): its creator never sees the link.
	SentTo string
}

// Invite checks that the actor may invite the patient now and returns
// whom to issue the invitation for. A patient with a login is refused
// (CodeConflict) unless replace asks to replace it, which only a manager
// of one of the patient's organizations or a superuser may do
// (CodeForbidden otherwise): the login then ends first (ReplaceLogin).
// Returns CodeNotFound for a patient the actor may not read, and
// CodeForbidden for an actor who may not write the patient's data.
func (s *Service) Invite(ctx context.Context, actor *Actor, patientID int64, replace bool) (*Invitee, error) {
	p, err := s.PatientForInvitation(ctx, actor, patientID)
	if err != nil {
		return nil, err
	}
	u, err := s.store.UserByID(ctx, p.UserID)
	if err != nil {
		return nil, err
	}
	if !u.HasLogin() {
		return &Invitee{Patient: p, User: u}, nil
	}
	if !replace {
		return nil, Errorf(CodeConflict, "patient %d has a login already, which an invitation would take over; "+
			"a manager of their organization may replace it (replaceLogin: true), which ends it at once", patientID)
	}
	if u, err = s.ReplaceLogin(ctx, actor, p); err != nil {
		return nil, err
	}
	return &Invitee{Patient: p, User: u, Replaced: true}, nil
}

// CanReplaceLogin reports whether the actor may replace the patient's
// login: a superuser, or a manager of one of the patient's organizations.
func (a *Actor) CanReplaceLogin(p *Patient) bool {
	for _, org := range p.OrganizationIDs {
		if a.CanAdministerOrganization(org) {
			return true
		}
	}
	return a.IsSuperuser()
}

// ReplaceLogin ends the patient's login so that a new invitation can hand
// them their account again (a forgotten password, a lost phone, an account
// in the wrong hands): their password goes, every session, token and
// code issued before ends, and the patient is told by email when there is
// a delivery channel. The act is audited as an update of the patient's
// login, which the patient reads in their own audit trail. Only a
// superuser or a manager of one of the patient's organizations may
// (CodeForbidden).
func (s *Service) ReplaceLogin(ctx context.Context, actor *Actor, p *Patient) (u *User, err error) {
	defer func() {
		err = s.audit(ctx, actor, AuditUpdate, AuditKindLoginReplaced, err, "Patient", []string{ref("Patient", p.ID)}, []int64{p.ID})
	}()
	if !actor.CanReplaceLogin(p) {
		return nil, Errorf(CodeForbidden, "only a manager of the patient's organization may replace the login of patient %d", p.ID)
	}
	// A millisecond back, so that the invitation issued next (stamped
	// now) comes after the change (User.StillSignedIn).
	changedAt := s.Now().Truncate(time.Millisecond).Add(-time.Millisecond)
	none, never := "", time.Time{}
	if _, err := s.store.ChangeUser(ctx, p.UserID, UserChange{PasswordHash: &none, InvitationAcceptedAt: &never, CredentialsChangedAt: &changedAt}); err != nil {
		return nil, err
	}
	if err := s.endCredentials(ctx, p.UserID); err != nil {
		return nil, err
	}
	if u, err = s.store.UserByID(ctx, p.UserID); err != nil {
		return nil, err
	}
	s.notify(ctx, u, "Your login was replaced",
		fmt.Sprintf("%s replaced your login to the data exchange on %s: your password no longer works and every "+
			"device signed in as you was signed out. A new invitation follows. If you did not ask for this, "+
			"tell your study team.", actor.displayName(), s.Now().Format("2 January 2006 at 15:04 UTC")))
	return u, nil
}

// displayName names the actor to a patient: their name, else their email.
func (a *Actor) displayName() string {
	if name := strings.TrimSpace(a.User.FirstName + " " + a.User.LastName); name != "" {
		return name
	}
	if a.User.Email != "" {
		return a.User.Email
	}
	return "The exchange's operator"
}

// notify emails a notice to the user when there is a delivery channel; a
// failure is logged, not returned: the notice is a courtesy beside the
// audit trail, which records the act itself.
func (s *Service) notify(ctx context.Context, u *User, subject, text string) {
	if s.mailer == nil {
		return
	}
	if err := s.mailer.Send(ctx, Mail{To: u.Email, Subject: subject, Text: text}); err != nil {
		s.log.Error("a notice to a user could not be sent", "user", u.ID, "error", err)
	}
}

// DeliverInvitation hands a new invitation of the invitee to them: by
// email when the service has a delivery channel (the answer then names
// the address, masked, never the link), else back to its creator. The
// invitation is recorded in the patient's audit trail either way. Returns
// CodeUnavailable when the email cannot be sent: the invitation then
// reached no one, and expires unused.
func (s *Service) DeliverInvitation(ctx context.Context, actor *Actor, in *Invitee, link string, expires time.Time) (d InvitationDelivery, err error) {
	defer func() {
		err = s.audit(ctx, actor, AuditCreate, AuditKindInvitation, err, "Patient", []string{ref("Patient", in.Patient.ID)}, []int64{in.Patient.ID})
	}()
	if s.mailer == nil {
		return InvitationDelivery{Link: link}, nil
	}
	text := fmt.Sprintf("You are invited to the data exchange of your study. Open this link to set up your account "+
		"(it works once, until %s):\n\n%s\n\nIf you did not expect this, ignore this message and tell your study team.",
		expires.UTC().Format("2 January 2006 at 15:04 UTC"), link)
	if err := s.mailer.Send(ctx, Mail{To: in.User.Email, Subject: "Your invitation to the data exchange", Text: text}); err != nil {
		s.log.Error("an invitation could not be sent", "user", in.User.ID, "error", err)
		return InvitationDelivery{}, Errorf(CodeUnavailable, "the invitation could not be emailed to the patient; try again later")
	}
	return InvitationDelivery{SentTo: MaskEmail(in.User.Email)}, nil
}

// HasDeliveryChannel reports whether invitations go to patients by email
// (their creators then never see the links).
func (s *Service) HasDeliveryChannel() bool { return s.mailer != nil }

// MaskEmail shows an address so that its owner recognises it and a
// bystander learns little: the first letter of the local part, then the
// domain (j•••@example.org).
func MaskEmail(email string) string {
	local, domain, ok := strings.Cut(email, "@")
	if !ok || local == "" {
		return "•••"
	}
	first := []rune(local)[0]
	return string(first) + "•••@" + domain
}

// InvitationAccepted records that an app redeemed an invitation of the
// user at the token endpoint: from now on the patient has a login
// (User.HasLogin), which every other invitation of theirs needed them
// not to have.
func (s *Service) InvitationAccepted(ctx context.Context, userID int64) error {
	now := s.Now()
	_, err := s.store.ChangeUser(ctx, userID, UserChange{InvitationAcceptedAt: &now})
	return err
}
