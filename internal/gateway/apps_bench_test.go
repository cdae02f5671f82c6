package gateway

import "testing"

// What MCP Apps add per listed tool: the visibility read (model-side
// clients) and the view URI rewrite (merged routes), on a tool without
// _meta and on one naming a view; cached: both, as lists get them.
func BenchmarkAppsPerTool(b *testing.B) {
	g := &Gateway{sep: "__"}
	plain := []byte(`{"name":"search_issues","description":"Search issues in a repository by text, label, state and assignee; returns at most 50 per page.","inputSchema":{"type":"object","properties":{"repo":{"type":"string"},"query":{"type":"string"},"state":{"type":"string","enum":["open","closed","all"]},"page":{"type":"integer"}},"required":["repo","query"]},"annotations":{"readOnlyHint":true}}`)
	view := []byte(`{"name":"show","description":"Show the dashboard.","inputSchema":{"type":"object"},"_meta":{"ui":{"resourceUri":"ui://weather/view.html","visibility":["model","app"]},"ui/resourceUri":"ui://weather/view.html"}}`)
	for _, c := range []struct {
		name string
		raw  []byte
	}{{"plain", plain}, {"view", view}} {
		b.Run("visibility/"+c.name, func(b *testing.B) {
			for b.Loop() {
				visibility(c.raw)
			}
		})
		b.Run("rewrite/"+c.name, func(b *testing.B) {
			for b.Loop() {
				g.rewriteToolUI("weather", c.raw)
			}
		})
		b.Run("cached/"+c.name, func(b *testing.B) {
			for b.Loop() {
				g.toolUI("weather", c.raw)
			}
		})
	}
}
