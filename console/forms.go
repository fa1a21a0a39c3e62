package console

import (
	"errors"
	"fmt"
	"html"
	"html/template"
	"net/http"
	"net/url"
	"regexp"
	"strings"

	"exchange/domain"
)

// A refused form comes back as the page it is on, answered with the
// refusal's status: the form holds what the user typed, and the reason
// stands beside the field at fault (or above the form, when the reason is
// about no one field). A bare error page would lose what was typed.
//
// A page's renderer takes the refusal (nil on a plain GET) and hands it
// to the templates in view.Form; the templates ask the view, form by form
// and field by field, for what to show: Typed, Chosen, Problem and
// FormProblem.

// formState is a form that was refused: what was sent and why.
type formState struct {
	Form    string     // the form's name on its page
	Values  url.Values // what the user sent
	Field   string     // the form's field the reason is about; "" for the form as a whole
	Message string
	Status  int
}

// formSpec names a form of a page and says which of its fields the
// domain's errors are about.
type formSpec struct {
	name string
	// fields maps a field a domain error names (as the admin API's JSON
	// names it, without list indexes: "identifiers.value") to the form's
	// field.
	fields map[string]string
	// unnamed is the form's field an error that names no field is about,
	// by the error's code (a taken identifier); absent: the form as a
	// whole.
	unnamed map[domain.Code]string
}

// refusedCodes are the errors a user corrects on the form itself. Others
// (forbidden, a fault) are answered with the error page.
var refusedCodes = []domain.Code{domain.CodeInvalid, domain.CodeDuplicate, domain.CodeConflict, domain.CodeNotFound, domain.CodeTooLong}

// refusal returns the form state of err, or nil when err is not one the
// form can show (the caller answers it as an error).
func (f formSpec) refusal(r *http.Request, err error) *formState {
	code := domain.ErrorCode(err)
	refused := false
	for _, c := range refusedCodes {
		refused = refused || c == code
	}
	if !refused {
		return nil
	}
	st := errorOf(err)
	state := &formState{Form: f.name, Values: r.PostForm, Status: st.Status, Message: st.Message}
	named, rest := errorField(err)
	if field, ok := f.fields[named]; ok {
		state.Field, state.Message = field, fieldSentence(rest)
	} else if field, ok := f.unnamed[code]; ok && named == "" {
		state.Field = field
	}
	return state
}

// listIndex is the index of a list item in a field path: "[0]".
var listIndex = regexp.MustCompile(`\[\d+\]`)

// fieldPath is a field as domain errors write it at the start of their
// message: a JSON path without spaces ("identifiers[0].value").
var fieldPath = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9_.\[\]]*$`)

// errorField returns the field a domain error is about, without list
// indexes, and its message without the "field: " it starts with; "" and
// the whole message when it names none.
func errorField(err error) (field, message string) {
	message = domain.ErrorMessage(err)
	var e *domain.Error
	named := ""
	if errors.As(err, &e) {
		named = e.Field
	}
	if prefix, rest, ok := strings.Cut(message, ": "); ok && fieldPath.MatchString(prefix) && (named == "" || named == prefix) {
		named, message = prefix, rest
	}
	return listIndex.ReplaceAllString(named, ""), message
}

// fieldSentence writes a message about a field as a sentence that stands
// beside it: "is required" is "This field is required."
func fieldSentence(message string) string {
	for _, verb := range []string{"is ", "must ", "may "} {
		if strings.HasPrefix(message, verb) {
			return "This field " + strings.TrimSuffix(message, ".") + "."
		}
	}
	return domain.Sentence(message)
}

// refused answers a form's error: the page again (render, with the form's
// state), or, for an error the form cannot show, the error itself.
func (f formSpec) refused(r *http.Request, err error, render func(*formState) error) error {
	state := f.refusal(r, err)
	if state == nil {
		return err
	}
	return render(state)
}

// Refused reports whether form is the form that was refused.
func (v view) Refused(form string) bool { return v.Form != nil && v.Form.Form == form }

// Typed is what the user typed into a field of a refused form: "" for
// another form, or on a page shown afresh.
func (v view) Typed(form, field string) string {
	if !v.Refused(form) {
		return ""
	}
	return v.Form.Values.Get(field)
}

// Chosen reports whether a radio button, checkbox or option of value is
// chosen: as the user sent it on a refused form, else byDefault.
func (v view) Chosen(form, field string, value any, byDefault bool) bool {
	if !v.Refused(form) {
		return byDefault
	}
	for _, sent := range v.Form.Values[field] {
		if sent == fmt.Sprint(value) {
			return true
		}
	}
	return false
}

// Problem is why a refused form's field was refused, "" for any other
// field.
func (v view) Problem(form, field string) string {
	if !v.Refused(form) || v.Form.Field != field {
		return ""
	}
	return v.Form.Message
}

// fieldProblem is the reason beside a field, with the id the field's
// aria-describedby names.
type fieldProblem struct{ ID, Message string }

// FieldProblem is Problem with the id of the element that shows it (the
// "problem" template), nil when the field is not at fault.
func (v view) FieldProblem(form, field, id string) *fieldProblem {
	if msg := v.Problem(form, field); msg != "" {
		return &fieldProblem{ID: id, Message: msg}
	}
	return nil
}

// Described writes a field's aria-describedby (its hints, and the reason
// it was refused, whose element has the id errorID) and, when it was
// refused, aria-invalid.
func (v view) Described(form, field, errorID string, hints ...string) template.HTMLAttr {
	ids := hints
	invalid := v.Problem(form, field) != ""
	if invalid {
		ids = append(ids, errorID)
	}
	var attrs []string
	if len(ids) > 0 {
		attrs = append(attrs, `aria-describedby="`+html.EscapeString(strings.Join(ids, " "))+`"`)
	}
	if invalid {
		attrs = append(attrs, `aria-invalid="true"`)
	}
	return template.HTMLAttr(strings.Join(attrs, " "))
}

// FormProblem is why a form was refused when the reason is about no one
// field of it.
func (v view) FormProblem(form string) string {
	if !v.Refused(form) || v.Form.Field != "" {
		return ""
	}
	return v.Form.Message
}
