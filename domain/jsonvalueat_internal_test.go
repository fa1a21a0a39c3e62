package domain

import "testing"

// TestJSONValueAt: the value a validator path names is found in the raw
// text, through members (escaped keys too) and array items; a path that
// reaches nothing is not found.
func TestJSONValueAt(t *testing.T) {
	data := []byte(`{"resourceType":"DocumentReference","content":[{"attachment":{"data":"a"}},{"attachment":{"title":"t","data":"b c"}}],` +
		`"contained":[{"resourceType":"Binary","d\u0061ta":"x"}],"text":"content[1]"}`)
	for path, want := range map[string]string{
		"DocumentReference.content[1].attachment.data": `"b c"`,
		"DocumentReference.content[0].attachment.data": `"a"`,
		"DocumentReference.contained[0].data":          `"x"`,
		"DocumentReference.text":                       `"content[1]"`,
		"DocumentReference.content[2].attachment.data": "",
		"DocumentReference.content.attachment":         "",
		"DocumentReference.text[0]":                    "",
		"DocumentReference.missing":                    "",
	} {
		start, end, ok := jsonValueAt(data, path)
		got := ""
		if ok {
			got = string(data[start:end])
		}
		if got != want {
			t.Errorf("%s: %q, want %q", path, got, want)
		}
	}
}
