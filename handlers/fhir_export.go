package handlers

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/klauspost/compress/gzip"

	"exchange/domain"
	"exchange/handlers/httpstatus"
)

// FHIR Bulk Data Access: the kick-off of $export at its three levels, the
// status URL a client polls (and deletes), and the files the manifest
// lists. The rules are the domain's (domain/exports.go); this file reads
// the parameters, which the specification lets a client send in the query
// string or (POST) as a Parameters resource, and writes the answers.
// docs/bulk-export.md describes the whole.

// The paths of a job's status and files, under the FHIR base.
const (
	exportStatusPath = "/$export-status/"
	exportFilePath   = "/$export-file/"
	// exportErrorsName is the manifest's error file: an OperationOutcome
	// per parameter the kick-off ignored (Prefer: handling=lenient).
	exportErrorsName = "errors.ndjson"
)

// exportPollInterval is the Retry-After of a running job's status; a
// client that polls again within exportPollGrace of it is answered 429.
const (
	exportPollInterval = time.Second
	exportPollGrace    = 500 * time.Millisecond
)

// registerExport mounts the kick-off and status routes on the FHIR group
// (authenticated), before its generic /:type routes.
func (s *server) registerExport(api fiber.Router) {
	for _, method := range []string{fiber.MethodGet, fiber.MethodPost} {
		api.Add(method, "/$export", s.exportKickoff(domain.ExportSystem))
		api.Add(method, "/Patient/$export", s.exportKickoff(domain.ExportPatient))
		api.Add(method, "/Group/:id/$export", s.exportKickoff(domain.ExportGroup))
	}
	api.Get(exportStatusPath+":job", s.exportStatus)
	api.Delete(exportStatusPath+":job", s.exportDelete)
}

// registerExportFiles mounts the file downloads under a FHIR prefix: NDJSON
// is not the JSON the FHIR group negotiates, so they stand outside it.
func (s *server) registerExportFiles(app *fiber.App, prefix string) {
	app.Get(prefix+exportFilePath+":job/:file", s.fhirCORS, s.authenticate, s.exportFile)
}

// exportParameter names the kick-off parameters read, besides _format,
// which content negotiation reads.
var exportParameters = []string{"_outputFormat", "_since", "_until", "_type", "_typeFilter", "_elements", "patient", "_format"}

// exportElement is one _elements value: an element, optionally of a type.
var exportElement = regexp.MustCompile(`^([A-Z][A-Za-z]+\.)?[a-zA-Z][a-zA-Z0-9]*(\[x\])?$`)

// exportKickoff starts an export at a level: 202 with the status URL in
// Content-Location.
func (s *server) exportKickoff(level domain.ExportLevel) fiber.Handler {
	return func(c *fiber.Ctx) error {
		if p := c.Get("Prefer"); p != "" && !prefers(c, "respond-async") && !strings.Contains(p, "handling=") {
			return domain.Errorf(domain.CodeInvalid, "Prefer: an export answers asynchronously (respond-async)")
		}
		params, err := exportParams(c)
		if err != nil {
			return err
		}
		req, err := exportRequest(level, params, prefers(c, "handling=lenient"))
		if err != nil {
			return err
		}
		if level == domain.ExportGroup {
			id, ok := domain.ParseID(c.Params("id"))
			if !ok {
				return domain.Errorf(domain.CodeNotFound, "Group/%s does not exist", c.Params("id"))
			}
			req.GroupID = id
		}
		req.URL = origin(c) + string(c.Request().URI().RequestURI())
		j, err := s.service.StartExport(c.UserContext(), actor(c), req, s.exportLimits)
		if err != nil {
			return err
		}
		c.Set("Content-Location", fhirBase(c)+exportStatusPath+j.ID)
		return writeFHIR(c, fiber.StatusAccepted, outcomeOf(fhirIssue("information", "informational",
			"The export is queued: poll the URL of Content-Location until it answers 200 with the manifest.", "")))
	}
}

