package mcp

import (
	"crypto/sha256"
	"encoding/base64"
	"html/template"
	"net/http"
)

// pageStyle is the only style of the gateway's pages. It is inline, so the
// pages stand alone, and allowed by its hash: the Content-Security-Policy
// allows no other style and no script at all.
const pageStyle = `body{font:16px/1.5 system-ui,sans-serif;margin:0;color:#1b1b1b;background:#f4f5f7}` +
	`main{max-width:36rem;margin:2rem auto;padding:1.5rem 2rem;background:#fff;border-radius:8px;box-shadow:0 1px 3px rgba(0,0,0,.2)}` +
	`h1{font-size:1.4rem;margin-top:0}h2{font-size:1.05rem;margin:1.2rem 0 .3rem}` +
	`.host{font-family:ui-monospace,monospace;font-size:1.2rem;font-weight:700;word-break:break-all;background:#fff4e5;padding:.2rem .4rem;margin:0}` +
	`.uri{font-family:ui-monospace,monospace;word-break:break-all;color:#4a4a4a}` +
	`.actions{display:flex;gap:1rem;margin:1.5rem 0}` +
	`button{font:inherit;padding:.6rem 1.6rem;border-radius:6px;border:1px solid #4a4a4a;background:#fff;color:#1b1b1b;cursor:pointer}` +
	`button.allow{background:#0b5cad;border-color:#0b5cad;color:#fff}button:focus-visible{outline:3px solid #b35c00;outline-offset:2px}` +
	`.note{color:#4a4a4a;font-size:.95rem}`

// pageSecurityPolicy is the Content-Security-Policy of every page: nothing
// but its own style, no scripts, no base, and never inside a frame (the
// approval page's buttons must not be clickable through another site's
// page: clickjacking).
var pageSecurityPolicy = func() string {
	sum := sha256.Sum256([]byte(pageStyle))
	return "default-src 'none'; style-src 'sha256-" + base64.StdEncoding.EncodeToString(sum[:]) + "'; frame-ancestors 'none'; base-uri 'none'"
}()

// pages are the gateway's HTML pages: the approval page and the error page.
// html/template escapes every value, whoever chose it (a client's name, a
// redirect URI).
var pages = template.Must(template.New("pages").Parse(`
{{- define "head" -}}
<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{{.}} · Clinical data exchange MCP gateway</title>
<style>` + pageStyle + `</style>
</head>
{{- end}}

{{- define "error" -}}
{{template "head" .Title}}
<body>
<main>
<h1>{{.Title}}</h1>
<p>{{.Message}}</p>
</main>
</body>
</html>
{{end}}

{{- define "approval" -}}
{{template "head" "Allow access?"}}
<body>
<main>
<h1>Allow {{if .ClientName}}“{{.ClientName}}”{{else}}an application without a name{{end}} to read your data?</h1>
<p>An application asks to use the clinical data exchange <strong>as you</strong>, through this gateway for AI assistants.
Any application can register here under any name: allow it only if you have just connected an assistant you trust
and you recognise the address below.</p>
<h2>Your access will be sent to</h2>
<p class="host">{{.Host}}</p>
<p class="uri">{{.RedirectURI}}{{if .Loopback}} (an application on this computer){{end}}</p>
<h2>What it will be able to do</h2>
<ul>
<li>Read the research studies you can see, and who is enrolled in them.</li>
<li>Read the patients you can see: names, birth dates, contact details and identifiers.</li>
<li>Read those patients' observations: the wearable and app data they share.</li>
</ul>
<p>Read-only: it cannot change or delete anything, and it sees only what you may see.</p>
<form method="post" action="{{.Action}}">
<input type="hidden" name="request" value="{{.Request}}">
<div class="actions">
<button type="submit" name="decision" value="allow" class="allow">Allow</button>
<button type="submit" name="decision" value="deny">Deny</button>
</div>
</form>
<p class="note">{{if .Remember}}This browser remembers your answer for this application and address for {{.Remember}}. {{end}}If you allow, you sign in at the exchange next, unless you are signed in already.</p>
</main>
</body>
</html>
{{end}}`))

// approvalView is what the approval page shows.
type approvalView struct {
	ClientName  string // as registered, "" when none was given
	Host        string // of the redirect URI: where the access goes
	RedirectURI string
	Loopback    bool   // the redirect URI is on the user's own computer
	Action      string // where the form posts: the gateway's /authorize
	Request     string // the sealed approvalRequest
	Remember    string // how long an Allow is remembered, "" when it is not
}

// setPageHeaders sets what every page of the gateway answers with: HTML,
// never cached (an approval page carries a request sealed for one
// browser), never framed, never sniffed, and no Referer to where it leads.
func setPageHeaders(h http.Header) {
	h.Set("Content-Type", "text/html; charset=utf-8")
	h.Set("Cache-Control", "no-store")
	h.Set("Content-Security-Policy", pageSecurityPolicy)
	h.Set("X-Frame-Options", "DENY")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
}

// errorPage tells the user what went wrong when there is no trustworthy
// client to redirect to.
func errorPage(w http.ResponseWriter, status int, title, message string) {
	setPageHeaders(w.Header())
	w.WriteHeader(status)
	_ = pages.ExecuteTemplate(w, "error", struct{ Title, Message string }{title, message})
}
