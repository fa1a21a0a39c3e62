package domain_test

import (
	"context"
	"sync"
	"testing"

	"exchange/domain"
)

var campus = &domain.IdentityProvider{ID: "campus", Kind: domain.IdentitySAML, Name: "Campus", FirstSignIn: domain.FirstSignInCreate}

// TestFederatedCreateCutShortIsFinished: a first sign-in whose creation
// stopped after the link was written (the link names a user that is not
// there) is finished by the next sign-in of the identity, under the
// link's user id; no account is created twice.
func TestFederatedCreateCutShortIsFinished(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	id := domain.FederatedIdentity{Issuer: "https://idp.campus.example", Subject: "ada", Email: "ada@campus.example", EmailVerified: true}
	if err := f.db.CreateIdentityLink(ctx, &domain.IdentityLink{Issuer: id.Issuer, Subject: id.Subject, Provider: "campus", UserID: 4242}); err != nil {
		t.Fatal(err)
	}
	u, err := f.svc.SignInFederated(ctx, campus, id)
	if err != nil || u.ID != 4242 || u.Email != "ada@campus.example" {
		t.Fatalf("finished create: %+v %v", u, err)
	}
	again, err := f.svc.SignInFederated(ctx, campus, id)
	if err != nil || again.ID != 4242 {
		t.Fatalf("the next sign-in: %+v %v", again, err)
	}
}

// TestConcurrentFirstSignInsMakeOneAccount: two first sign-ins of one
// identity at once (two tabs, two instances) end in one account, which
// both sign in as.
func TestConcurrentFirstSignInsMakeOneAccount(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	id := domain.FederatedIdentity{Issuer: "https://idp.campus.example", Subject: "bob", Email: "bob@campus.example", EmailVerified: true}
	var wg sync.WaitGroup
	users := make([]*domain.User, 4)
	errs := make([]error, 4)
	for i := range users {
		wg.Go(func() { users[i], errs[i] = f.svc.SignInFederated(ctx, campus, id) })
	}
	wg.Wait()
	for i := range users {
		if errs[i] != nil || users[i].ID != users[0].ID {
			t.Fatalf("sign-in %d: %+v %v (first: %+v)", i, users[i], errs[i], users[0])
		}
	}
	list, err := f.db.ListUsers(ctx, domain.UserQuery{}, domain.Page{Number: 1, Size: 10})
	if err != nil || list.Total != 1 {
		t.Fatalf("users %+v %v", list, err)
	}
}
