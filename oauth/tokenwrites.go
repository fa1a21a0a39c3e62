package oauth

import (
	"context"

	"github.com/ory/fosite"
	"github.com/ory/fosite/storage"

	"exchange/domain"
)

// A token request (a code exchange or a refresh) writes several records:
// fosite invalidates the code or the used refresh token, then stores the
// new access and refresh tokens. Without transactions, a crash between
// those writes would leave the client's code or refresh token used up
// and no token in its place; the retry would be refused, and fosite would
// take it for a replay and revoke the grant.
//
// So fositeStore implements fosite's storage.Transactional, not as a
// transaction but as a journal: inside one, the writes fosite makes are
// kept, and Commit applies them in an order where a crash at any point
// leaves the request retryable:
//
//  1. the grant's access tokens are removed (the old one on a refresh,
//     orphans of a crashed attempt on a code exchange);
//  2. the new access and refresh tokens are stored;
//  3. the grant's other refresh tokens and the code are retired: inactive,
//     but marked pending, which lets a retry of the same request use them
//     again while the request is not answered;
//  4. once the token response is written (Provider.token), the grant is
//     answered: the pending marks and the code's PKCE and OpenID Connect
//     records go.
//
// A crash before 3 leaves the code or refresh token active; one before 4
// leaves it pending: either way the retry succeeds and its step 1 and 3
// retire what the first attempt stored. Only a crash after the response
// was written and before the client read it cannot be told from a replay
// (RFC 6749 section 10.5; the Security BCP's reuse detection): the client
// authorizes again.

type journalKey struct{}

// tokenJournal holds the writes of one token request until Commit.
type tokenJournal struct {
	requestID string
	creates   []*domain.OAuthToken
	code      string // the signature of the code exchanged, if any
}

func journalOf(ctx context.Context) *tokenJournal {
	j, _ := ctx.Value(journalKey{}).(*tokenJournal)
	return j
}

var _ storage.Transactional = (*fositeStore)(nil)

// BeginTX implements storage.Transactional: it starts a journal.
func (s *fositeStore) BeginTX(ctx context.Context) (context.Context, error) {
	return context.WithValue(ctx, journalKey{}, &tokenJournal{}), nil
}

// Commit implements storage.Transactional: it applies the journal in the
// order above.
func (s *fositeStore) Commit(ctx context.Context) error {
	j := journalOf(ctx)
	if j == nil || len(j.creates) == 0 && j.code == "" {
		return nil
	}
	if j.requestID != "" {
		if err := s.store.DeleteOAuthTokensOfRequest(ctx, domain.TokenAccess, j.requestID); err != nil {
			return err
		}
	}
	newRefresh := ""
	for _, t := range j.creates {
		if err := s.store.CreateOAuthToken(ctx, t); err != nil {
			return err
		}
		if t.Kind == domain.TokenRefresh {
			newRefresh = t.Signature
		}
	}
	if newRefresh != "" {
		if err := s.store.RetireOAuthTokens(ctx, domain.TokenRefresh, j.requestID, newRefresh); err != nil {
			return err
		}
	}
	if j.code != "" {
		err := s.store.RetireOAuthToken(ctx, domain.TokenAuthorizeCode, j.code)
		if domain.IsCode(err, domain.CodeNotFound) {
			return fosite.ErrNotFound
		}
		return err
	}
	return nil
}

// Rollback implements storage.Transactional: the journal is dropped.
func (s *fositeStore) Rollback(ctx context.Context) error {
	if j := journalOf(ctx); j != nil {
		*j = tokenJournal{}
	}
	return nil
}

// answered ends a token request whose response is written: see above.
func (s *fositeStore) answered(ctx context.Context, requestID string) error {
	return s.store.AnswerOAuthTokens(context.WithoutCancel(ctx), requestID)
}
