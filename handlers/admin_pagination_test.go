package handlers_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"

	"exchange/domain"
)

// TestAdminPagination checks the list conventions shared by every admin
// list, on GET /api/v1/organizations: the envelope, page and pageSize, and
// the next and previous links.
func TestAdminPagination(t *testing.T) {
	w := admNewWorld(t)
	ctx := context.Background()
	var children []int64
	for i := range 5 {
		o, err := w.env.Service.CreateOrganization(ctx, domain.SystemActor(), domain.NewOrganization{Name: fmt.Sprintf("Ward %d", i), Type: "dept", PartOf: w.org.ID})
		if err != nil {
			t.Fatal(err)
		}
		children = append(children, o.ID)
	}
	base := fmt.Sprintf("/api/v1/organizations?partOf=%d", w.org.ID)

	// get sends a GET with proxy headers and decodes the answer.
	get := func(path string, header map[string]string) (*http.Response, map[string]any) {
		t.Helper()
		req, err := http.NewRequest("GET", w.env.URL+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+w.admin)
		for k, v := range header {
			req.Header.Set(k, v)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var out map[string]any
		if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
			t.Fatalf("GET %s: %v", path, err)
		}
		return resp, out
	}

	// The default page holds everything (5 < 20), with the envelope.
	list := w.call(t, "GET", base, w.admin, nil, http.StatusOK)
	if len(list) != 4 || list["count"] != float64(5) || list["next"] != nil || list["previous"] != nil {
		t.Fatalf("envelope: %v", list)
	}
	for _, key := range []string{"next", "previous"} {
		if v, ok := list[key]; !ok || v != nil {
			t.Errorf("%s must be present and null: %v", key, list)
		}
	}
	if got := admIDs(t, list); !slices.Equal(got, children) {
		t.Errorf("results %v, want %v in id order", got, children)
	}

	// Links are absolute, on the origin the client used behind a proxy,
	// and keep the other query parameters.
	proxy := map[string]string{"X-Forwarded-Proto": "https", "X-Forwarded-Host": "exchange.example.org"}
	resp, page1 := get(base+"&pageSize=2", proxy)
	if resp.StatusCode != http.StatusOK || page1["count"] != float64(5) || page1["previous"] != nil || len(admResults(t, page1)) != 2 {
		t.Fatalf("page 1: %d %v", resp.StatusCode, page1)
	}
	checkLink := func(what string, link any, page string) {
		t.Helper()
		s, ok := link.(string)
		if !ok {
			t.Fatalf("%s link %v is not a string", what, link)
		}
		u, err := url.Parse(s)
		if err != nil {
			t.Fatalf("%s link %q: %v", what, s, err)
		}
		q := u.Query()
		if u.Scheme != "https" || u.Host != "exchange.example.org" || u.Path != "/api/v1/organizations" ||
			q.Get("page") != page || q.Get("pageSize") != "2" || q.Get("partOf") != fmt.Sprint(w.org.ID) || len(q) != 3 {
			t.Errorf("%s link %q, want https://exchange.example.org/api/v1/organizations with page=%s, pageSize=2, partOf", what, s, page)
		}
	}
	checkLink("next of page 1", page1["next"], "2")

	// Following the links walks the list.
	follow := func(link any) map[string]any {
		t.Helper()
		u, _ := url.Parse(link.(string))
		resp, out := get(u.RequestURI(), proxy)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("following %v: %d %v", link, resp.StatusCode, out)
		}
		return out
	}
	page2 := follow(page1["next"])
	checkLink("previous of page 2", page2["previous"], "1")
	checkLink("next of page 2", page2["next"], "3")
	page3 := follow(page2["next"])
	checkLink("previous of page 3", page3["previous"], "2")
	if page3["next"] != nil || page3["count"] != float64(5) {
		t.Errorf("last page: %v", page3)
	}
	var walked []int64
	for _, p := range []map[string]any{page1, page2, page3} {
		walked = append(walked, admIDs(t, p)...)
	}
	if !slices.Equal(walked, children) {
		t.Errorf("pages hold %v, want %v", walked, children)
	}

	// Without proxy headers the links are on the server's own origin.
	if out := w.call(t, "GET", base+"&pageSize=2&page=2", w.admin, nil, http.StatusOK); !strings.HasPrefix(fmt.Sprint(out["next"]), w.env.URL+"/api/v1/organizations?") ||
		!strings.HasPrefix(fmt.Sprint(out["previous"]), w.env.URL+"/api/v1/organizations?") {
		t.Errorf("links without a proxy: %v %v", out["next"], out["previous"])
	}

	// A page past the end is 404 with a detail.
	w.call(t, "GET", base+"&pageSize=2&page=4", w.admin, nil, http.StatusNotFound)
	w.call(t, "GET", base+"&page=2", w.admin, nil, http.StatusNotFound)
	// Even so far out that page × pageSize overflows.
	w.call(t, "GET", base+"&pageSize=2&page=4611686018427387905", w.admin, nil, http.StatusNotFound)
	w.call(t, "GET", base+"&pageSize=1000&page=9223372036854775807", w.admin, nil, http.StatusNotFound)

	// Bounds of page and pageSize: 400 naming the parameter.
	for _, tc := range []struct{ query, field string }{
		{"pageSize=0", "pageSize"},
		{"pageSize=1001", "pageSize"},
		{"pageSize=-1", "pageSize"},
		{"pageSize=x", "pageSize"},
		{"page=0", "page"},
		{"page=x", "page"},
		{"page=-2", "page"},
	} {
		w.call(t, "GET", base+"&"+tc.query, w.admin, nil, http.StatusBadRequest, tc.field)
	}
	if out := w.call(t, "GET", base+"&pageSize=1000", w.admin, nil, http.StatusOK); len(admResults(t, out)) != 5 {
		t.Errorf("pageSize=1000: %v", out)
	}
	if out := w.call(t, "GET", base+"&pageSize=1", w.admin, nil, http.StatusOK); len(admResults(t, out)) != 1 || out["next"] == nil {
		t.Errorf("pageSize=1: %v", out)
	}

	// The first page of an empty list exists; the second does not.
	empty := w.call(t, "GET", fmt.Sprintf("/api/v1/organizations?partOf=%d", children[0]), w.admin, nil, http.StatusOK)
	if r, ok := empty["results"].([]any); !ok || len(r) != 0 || empty["count"] != float64(0) || empty["next"] != nil || empty["previous"] != nil {
		t.Errorf("empty list: %v", empty)
	}
	w.call(t, "GET", fmt.Sprintf("/api/v1/organizations?partOf=%d&page=2", children[0]), w.admin, nil, http.StatusNotFound)

	// The default page size is 20.
	for i := 5; i < 21; i++ {
		if _, err := w.env.Service.CreateOrganization(ctx, domain.SystemActor(), domain.NewOrganization{Name: fmt.Sprintf("Ward %d", i), Type: "dept", PartOf: w.org.ID}); err != nil {
			t.Fatal(err)
		}
	}
	full := w.call(t, "GET", base, w.admin, nil, http.StatusOK)
	if len(admResults(t, full)) != 20 || full["count"] != float64(21) || full["next"] == nil {
		t.Fatalf("default page: count %v, %d results, next %v", full["count"], len(admResults(t, full)), full["next"])
	}
	if u, _ := url.Parse(full["next"].(string)); u.Query().Get("page") != "2" {
		t.Errorf("next of the default page: %v", full["next"])
	}
	if last := w.call(t, "GET", base+"&page=2", w.admin, nil, http.StatusOK); len(admResults(t, last)) != 1 || last["next"] != nil {
		t.Errorf("page 2 of 21: %v", last)
	}
}
