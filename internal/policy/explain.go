package policy

// Explanation is why a caller may or may not use a tool on a route, for
// GET /admin/v1/explain. It may name servers and rules the caller cannot
// see: it is for operators, never for the caller.
type Explanation struct {
	Caller string `json:"caller"`
	Server string `json:"server"`
	Tool   string `json:"tool"`
	// Decision is what View.Tool answers (or, when the route is refused,
	// the refusal's rule).
	Decision Decision `json:"decision"`
	// Denied is set when the route itself is refused.
	Denied *Denied `json:"denied,omitempty"`
	// Servers are the servers the caller may use on the route.
	Servers []string `json:"servers"`
	// Steps are the checks consulted, in order. The first failed one is
	// the deciding rule; later ones are still listed (unless the route was
	// refused) so an operator sees every rule that would refuse the tool.
	Steps []Step `json:"steps"`
}

// Step is one check. Rule is the rule it stands for: on a failure the
// refusal, on a passed grant check the grant.
type Step struct {
	Check  string `json:"check"`
	Passed bool   `json:"passed"`
	Rule   string `json:"rule"`
}

// Explain evaluates tool of server for c on rt like View and View.Tool do,
// recording every check. Its Decision always equals View.Tool's (tests
// hold it to that); it is slower and meant for the admin API.
func (p *Policy) Explain(c *Caller, rt Route, server, tool string) Explanation {
	e := Explanation{Server: server, Tool: tool}
	if c != nil {
		e.Caller = c.Alias
	} else {
		c = &noGrants
	}
	t := &trace{}
	v, denied := p.view(c, &rt, t)
	if denied != nil {
		e.Denied, e.Steps = denied, t.steps
		e.Decision = Decision{Rule: denied.Rule}
		return e
	}
	e.Servers = v.Servers()
	i, known := p.index[server]
	if t.fail("server configured", known, ruleUnknownServer); !known {
		e.Steps, e.Decision = t.steps, Decision{Rule: ruleUnknownServer}
		return e
	}
	sv := &v.servers[i] // v is private to this call: safe to complete
	if !sv.ok && isKey(c) {
		sv.keyLists(c, server)
	}
	serverState(&rt, sv, t)
	e.Decision = v.tool(i, tool, t)
	e.Steps = t.steps
	return e
}

func isKey(c *Caller) bool { return !c.NoMCP && !c.Master && !c.Anonymous }

// trace records checks for Explain. A nil *trace records nothing, which is
// the fast path of View and View.Tool.
type trace struct {
	steps []Step
	first string // rule of the first failed check
	bad   bool
}

// fail records a check and reports whether evaluation stops here: on a
// failure without a trace. With a trace it never stops, so every check is
// listed, and the first failure is kept as the decision.
func (t *trace) fail(check string, passed bool, rule string) bool {
	if t == nil {
		return !passed
	}
	t.steps = append(t.steps, Step{Check: check, Passed: passed, Rule: rule})
	if !passed && !t.bad {
		t.bad, t.first = true, rule
	}
	return false
}

func (t *trace) failed() bool { return t != nil && t.bad }