// exportParams gathers the kick-off's parameters: those of the query
// string, and of a Parameters body (POST).
func exportParams(c *fiber.Ctx) (url.Values, error) {
	params, err := queryValues(c)
	if err != nil {
		return nil, err
	}
	body := c.Body()
	if c.Method() != fiber.MethodPost || len(strings.TrimSpace(string(body))) == 0 {
		return params, nil
	}
	var in struct {
		ResourceType string `json:"resourceType"`
		Parameter    []struct {
			Name           string           `json:"name"`
			ValueString    *string          `json:"valueString"`
			ValueInstant   *string          `json:"valueInstant"`
			ValueDateTime  *string          `json:"valueDateTime"`
			ValueCode      *string          `json:"valueCode"`
			ValueReference *json.RawMessage `json:"valueReference"`
		} `json:"parameter"`
	}
	if err := decodeExact(body, &in); err != nil || in.ResourceType != "Parameters" {
		return nil, domain.Errorf(domain.CodeInvalid, "a kick-off's body is a FHIR Parameters resource")
	}
	for _, p := range in.Parameter {
		var v string
		switch {
		case p.ValueString != nil:
			v = *p.ValueString
		case p.ValueInstant != nil:
			v = *p.ValueInstant
		case p.ValueDateTime != nil:
			v = *p.ValueDateTime
		case p.ValueCode != nil:
			v = *p.ValueCode
		case p.ValueReference != nil:
			var ref struct {
				Reference string `json:"reference"`
			}
			_ = json.Unmarshal(*p.ValueReference, &ref)
			v = ref.Reference
		default:
			return nil, domain.Errorf(domain.CodeInvalid, "parameter %q has no value this operation reads", p.Name)
		}
		params.Add(p.Name, v)
	}
	return params, nil
}

// exportRequest reads the parameters into a request. An unknown parameter
// is refused, or with lenient ignored and named in the manifest.
func exportRequest(level domain.ExportLevel, params url.Values, lenient bool) (domain.ExportRequest, error) {
	req := domain.ExportRequest{Level: level}
	var err error
	if req.Format, err = domain.ParseExportFormat(params.Get("_outputFormat")); err != nil {
		return req, err
	}
	for name, values := range params {
		if !slices.Contains(exportParameters, name) || name == "patient" && level != domain.ExportPatient {
			if !lenient {
				return req, domain.Errorf(domain.CodeInvalid, "%s: this server's $export does not take this parameter (Prefer: handling=lenient ignores it)", name)
			}
			req.Ignored = append(req.Ignored, name)
			continue
		}
		if len(values) > 1 && !slices.Contains([]string{"_type", "_typeFilter", "patient", "_elements"}, name) {
			return req, domain.Errorf(domain.CodeInvalid, "%s: given %d times; it takes one value", name, len(values))
		}
	}
	slices.Sort(req.Ignored)
	for _, name := range []string{"_since", "_until"} {
		v := params.Get(name)
		if v == "" {
			continue
		}
		t, err := time.Parse(time.RFC3339Nano, v)
		if err != nil {
			return req, domain.FieldErrorf(name, "%q is not a FHIR instant (such as 2026-01-02T03:04:05Z)", v)
		}
		if name == "_since" {
			req.Since = &t
		} else {
			req.Until = &t
		}
	}
	for _, v := range params["_type"] {
		for _, t := range strings.Split(v, ",") {
			if t = strings.TrimSpace(t); t != "" && !slices.Contains(req.Types, t) {
				req.Types = append(req.Types, t)
			}
		}
	}
	req.TypeFilters = params["_typeFilter"]
	for _, f := range req.TypeFilters {
		if t, _, ok := strings.Cut(f, "?"); !ok || t == "" {
			return req, domain.FieldErrorf("_typeFilter", "%q is not Type?search-parameters", f)
		}
	}
	for _, v := range params["_elements"] {
		for _, e := range strings.Split(v, ",") {
			if e = strings.TrimSpace(e); !exportElement.MatchString(e) {
				return req, domain.FieldErrorf("_elements", "%q is not an element name (element or Type.element)", e)
			}
			req.Elements = append(req.Elements, e)
		}
	}
	if len(req.Elements) > 0 && req.Format == domain.ExportOMH {
		return req, domain.FieldErrorf("_elements", "the %s format writes whole data points", domain.ExportOMH)
	}
	for _, v := range params["patient"] {
		for _, ref := range strings.Split(v, ",") {
			id, ok := domain.ParseID(strings.TrimPrefix(strings.TrimSpace(ref), "Patient/"))
			if !ok {
				return req, domain.FieldErrorf("patient", "%q is not a reference to a Patient (Patient/<id>)", ref)
			}
			req.Patients = append(req.Patients, id)
		}
	}
	return req, nil
}

