package main

import (
	"strings"
	"testing"
)

// TestToolsIntegrityCommands: tools changes prints the review as a table
// (hostile names escaped), --server filters; approve and reject post to
// the server's endpoint with the named tools (none: all); a missing
// server is a usage error.
func TestToolsIntegrityCommands(t *testing.T) {
	clearAdminEnv(t)
	f := newFakeAdmin(t, func(r adminRequest) (int, string) {
		switch {
		case r.Path == "/admin/v1/integrity":
			return 200, `{"changes":[{"server":"rug","kind":"tool","name":"add\u001b[2J","status":"changed","held":true,
				"diff":"- a\n+ b\n","findings":[{"rule":"foreign_url","severity":"warn","path":"description","excerpt":"https://x.example"}]}]}`
		case strings.HasSuffix(r.Path, "/approve"), strings.HasSuffix(r.Path, "/reject"):
			return 200, `{"server":"rug","settled":["add","export"]}`
		}
		return 404, `{"error":"Not Found"}`
	})
	code, stdout, stderr := cli(t, "tools", "changes", "--url", f.URL, "--server", "rug", "--diff")
	if code != 0 {
		t.Fatalf("changes: exit %d: %s", code, stderr)
	}
	if r := f.last(t); r.Query != "server=rug" {
		t.Errorf("query %q", r.Query)
	}
	for _, want := range []string{"SERVER", "held", "foreign_url(warn)", `add\u001b[2J`, "- a", "+ b", "finding foreign_url (warn) at description"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("changes output lacks %q:\n%s", want, stdout)
		}
	}
	if strings.Contains(stdout, "\x1b") {
		t.Errorf("changes prints a raw escape: %q", stdout)
	}
	code, stdout, stderr = cli(t, "tools", "approve", "rug", "add", "export", "--url", f.URL)
	if code != 0 || !strings.Contains(stdout, "approved 2 definition(s) of rug: add, export") {
		t.Fatalf("approve: exit %d %q %q", code, stdout, stderr)
	}
	r := f.last(t)
	if r.Method != "POST" || r.Path != "/admin/v1/integrity/rug/approve" || strings.Join(toStrings(r.bodyMap(t)["tools"]), ",") != "add,export" {
		t.Errorf("approve sent %s %s %s", r.Method, r.Path, r.Body)
	}
	if code, _, stderr := cli(t, "tools", "reject", "rug", "--url", f.URL); code != 0 {
		t.Fatalf("reject: exit %d %s", code, stderr)
	}
	if r := f.last(t); r.Path != "/admin/v1/integrity/rug/reject" || len(r.bodyMap(t)) != 0 {
		t.Errorf("reject sent %s %s", r.Path, r.Body)
	}
	if code, _, stderr := cli(t, "tools", "approve", "--url", f.URL); code != 2 || !strings.Contains(stderr, "want the server") {
		t.Errorf("approve without a server: exit %d %q", code, stderr)
	}
}

func toStrings(v any) []string {
	var out []string
	for _, x := range v.([]any) {
		out = append(out, x.(string))
	}
	return out
}
