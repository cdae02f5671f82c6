package bench_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mcpgate/mcpgate/internal/config"
)

// The templates bench/features.sh runs mcpgate with are valid configs
// once bench/run.sh fills their placeholders, and each turns on the
// feature it is named for: a template that drifted from the config's
// shape would fail the benchmark run only when someone ran it.
func TestFeatureTemplates(t *testing.T) {
	files, err := filepath.Glob("features/*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no templates: %v", err)
	}
	fill := strings.NewReplacer("{tmp}", t.TempDir(), "{upstream}", "http://127.0.0.1:9/mcp",
		"{upstream_base}", "http://127.0.0.1:9", "{port}", "4200", "{otlp}", "http://127.0.0.1:9")
	for _, f := range files {
		name := strings.TrimSuffix(filepath.Base(f), ".yaml")
		t.Run(name, func(t *testing.T) {
			data, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			c, err := config.Parse([]byte(fill.Replace(string(data))), t.TempDir(), nil)
			if err != nil {
				t.Fatal(err)
			}
			if err := c.Validate(); err != nil {
				t.Fatal(err)
			}
			echo := c.Servers["echo"]
			if echo == nil {
				t.Fatal("no server echo: bench/run.sh calls /mcp/echo")
			}
			var on bool
			switch name {
			case "key":
				on = c.Auth != nil && len(c.Auth.Keys) == 1 && c.Auth.Keys[0].Budget == nil && c.Auth.Keys[0].RateLimitRPM == 0
			case "ratelimit":
				on = c.Auth != nil && len(c.Auth.Keys) == 1 && c.Auth.Keys[0].RateLimitRPM > 0
			case "budget":
				on = c.Auth != nil && len(c.Auth.Keys) == 1 && c.Auth.Keys[0].Budget != nil &&
					echo.Tools != nil && echo.Tools.Costs["*"] > 0
			case "guardrails":
				on = echo.Guardrails != nil && len(echo.Guardrails.Pre) > 0 && len(echo.Guardrails.Post) > 0
			case "debug":
				on = c.Telemetry.DebugHeader
			case "noaccesslog":
				on = !c.AccessLog.On()
			case "durable":
				on = c.Audit.Durable != nil && *c.Audit.Durable
			case "percred":
				on = c.Auth != nil && len(c.Auth.Keys) == 1 && echo.Auth != nil && echo.Auth.Type == "user_api_key" && c.Vault != nil
			case "tracing":
				tr := c.Telemetry.Tracing
				on = tr != nil && tr.Endpoint == "http://127.0.0.1:9" && tr.SampleRatio != nil && *tr.SampleRatio == 1
			default:
				t.Fatalf("bench/features/%s.yaml: add what it turns on to this test", name)
			}
			if !on {
				t.Errorf("%s.yaml does not turn on %s", name, name)
			}
		})
	}
}