// polls remembers when each job's status was last polled here, to answer
// a client that polls faster than told with 429.
type polls struct {
	mu   sync.Mutex
	last map[string]time.Time
}

// tooSoon records a poll of job and reports whether it came sooner than
// Retry-After allowed (with some grace).
func (p *polls) tooSoon(job string, now time.Time) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.last == nil {
		p.last = map[string]time.Time{}
	}
	if len(p.last) > 10_000 { // forget old polls rather than grow
		for id, at := range p.last {
			if now.Sub(at) > time.Minute {
				delete(p.last, id)
			}
		}
	}
	last, seen := p.last[job]
	if seen && now.Sub(last) < exportPollInterval-exportPollGrace {
		return true
	}
	p.last[job] = now
	return false
}

// exportStatus answers a job's status: 202 while it runs, the manifest
// when it is done, the failure's OperationOutcome if it failed.
func (s *server) exportStatus(c *fiber.Ctx) error {
	j, err := s.service.ExportJobFor(c.UserContext(), actor(c), c.Params("job"))
	if err != nil {
		return err
	}
	retry := strconv.Itoa(int(exportPollInterval / time.Second))
	switch j.State {
	case domain.ExportQueued, domain.ExportRunning:
		c.Set(fiber.HeaderRetryAfter, retry)
		if s.polls.tooSoon(j.ID, time.Now()) {
			return writeFHIR(c, fiber.StatusTooManyRequests, outcomeOf(fhirIssue("error", string(domain.CodeThrottled),
				"polled sooner than Retry-After asked", "")))
		}
		c.Set("X-Progress", j.ExportProgress())
		// Where to poll next, as the kick-off said: clients that read an
		// answer's Content-Location (or its body) for it find it here.
		c.Set("Content-Location", fhirBase(c)+exportStatusPath+j.ID)
		return writeFHIR(c, fiber.StatusAccepted, outcomeOf(fhirIssue("information", "informational", j.ExportProgress(), "")))
	case domain.ExportFailed:
		code := j.FailureCode
		if code == "" {
			code = domain.CodeInternal
		}
		return writeFHIR(c, httpstatus.Of(domain.Errorf(code, "")), outcomeOf(fhirIssue("error", issueType(code), j.Failure, "")))
	}
	c.Set(fiber.HeaderExpires, j.ExpiresAt.UTC().Format(http.TimeFormat))
	return c.Status(fiber.StatusOK).JSON(exportManifest(fhirBase(c), j), mediaJSON)
}

// manifestOutput is one file of a manifest.
type manifestOutput struct {
	Type  string `json:"type"`
	URL   string `json:"url"`
	Count int64  `json:"count,omitempty"`
}

type manifest struct {
	TransactionTime     string           `json:"transactionTime"`
	Request             string           `json:"request"`
	RequiresAccessToken bool             `json:"requiresAccessToken"`
	Output              []manifestOutput `json:"output"`
	Deleted             []manifestOutput `json:"deleted"`
	Error               []manifestOutput `json:"error"`
}

