package repo

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"exchange/domain"
)

// The redemption of an invitation code (domain.Service.AcceptInvitation)
// writes several things: the code used, the patient's password set, their
// sessions and tokens ended. A crash after the first would leave the code
// spent and no password: the patient could neither redeem again nor sign
// in. So the redemption is a forward write intent (invitation.redeem),
// recorded before the first write with the new password's hash, and its
// repair applies it again.
//
// The code is used by a unique insert into invitation_redemptions, keyed
// by the code's record and naming the intent: of several redemptions of a
// code exactly one inserts it, on FerretDB too, whose conditional updates
// are not atomic (it reads, then writes). Applying a redemption again goes
// on only if the insert is its own. The password is then set only on an
// active patient whose password did not change after the redemption
// began, so a repair that comes late does not undo a later change.

const colInvitationRedemptions = "invitation_redemptions"

// redemptionDoc is a document of invitation_redemptions: a used code.
type redemptionDoc struct {
	ID        string        `bson:"_id"`       // the code's oauth_tokens _id
	IntentID  bson.ObjectID `bson:"intentId"`  // the redemption that used it
	ExpiresAt time.Time     `bson:"expiresAt"` // the code's: swept with it
}

// RedeemInvitation implements domain.InvitationStore.
func (d *DB) RedeemInvitation(ctx context.Context, r *domain.InvitationRedemption) error {
	in := &intentDoc{Kind: intentInvitationRedeem, UserID: r.UserID, TokenID: tokenID(domain.TokenAuthorizeCode, r.Signature),
		PasswordHash: r.PasswordHash, ChangedAt: r.At.UTC().Truncate(time.Millisecond)}
	if err := d.open(ctx, in); err != nil {
		return err
	}
	r.ID = in.ID.Hex()
	return d.applyRedemption(ctx, in)
}

// InvitationRedemptions implements domain.InvitationStore.
func (d *DB) InvitationRedemptions(ctx context.Context, signature string) ([]domain.InvitationRedemption, error) {
	var intents []intentDoc
	filter := bson.M{"kind": intentInvitationRedeem, "tokenId": tokenID(domain.TokenAuthorizeCode, signature)}
	if err := d.findAll(ctx, colIntents, filter, &intents); err != nil {
		return nil, err
	}
	out := make([]domain.InvitationRedemption, len(intents))
	for i, in := range intents {
		out[i] = domain.InvitationRedemption{ID: in.ID.Hex(), Signature: signature, UserID: in.UserID,
			PasswordHash: in.PasswordHash, At: in.ChangedAt.UTC()}
	}
	return out, nil
}

// FinishInvitationRedemption implements domain.InvitationStore.
func (d *DB) FinishInvitationRedemption(ctx context.Context, r *domain.InvitationRedemption) error {
	gone := domain.Errorf(domain.CodeNotFound, "no redemption %q in progress", r.ID)
	id, err := bson.ObjectIDFromHex(r.ID)
	if err != nil {
		return gone
	}
	var in intentDoc
	err = d.c(colIntents).FindOne(ctx, bson.M{"_id": id, "kind": intentInvitationRedeem}).Decode(&in)
	if errors.Is(err, mongo.ErrNoDocuments) {
		return gone
	}
	if err != nil {
		return err
	}
	return d.applyRedemption(ctx, &in)
}

// applyRedemption applies a recorded redemption and ends its intent, unless
// it failed half way: the intent then stays for the repair. Nothing (more)
// to do (CodeNotFound) ends it too.
func (d *DB) applyRedemption(ctx context.Context, in *intentDoc) error {
	err := d.redeem(ctx, in)
	end := forwardEnd(err)
	if domain.IsCode(err, domain.CodeNotFound) {
		end = writeDone
	}
	return d.close(ctx, in, end, err)
}

// repairRedemption is the repair of a redemption cut short: the
// redemption again, if there is anything (more) to do.
func (d *DB) repairRedemption(ctx context.Context, in *intentDoc) error {
	if err := d.redeem(ctx, in); !domain.IsCode(err, domain.CodeNotFound) {
		return err
	}
	return nil
}

// redeem writes what the intent's redemption writes; each step may be
// applied again. Returns CodeNotFound when there is nothing (more) to do:
// the code is not the intent's to use (another redemption took it, or it
// was cancelled or revoked), or its user is no active patient whose
// password is unchanged since.
func (d *DB) redeem(ctx context.Context, in *intentDoc) error {
	used := domain.Errorf(domain.CodeNotFound, "the invitation code is used, cancelled or revoked")
	var code oauthTokenDoc
	err := d.c(colOAuthTokens).FindOne(ctx, bson.M{"_id": in.TokenID}).Decode(&code)
	if errors.Is(err, mongo.ErrNoDocuments) {
		return used
	}
	if err != nil {
		return err
	}
	if code.Active {
		_, err = d.c(colInvitationRedemptions).InsertOne(ctx, redemptionDoc{ID: in.TokenID, IntentID: in.ID, ExpiresAt: code.ExpiresAt})
		if err != nil && !isDuplicate(err) {
			return err
		}
	}
	if !code.Active || err != nil {
		// Used: by this redemption before (applied again), or not.
		var claim redemptionDoc
		err := d.c(colInvitationRedemptions).FindOne(ctx, bson.M{"_id": in.TokenID}).Decode(&claim)
		if errors.Is(err, mongo.ErrNoDocuments) || err == nil && claim.IntentID != in.ID {
			return used
		}
		if err != nil {
			return err
		}
	}
	if _, err := d.c(colOAuthTokens).UpdateOne(ctx, bson.M{"_id": in.TokenID}, bson.M{"$set": bson.M{"active": false}}); err != nil {
		return err
	}
	_, err = d.setUser(ctx, in.UserID, bson.M{"userType": string(domain.UserPatient), "isActive": true,
		"$or": bson.A{bson.M{"credentialsChangedAt": bson.M{"$lte": in.ChangedAt}}, bson.M{"credentialsChangedAt": bson.M{"$exists": false}}}},
		bson.M{"passwordHash": in.PasswordHash, "credentialsChangedAt": in.ChangedAt}, nil,
		fmt.Sprintf("user %d is no active patient, or changed their password since", in.UserID))
	if err != nil {
		return err
	}
	if err := d.DeleteLoginSessionsOfUser(ctx, in.UserID); err != nil {
		return err
	}
	return d.DeactivateOAuthTokensOfUser(ctx, in.UserID)
}
