// Package mailer sends the exchange's email (domain.Mailer) through an
// SMTP server: invitations and notices to patients' registered addresses.
// It speaks SMTP with github.com/emersion/go-smtp, a maintained client and
// server (the standard library's net/smtp is frozen), and writes each
// message as one plain-text part in quoted-printable UTF-8.
//
// Nothing crosses the network in clear: a server reached by smtp:// must
// offer STARTTLS, unless it is on the loopback interface (a local relay,
// tests); smtps:// is TLS from the start.
package mailer

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	"mime"
	"mime/quotedprintable"
	"net"
	"net/mail"
	"net/url"
	"strings"
	"time"

	"github.com/emersion/go-sasl"
	"github.com/emersion/go-smtp"

	"exchange/domain"
)

// SMTP is a domain.Mailer that hands each message to one SMTP server.
type SMTP struct {
	addr     string // host:port
	host     string
	implicit bool // smtps: TLS from the first byte
	user     string
	password string
	from     string
	// TLS is the configuration of STARTTLS and smtps connections; nil:
	// the system's roots, verifying the server's name.
	TLS *tls.Config
}

var _ domain.Mailer = (*SMTP)(nil)

// sendTimeout bounds one message's exchange with the server when the
// context has no earlier deadline.
const sendTimeout = 30 * time.Second

// New reads SMTP_URL (smtp://[user:password@]host[:port], port 587 by
// default, or smtps://... on port 465) and SMTP_FROM (the sender's
// address). The error names the setting at fault.
func New(rawURL, from string) (*SMTP, error) {
	u, err := url.Parse(rawURL)
	if err != nil || (u.Scheme != "smtp" && u.Scheme != "smtps") || u.Hostname() == "" || (u.Path != "" && u.Path != "/") || u.RawQuery != "" {
		return nil, errors.New("SMTP_URL: is not smtp://[user:password@]host[:port] or smtps://[user:password@]host[:port]")
	}
	addr, err := mail.ParseAddress(from)
	if err != nil || addr.Name != "" || addr.Address != strings.TrimSpace(from) {
		return nil, fmt.Errorf("SMTP_FROM: %q is not an email address", from)
	}
	m := &SMTP{host: u.Hostname(), implicit: u.Scheme == "smtps", from: addr.Address}
	port := u.Port()
	if port == "" {
		port = map[bool]string{true: "465", false: "587"}[m.implicit]
	}
	m.addr = net.JoinHostPort(m.host, port)
	if u.User != nil {
		m.user = u.User.Username()
		m.password, _ = u.User.Password()
	}
	return m, nil
}

// Send implements domain.Mailer.
func (m *SMTP) Send(ctx context.Context, msg domain.Mail) error {
	body, err := m.message(msg)
	if err != nil {
		return err
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, sendTimeout)
		defer cancel()
	}
	c, err := m.dial(ctx)
	if err != nil {
		return fmt.Errorf("smtp %s: %w", m.addr, err)
	}
	defer c.Close()
	if m.user != "" {
		if err := c.Auth(sasl.NewPlainClient("", m.user, m.password)); err != nil {
			return fmt.Errorf("smtp %s: authentication: %w", m.addr, err)
		}
	}
	if err := c.SendMail(m.from, []string{msg.To}, bytes.NewReader(body)); err != nil {
		return fmt.Errorf("smtp %s: %w", m.addr, err)
	}
	return c.Quit()
}

// dial connects: TLS from the start on smtps://, else STARTTLS, which a
// server off the loopback interface must offer.
func (m *SMTP) dial(ctx context.Context) (*smtp.Client, error) {
	tlsConfig := m.TLS
	if tlsConfig == nil {
		tlsConfig = &tls.Config{ServerName: m.host, MinVersion: tls.VersionTLS12}
	}
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", m.addr)
	if err != nil {
		return nil, err
	}
	deadline, _ := ctx.Deadline()
	_ = conn.SetDeadline(deadline)
	if m.implicit {
		conn = tls.Client(conn, tlsConfig)
	}
	if m.implicit || domain.IsLoopbackHost(m.host) {
		c := smtp.NewClient(conn)
		if err := c.Hello("localhost"); err != nil {
			c.Close()
			return nil, err
		}
		return c, nil
	}
	return smtp.NewClientStartTLS(conn, tlsConfig)
}

// message writes msg as an RFC 5322 message: one text/plain part in
// quoted-printable UTF-8, the subject encoded for non-ASCII (RFC 2047).
func (m *SMTP) message(msg domain.Mail) ([]byte, error) {
	to, err := mail.ParseAddress(msg.To)
	if err != nil || to.Name != "" || strings.ContainsAny(msg.To, "\r\n") {
		return nil, errors.New("mail: the recipient is not an email address") // no address: errors are logged
	}
	id := make([]byte, 16)
	_, _ = rand.Read(id)
	var b bytes.Buffer
	for _, h := range [][2]string{
		{"From", m.from},
		{"To", to.Address},
		{"Subject", mime.QEncoding.Encode("utf-8", strings.NewReplacer("\r", " ", "\n", " ").Replace(msg.Subject))},
		{"Date", time.Now().UTC().Format(time.RFC1123Z)},
		{"Message-ID", "<" + hex.EncodeToString(id) + "@" + m.host + ">"},
		{"MIME-Version", "1.0"},
		{"Content-Type", "text/plain; charset=utf-8"},
		{"Content-Transfer-Encoding", "quoted-printable"},
	} {
		fmt.Fprintf(&b, "%s: %s\r\n", h[0], h[1])
	}
	b.WriteString("\r\n")
	qp := quotedprintable.NewWriter(&b)
	if _, err := qp.Write([]byte(strings.ReplaceAll(msg.Text, "\n", "\r\n"))); err != nil {
		return nil, err
	}
	if err := qp.Close(); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}