// exportManifest is a completed job's manifest: every key present (empty
// lists as []), absolute URLs under base, one type per file. It names
// only the job's own files: their types and counts, nothing of anyone
// else's data.
func exportManifest(base string, j *domain.ExportJob) manifest {
	m := manifest{TransactionTime: instant(j.TransactionTime), Request: j.Request.URL, RequiresAccessToken: true,
		Output: []manifestOutput{}, Deleted: []manifestOutput{}, Error: []manifestOutput{}}
	files := base + exportFilePath + j.ID + "/"
	for _, o := range j.Outputs {
		m.Output = append(m.Output, manifestOutput{Type: o.Type, URL: files + o.Name, Count: o.Count})
	}
	if len(j.Request.Ignored) > 0 {
		m.Error = append(m.Error, manifestOutput{Type: "OperationOutcome", URL: files + exportErrorsName, Count: int64(len(j.Request.Ignored))})
	}
	return m
}

// exportDelete cancels or removes a job: 202, and its status is 404 from
// then on.
func (s *server) exportDelete(c *fiber.Ctx) error {
	if err := s.service.DeleteExport(c.UserContext(), actor(c), c.Params("job")); err != nil {
		return err
	}
	return writeFHIR(c, fiber.StatusAccepted, outcomeOf(fhirIssue("information", "informational", "The export is deleted.", "")))
}

// exportFile serves a file of a completed job to its owner: the stored
// gzip as it is to a client that accepts gzip, else uncompressed.
func (s *server) exportFile(c *fiber.Ctx) error {
	ctx, jobID, name := c.UserContext(), c.Params("job"), c.Params("file")
	if name == exportErrorsName {
		return s.exportErrors(c, jobID)
	}
	f, err := s.service.OpenExportFile(ctx, actor(c), jobID, name)
	if err != nil {
		return err
	}
	c.Set(fiber.HeaderContentType, string(f.Format))
	c.Set(fiber.HeaderCacheControl, "no-store")
	if acceptsGzip(c) {
		c.Set(fiber.HeaderContentEncoding, "gzip")
		return c.SendStream(f, int(f.File.Bytes))
	}
	gz, err := gzip.NewReader(bufio.NewReaderSize(f, 64<<10))
	if err != nil {
		f.Close()
		return err
	}
	return c.SendStream(&closingReader{Reader: gz, close: func() error { gz.Close(); return f.Close() }}, -1)
}

// exportErrors serves the manifest's error file: an OperationOutcome per
// parameter the kick-off ignored.
func (s *server) exportErrors(c *fiber.Ctx, jobID string) error {
	j, err := s.service.ExportJobFor(c.UserContext(), actor(c), jobID)
	if err != nil {
		return err
	}
	if j.State != domain.ExportCompleted || len(j.Request.Ignored) == 0 {
		return domain.Errorf(domain.CodeNotFound, "export %s has no file %q", jobID, exportErrorsName)
	}
	var b []byte
	for _, p := range j.Request.Ignored {
		b = appendMarshalled(b, outcomeOf(fhirIssue("warning", "not-supported", "The parameter "+p+" is not supported and was ignored.", "")))
		b = append(b, '\n')
	}
	c.Set(fiber.HeaderContentType, string(domain.ExportFHIR))
	return c.Send(b)
}

// acceptsGzip reports whether the request's Accept-Encoding takes gzip
// (or anything), with a weight above zero.
func acceptsGzip(c *fiber.Ctx) bool {
	for _, part := range strings.Split(c.Get(fiber.HeaderAcceptEncoding), ",") {
		coding, params, _ := strings.Cut(strings.TrimSpace(part), ";")
		if coding = strings.TrimSpace(coding); !strings.EqualFold(coding, "gzip") && coding != "*" {
			continue
		}
		weight := 1.0
		if v, ok := strings.CutPrefix(strings.ReplaceAll(params, " ", ""), "q="); ok {
			weight, _ = strconv.ParseFloat(v, 64)
		}
		return weight > 0
	}
	return false
}

