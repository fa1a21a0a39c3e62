package handlers_test

import (
	"maps"
	"testing"

	"exchange/handlers"
	"exchange/handlers/handlerstest"
	"exchange/repo"
	"exchange/repo/repotest"
)

// TestABatchMakesFewDatabaseRoundTrips pins the database commands one
// batch Bundle of 100 native observations makes, counted by a driver
// CommandMonitor on the real store: on the embedded FerretDB each
// command costs about as much CPU as several observations, so the fixed
// cost of a batch is its round trips (the target: HTTP batch within 1.15x
// of a raw InsertMany at 100). The first batch of the process also claims
// an id block (counters, id_blocks) and takes the lease; the batch
// counted is a later one. The lease's renewal, on a timer, is left out.
func TestABatchMakesFewDatabaseRoundTrips(t *testing.T) {
	var commands repotest.Commands
	w := newBenchWorld(t, handlerstest.Options{DB: repo.Options{Monitor: commands.Monitor()}})
	w.post(t, handlers.BenchBatch("first", 0, 100, w.patient.ID, w.device), 100)
	before := commands.Snapshot()
	w.post(t, handlers.BenchBatch("counted", 0, 100, w.patient.ID, w.device), 100)
	got := commands.Since(before, "service_instances update")
	want := map[string]int{
		// The bearer token and the actor: the token, its client, its
		// user, the user's memberships and the organizations below them.
		"oauth_tokens find": 1, "oauth_clients find": 1, "users find": 1, "memberships find": 1, "organizations find": 1,
		// The rules of a create: the patient, their consents, the device
		// (the consents' scope codes were read by the first batch).
		"patients find": 1, "consents find": 1, "data_sources find": 1,
		// The write: its intent, the claims, the observations.
		"write_intents insert": 1, "observation_identifiers insert": 1, "observations insert": 1, "write_intents delete": 1,
	}
	if !maps.Equal(got, want) {
		t.Errorf("one batch of 100 made these commands:\n%v\nwant:\n%v", got, want)
	}
}

// TestAPatientsOwnBatchReadsTheirRecordOnce: a patient's app sending the
// patient's own data reads the patient record once, for the token's
// actor and the rules of the create alike.
func TestAPatientsOwnBatchReadsTheirRecordOnce(t *testing.T) {
	var commands repotest.Commands
	w := newBenchWorld(t, handlerstest.Options{DB: repo.Options{Monitor: commands.Monitor()}})
	w.token = w.env.Token(t, w.patient.UserID)
	before := commands.Snapshot()
	w.post(t, handlers.BenchBatch("own", 0, 10, w.patient.ID, w.device), 10)
	if n := commands.Since(before)["patients find"]; n != 1 {
		t.Errorf("the batch read the patient %d times, want once", n)
	}
}

// TestAResendReadsNoObservations pins the database commands of a batch of
// 100 native observations sent again, every one stored already: it is
// told from the claims alone (read twice, around the intents of the
// writes in flight), with no pass over the observations, which on the
// embedded FerretDB decodes every stored observation.
func TestAResendReadsNoObservations(t *testing.T) {
	var commands repotest.Commands
	w := newBenchWorld(t, handlerstest.Options{DB: repo.Options{Monitor: commands.Monitor()}})
	batch := handlers.BenchBatch("resent", 0, 100, w.patient.ID, w.device)
	w.post(t, batch, 100)
	before := commands.Snapshot()
	checkResend(t, "resend", w.send(t, batch), 100)
	got := commands.Since(before, "service_instances update")
	want := map[string]int{
		"oauth_tokens find": 1, "oauth_clients find": 1, "users find": 1, "memberships find": 1, "organizations find": 1,
		"patients find": 1, "consents find": 1, "data_sources find": 1,
		// The write: its intent, the claims (all taken), the claims'
		// holders, the intents of the writes in flight, the holders
		// again; no observation is read or written.
		"write_intents insert": 1, "observation_identifiers insert": 1, "observation_identifiers find": 2,
		"write_intents find": 1, "write_intents delete": 1,
	}
	if !maps.Equal(got, want) {
		t.Errorf("one resent batch of 100 made these commands:\n%v\nwant:\n%v", got, want)
	}
}
