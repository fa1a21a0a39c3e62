package handlerstest

import (
	"io"
	"mime"
	"mime/quotedprintable"
	"net"
	"net/mail"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/emersion/go-smtp"

	"exchange/internal/mailer"
)

// MailServer is an SMTP server in the test's process: the inbox of every
// address, for tests of what the exchange emails.
type MailServer struct {
	// Mailer sends to it (Options.Mailer).
	Mailer *mailer.SMTP
	mu     sync.Mutex
	sent   []Mail
}

// Mail is a message the MailServer received, its body decoded.
type Mail struct {
	From, To, Subject, Text string
}

// StartMailServer runs an SMTP server on a free loopback port until the
// test ends.
func StartMailServer(t testing.TB) *MailServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	m := &MailServer{}
	srv := smtp.NewServer(smtp.BackendFunc(func(*smtp.Conn) (smtp.Session, error) { return &mailSession{server: m}, nil }))
	srv.Domain, srv.ReadTimeout, srv.WriteTimeout = "localhost", 10*time.Second, 10*time.Second
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	if m.Mailer, err = mailer.New("smtp://"+ln.Addr().String(), "exchange@example.org"); err != nil {
		t.Fatal(err)
	}
	return m
}

func (m *MailServer) Messages() []Mail {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]Mail(nil), m.sent...)
}

// To returns the messages to an address.
func (m *MailServer) To(address string) []Mail {
	var out []Mail
	for _, msg := range m.Messages() {
		if msg.To == address {
			out = append(out, msg)
		}
	}
	return out
}

type mailSession struct {
	server   *MailServer
	from, to string
}

func (s *mailSession) Reset()        { s.from, s.to = "", "" }
func (s *mailSession) Logout() error { return nil }
func (s *mailSession) Mail(from string, _ *smtp.MailOptions) error {
	s.from = from
	return nil
}
func (s *mailSession) Rcpt(to string, _ *smtp.RcptOptions) error {
	s.to = to
	return nil
}

// Data decodes the message as a mail reader would: the subject's encoded
// words and the quoted-printable body.
func (s *mailSession) Data(r io.Reader) error {
	msg, err := mail.ReadMessage(r)
	if err != nil {
		return err
	}
	subject, err := new(mime.WordDecoder).DecodeHeader(msg.Header.Get("Subject"))
	if err != nil {
		return err
	}
	body, err := io.ReadAll(quotedprintable.NewReader(msg.Body))
	if err != nil {
		return err
	}
	s.server.mu.Lock()
	s.server.sent = append(s.server.sent, Mail{From: s.from, To: s.to, Subject: subject, Text: strings.ReplaceAll(string(body), "\r\n", "\n")})
	s.server.mu.Unlock()
	return nil
}