// closingReader is a reader with its own Close (fasthttp closes a body
// stream once sent).
type closingReader struct {
	io.Reader
	close func() error
}

func (r *closingReader) Close() error { return r.close() }

// ExportEncoder renders the records of an export as the FHIR API serves
// them, one per line (domain.ExportEncoder), or, in the Open mHealth
// format, an observation's data point with its context.
type ExportEncoder struct{}

var _ domain.ExportEncoder = ExportEncoder{}

// AppendRecord implements domain.ExportEncoder. elements are the
// export's _elements: plain names apply to every type, Type.name to that
// type.
func (ExportEncoder) AppendRecord(dst []byte, format domain.ExportFormat, elements []string, record any) ([]byte, error) {
	if format == domain.ExportOMH {
		o, ok := record.(*domain.Observation)
		if !ok {
			return nil, fmt.Errorf("the %s format holds observations, not %T", format, record)
		}
		return appendOMHLine(dst, o)
	}
	var resource any
	var resourceType string
	switch r := record.(type) {
	case *domain.Observation:
		resource, resourceType = observationFHIR(r), "Observation"
	case *domain.Patient:
		resource, resourceType = patientFHIR(r), "Patient"
	case *domain.User:
		resource, resourceType = practitionerFHIR(r), "Practitioner"
	case *domain.Organization:
		resource, resourceType = organizationFHIR(r), "Organization"
	case *domain.GroupView:
		resource, resourceType = groupFHIR(r), "Group"
	case *domain.DataSource:
		resource, resourceType = deviceFHIR(r), "Device"
	case *domain.Resource:
		resource, resourceType = storedJSON(r.JSON), r.Type
	case *domain.AuditEvent:
		resource, resourceType = auditEventFHIR(r), "AuditEvent"
	default:
		return nil, fmt.Errorf("an export has no rendering of %T", record)
	}
	if keep := elementsFor(elements, resourceType); len(keep) > 0 {
		resource = withElements(resource, keep)
	}
	return append(appendMarshalled(dst, resource), '\n'), nil
}

// elementsFor are the _elements values that apply to a type, without
// their type prefix.
func elementsFor(elements []string, resourceType string) []string {
	var out []string
	for _, e := range elements {
		if t, name, typed := strings.Cut(e, "."); !typed {
			out = append(out, e)
		} else if t == resourceType {
			out = append(out, name)
		}
	}
	return out
}

// appendOMHLine writes an observation as a line of the Open mHealth
// format: its id, patient, native code and effective time (start and, for
// an interval, end) beside its data point, decoded and on one line. The
// keys are snake_case, as the data points' own, so a DataFrame built from
// the lines has flat columns.
func appendOMHLine(b []byte, o *domain.Observation) ([]byte, error) {
	b = appendQuotedInt(append(b, `{"id":`...), "", o.ID)
	b = appendQuotedInt(append(b, `,"patient":`...), "", o.PatientID)
	b = domain.AppendJSONString(append(b, `,"code":`...), o.Code)
	if tf := o.Effective; tf != nil {
		start, end := tf.DateTime, tf.DateTime
		if !tf.IsInstant() {
			start, end = tf.PeriodStart, tf.PeriodEnd
		}
		if start != "" {
			b = domain.AppendJSONString(append(b, `,"effective_start":`...), start)
		}
		if end != "" {
			b = domain.AppendJSONString(append(b, `,"effective_end":`...), end)
		}
	}
	b = append(b, `,"data_point":`...)
	buf := bytes.NewBuffer(b)
	if err := json.Compact(buf, o.Payload); err != nil {
		return nil, fmt.Errorf("observation %d: its data point is not JSON: %w", o.ID, err)
	}
	return append(buf.Bytes(), '}', '\n'), nil
}
