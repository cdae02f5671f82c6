package store

import (
	"os"
	"slices"
	"strings"
	"testing"
)

// The fault classes are defined once, here; docs/failures.md shows
// operators the same list in the same order, and the outcomes beside it.
func TestFaultClassesDocumented(t *testing.T) {
	doc, err := os.ReadFile("../../docs/failures.md")
	if err != nil {
		t.Fatal(err)
	}
	var outcomes, classes []string
	in := false
	for line := range strings.Lines(string(doc)) {
		line = strings.TrimSpace(line)
		switch {
		case strings.HasPrefix(line, "| Outcome | Fault class |"):
			in = true
			continue
		case !in || strings.HasPrefix(line, "|---"):
			continue
		case !strings.HasPrefix(line, "|"):
			in = false
			continue
		}
		cells := strings.Split(line, "|")
		outcome, class := strings.Trim(strings.TrimSpace(cells[1]), "`"), strings.Trim(strings.TrimSpace(cells[2]), "`")
		outcomes = append(outcomes, outcome)
		if class != "—" {
			classes = append(classes, class)
			if outcome != class {
				t.Errorf("docs: outcome %q beside class %q: a failed call's outcome is its class", outcome, class)
			}
		}
	}
	if !slices.Equal(classes, FaultClasses) {
		t.Errorf("docs/failures.md lists the fault classes %v, store.FaultClasses is %v", classes, FaultClasses)
	}
	if want := append([]string{OutcomeOK, OutcomeToolError}, FaultClasses...); !slices.Equal(outcomes, want) {
		t.Errorf("docs/failures.md lists the outcomes %v, want %v", outcomes, want)
	}
}
