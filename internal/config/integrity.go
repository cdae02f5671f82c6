package config

import (
	"fmt"
	"regexp"
)

// Integrity modes and approvals (integrity.mode, integrity.approve);
// internal/integrity says what each does.
const (
	IntegrityPin     = "pin"
	IntegrityWarn    = "warn"
	IntegrityOff     = "off"
	IntegrityAuto    = "auto"
	IntegrityManual  = "manual"
	DefaultIntegrity = IntegrityWarn
)

// Integrity is tool integrity (issue 27): pinning each server's tool,
// prompt and resource template definitions, holding what changed, and
// scanning definitions for instructions aimed at the model. At the top
// level it is every server's default; a server's own block overrides
// mode and approve.
type Integrity struct {
	Mode     string             `config:"mode,enum=pin|warn|off" doc:"pin: a tool, prompt or resource template whose definition changed since it was approved, or that appeared after first sight, is hidden from every list and its calls refused until an administrator approves it (recommended in production). warn (the default): the change is served and reported. off: nothing is pinned or scanned. Every change is an audit event (integrity.*) with the diff, counted in mcpgate_integrity_changes_total and sent to the audit exporters. Absent on a server: the top-level mode."`
	Approve  string             `config:"approve,enum=auto|manual" doc:"auto (the default): the definitions a server offers the first time it is seen are pinned as they are. manual: they are held too, until an administrator approves them (mcpgate tools approve, POST /admin/v1/integrity/{server}/approve). Absent on a server: the top-level setting."`
	Patterns []IntegrityPattern `config:"patterns" doc:"Rules of your own for the definition scanner, checked after the built-in ones (docs/security.md lists those) against every description, title and schema text: a finding with severity quarantine holds the definition until approved (in warn mode too), warn reports it. Top level only."`
}

// IntegrityPattern is one scanner rule of the operator's.
type IntegrityPattern struct {
	Name     string `config:"name,required,trim" doc:"The rule's name, shown in findings."`
	Match    string `config:"match,required" doc:"A regular expression (Go RE2 syntax; (?i) for case-insensitive) found anywhere in a text."`
	Severity string `config:"severity,default=warn,enum=warn|quarantine" doc:"quarantine holds the definition until an administrator approves it; warn reports the finding."`
}

// IntegrityOf is server's effective integrity mode and approval: its
// own block's, else the top level's, else warn and auto.
func (c *Config) IntegrityOf(server string) (mode, approve string) {
	mode, approve = DefaultIntegrity, IntegrityAuto
	if c.Integrity != nil {
		if c.Integrity.Mode != "" {
			mode = c.Integrity.Mode
		}
		if c.Integrity.Approve != "" {
			approve = c.Integrity.Approve
		}
	}
	if s := c.Servers[server]; s != nil && s.Integrity != nil {
		if s.Integrity.Mode != "" {
			mode = s.Integrity.Mode
		}
		if s.Integrity.Approve != "" {
			approve = s.Integrity.Approve
		}
	}
	return mode, approve
}

// IntegrityPatterns are the operator's scanner rules (nil: none).
func (c *Config) IntegrityPatterns() []IntegrityPattern {
	if c.Integrity == nil {
		return nil
	}
	return c.Integrity.Patterns
}

// validate checks an integrity block at p; top: the top-level one (the
// only one with patterns).
func (in *Integrity) validate(errs *errorList, p string, top, strict bool) {
	checkFields(errs, p, in, strict)
	if !top && len(in.Patterns) > 0 {
		errs.add(p+".patterns", 0, "scanner patterns apply to every server: set them in the top-level integrity block")
	}
	names := map[string]bool{}
	for i := range in.Patterns {
		pp := fmt.Sprintf("%s.patterns[%d]", p, i)
		pat := &in.Patterns[i]
		checkFields(errs, pp, pat, strict)
		if pat.Match != "" {
			if _, err := regexp.Compile(pat.Match); err != nil {
				errs.add(pp+".match", 0, "not a regular expression: %v", err)
			}
		}
		if pat.Name != "" && names[pat.Name] {
			errs.add(pp+".name", 0, "pattern %q is named twice", pat.Name)
		}
		names[pat.Name] = true
	}
}
