package deploy_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/google/jsonschema-go/jsonschema"
	"go.yaml.in/yaml/v3"

	"github.com/mcpgate/mcpgate/internal/config"
)

var fleetValues = filepath.Join(chartDir, "values-fleet.yaml")

// TestChartDefault: values.yaml alone, one replica on SQLite.
func TestChartDefault(t *testing.T) {
	r := renderChart(t, "mcpgate")
	if r.fullname != "mcpgate" {
		t.Errorf("fullname for release mcpgate = %q, want mcpgate", r.fullname)
	}
	checkChart(t, r)
	wantKinds(t, r, []string{"ConfigMap", "Deployment", "PersistentVolumeClaim", "Pod", "PodDisruptionBudget", "Service"})
	if got := get(r.one(t, "Deployment"), "spec", "replicas"); got != 1 {
		t.Errorf("Deployment replicas = %v, want 1", got)
	}
	// The SQLite store persists: on the chart's own claim, one pod at a time.
	pvc := r.one(t, "PersistentVolumeClaim")
	if !slices.Equal(listAt(pvc, "spec", "accessModes"), []any{"ReadWriteOnce"}) || str(pvc, "spec", "resources", "requests", "storage") != "1Gi" {
		t.Errorf("PVC spec = %v, want ReadWriteOnce 1Gi", get(pvc, "spec"))
	}
	if _, ok := mapAt(pvc, "spec")["storageClassName"]; ok {
		t.Errorf("PVC names storageClassName %v; want the cluster's default (none named)", get(pvc, "spec", "storageClassName"))
	}
	if v := dataVolume(t, r); str(v, "persistentVolumeClaim", "claimName") != str(pvc, "metadata", "name") {
		t.Errorf("data volume = %v, want the claim %s", v, str(pvc, "metadata", "name"))
	}
	if got := str(r.one(t, "Deployment"), "spec", "strategy", "type"); got != "Recreate" {
		t.Errorf("strategy = %q with a ReadWriteOnce volume, want Recreate", got)
	}
	pdb := r.one(t, "PodDisruptionBudget")
	if got := get(pdb, "spec", "maxUnavailable"); got != 1 {
		t.Errorf("default PDB maxUnavailable = %v, want 1", got)
	}
	checkConfigParses(t, r)
}

// TestChartFleet: values.yaml with values-fleet.yaml, every optional
// template on (HPA, ServiceMonitor, Ingress).
func TestChartFleet(t *testing.T) {
	r := renderChart(t, "prod", fleetValues)
	if r.fullname != "prod-mcpgate" {
		t.Errorf("fullname for release prod = %q, want prod-mcpgate", r.fullname)
	}
	checkChart(t, r)
	wantKinds(t, r, []string{"ConfigMap", "Deployment", "HorizontalPodAutoscaler", "Ingress", "Pod", "PodDisruptionBudget", "Service", "ServiceMonitor"})

	dep := r.one(t, "Deployment")
	if got := get(dep, "spec", "replicas"); got != nil {
		t.Errorf("Deployment replicas = %v with autoscaling on; want none (the HPA owns it)", got)
	}
	// The data is in PostgreSQL: no claim, and pods roll one by one.
	if v := dataVolume(t, r); mapAt(v, "emptyDir") == nil {
		t.Errorf("fleet data volume = %v, want an emptyDir", v)
	}
	if got := str(dep, "spec", "strategy", "type"); got == "Recreate" {
		t.Error("fleet strategy is Recreate: every upgrade would stop all replicas at once")
	}
	hpa := r.one(t, "HorizontalPodAutoscaler")
	if str(hpa, "apiVersion") != "autoscaling/v2" {
		t.Errorf("HPA apiVersion = %q", str(hpa, "apiVersion"))
	}
	ref := mapAt(hpa, "spec", "scaleTargetRef")
	if ref["apiVersion"] != "apps/v1" || ref["kind"] != "Deployment" || ref["name"] != str(dep, "metadata", "name") {
		t.Errorf("HPA scaleTargetRef = %v, want apps/v1 Deployment %s", ref, str(dep, "metadata", "name"))
	}
	minR, _ := get(hpa, "spec", "minReplicas").(int)
	maxR, _ := get(hpa, "spec", "maxReplicas").(int)
	if minR < 2 || maxR < minR {
		t.Errorf("HPA min/max replicas = %d/%d, want 2 <= min <= max", minR, maxR)
	}
	if len(listAt(hpa, "spec", "metrics")) == 0 {
		t.Error("HPA has no metrics")
	}
	pdb := r.one(t, "PodDisruptionBudget")
	minAvail, _ := get(pdb, "spec", "minAvailable").(int)
	if minAvail < 1 || minAvail >= minR {
		t.Errorf("fleet PDB minAvailable = %v, want 1 <= it < HPA minReplicas %d (else no node can drain)", get(pdb, "spec", "minAvailable"), minR)
	}

	sm := r.one(t, "ServiceMonitor")
	if str(sm, "apiVersion") != "monitoring.coreos.com/v1" {
		t.Errorf("ServiceMonitor apiVersion = %q", str(sm, "apiVersion"))
	}
	ep := mapAt(sm, "spec", "endpoints", 0)
	if ep["port"] != "http" || ep["path"] != "/metrics" {
		t.Errorf("ServiceMonitor endpoint = %v, want port http path /metrics", ep)
	}

	ing := r.one(t, "Ingress")
	svcName := str(r.one(t, "Service"), "metadata", "name")
	for _, rule := range listAt(ing, "spec", "rules") {
		for _, p := range listAt(rule, "http", "paths") {
			if str(p, "backend", "service", "name") != svcName || str(p, "backend", "service", "port", "name") != "http" {
				t.Errorf("Ingress backend = %v, want service %s port http", get(p, "backend"), svcName)
			}
		}
	}

	// Every fleet secret comes from a Secret.
	env := containerEnv(t, dep)
	for _, name := range []string{"MCPGATE_MASTER_KEY", "MCPGATE_PG_DSN", "MCPGATE_REDIS_URL", "MCPGATE_SESSION_KEY", "MCPGATE_VAULT_KEY"} {
		if mapAt(env[name], "valueFrom", "secretKeyRef") == nil {
			t.Errorf("env %s is not from a secretKeyRef: %v", name, env[name])
		}
	}
	cfg := renderedConfig(t, r)
	if get(cfg, "store", "driver") != "postgres" || get(cfg, "state", "driver") != "redis" || len(listAt(cfg, "fleet", "session_keys")) == 0 {
		t.Errorf("fleet config lacks store/state/fleet: %v", cfg)
	}
	if str(cfg, "fleet", "advertise") != "${MCPGATE_ADVERTISE}" {
		t.Errorf("fleet.advertise = %q, want ${MCPGATE_ADVERTISE} (the pod's own address)", str(cfg, "fleet", "advertise"))
	}
	if v := str(env["MCPGATE_ADVERTISE"], "value"); !strings.Contains(v, "$(MCPGATE_POD_IP)") {
		t.Errorf("MCPGATE_ADVERTISE = %q, want it built from $(MCPGATE_POD_IP)", v)
	}
	checkConfigParses(t, r)
}

// checkChart asserts what must hold for any values.
func checkChart(t *testing.T, r *rendered) {
	t.Helper()
	selector := map[string]any{
		"app.kubernetes.io/name":     "mcpgate",
		"app.kubernetes.io/instance": r.release,
	}
	for _, d := range r.docs {
		if hook := str(d.obj, "metadata", "annotations", "helm.sh/hook"); hook != "" {
			checkTestHook(t, r, d)
			continue
		}
		if d.name() != r.fullname {
			t.Errorf("%s %s: name %q, want %q", d.source, d.kind(), d.name(), r.fullname)
		}
		labels := mapAt(d.obj, "metadata", "labels")
		for k, v := range selector {
			if labels[k] != v {
				t.Errorf("%s: label %s = %v, want %v", d.source, k, labels[k], v)
			}
		}
		if labels["app.kubernetes.io/managed-by"] != "Helm" || !strings.HasPrefix(str(labels, "helm.sh/chart"), "mcpgate-") {
			t.Errorf("%s: labels %v lack managed-by/chart", d.source, labels)
		}
		if str(d.obj, "apiVersion") == "" {
			t.Errorf("%s: no apiVersion", d.source)
		}
	}

	dep := r.one(t, "Deployment")
	svc := r.one(t, "Service")
	cm := r.one(t, "ConfigMap")
	// One selector everywhere, and the pods carry it.
	sameMap(t, "Deployment selector", mapAt(dep, "spec", "selector", "matchLabels"), selector)
	podLabels := mapAt(dep, "spec", "template", "metadata", "labels")
	for k, v := range selector {
		if podLabels[k] != v {
			t.Errorf("pod label %s = %v, want %v", k, podLabels[k], v)
		}
	}
	sameMap(t, "Service selector", mapAt(svc, "spec", "selector"), selector)
	for _, pdb := range r.byKind("PodDisruptionBudget") {
		sameMap(t, "PDB selector", mapAt(pdb.obj, "spec", "selector", "matchLabels"), selector)
		_, hasMin := mapAt(pdb.obj, "spec")["minAvailable"]
		_, hasMax := mapAt(pdb.obj, "spec")["maxUnavailable"]
		if hasMin == hasMax {
			t.Errorf("PDB spec %v: want exactly one of minAvailable, maxUnavailable", mapAt(pdb.obj, "spec"))
		}
	}
	for _, sm := range r.byKind("ServiceMonitor") {
		sameMap(t, "ServiceMonitor selector", mapAt(sm.obj, "spec", "selector", "matchLabels"), selector)
	}
	anti := mapAt(dep, "spec", "template", "spec", "affinity", "podAntiAffinity", "preferredDuringSchedulingIgnoredDuringExecution", 0, "podAffinityTerm")
	if anti == nil {
		t.Error("no preferred podAntiAffinity")
	} else {
		sameMap(t, "podAntiAffinity selector", mapAt(anti, "labelSelector", "matchLabels"), selector)
		if anti["topologyKey"] != "kubernetes.io/hostname" {
			t.Errorf("podAntiAffinity topologyKey = %v", anti["topologyKey"])
		}
	}

	pod := mapAt(dep, "spec", "template", "spec")
	if get(pod, "securityContext", "runAsNonRoot") != true {
		t.Error("pod securityContext.runAsNonRoot is not true")
	}
	if get(pod, "automountServiceAccountToken") != false {
		t.Error("automountServiceAccountToken is not false")
	}
	containers := listAt(pod, "containers")
	if len(containers) != 1 {
		t.Fatalf("%d containers, want 1", len(containers))
	}
	c := containers[0]
	sc := mapAt(c, "securityContext")
	if sc["runAsNonRoot"] != true || sc["readOnlyRootFilesystem"] != true || sc["allowPrivilegeEscalation"] != false {
		t.Errorf("container securityContext = %v, want runAsNonRoot, readOnlyRootFilesystem, no privilege escalation", sc)
	}
	if uid, ok := sc["runAsUser"].(int); ok && uid == 0 {
		t.Error("container runs as uid 0")
	}
	if !slices.Contains(listAt(sc, "capabilities", "drop"), any("ALL")) {
		t.Errorf("capabilities.drop = %v, want ALL", get(sc, "capabilities", "drop"))
	}
	if str(c, "readinessProbe", "httpGet", "path") != "/readyz" || str(c, "readinessProbe", "httpGet", "port") != "http" {
		t.Errorf("readinessProbe = %v, want GET /readyz on port http", get(c, "readinessProbe"))
	}
	if str(c, "livenessProbe", "httpGet", "path") != "/healthz" || str(c, "livenessProbe", "httpGet", "port") != "http" {
		t.Errorf("livenessProbe = %v, want GET /healthz on port http", get(c, "livenessProbe"))
	}
	if str(c, "ports", 0, "name") != "http" || get(c, "ports", 0, "containerPort") != 4000 {
		t.Errorf("ports = %v, want http 4000", get(c, "ports"))
	}
	if str(svc, "spec", "ports", 0, "targetPort") != "http" {
		t.Errorf("Service targetPort = %v, want http", get(svc, "spec", "ports", 0, "targetPort"))
	}
	if mapAt(c, "resources", "requests") == nil || mapAt(c, "resources", "limits") == nil {
		t.Errorf("resources = %v, want requests and limits", get(c, "resources"))
	}
	args := strings.Join(stringsOf(listAt(c, "args")), " ")
	if !strings.HasPrefix(args, "serve --config /etc/mcpgate/mcpgate.yaml --listen 0.0.0.0:4000") {
		t.Errorf("args = %q", args)
	}
	if !regexp.MustCompile(`^[0-9a-f]{64}$`).MatchString(str(dep, "spec", "template", "metadata", "annotations", "checksum/config")) {
		t.Error("no checksum/config annotation (pods would not roll on a config change)")
	}

	// The config comes from the chart's ConfigMap, mounted read-only.
	var cfgVol map[string]any
	for _, v := range listAt(pod, "volumes") {
		if str(v, "name") == "config" {
			cfgVol = v.(map[string]any)
		}
	}
	if str(cfgVol, "configMap", "name") != str(cm, "metadata", "name") {
		t.Errorf("config volume %v does not name the ConfigMap %s", cfgVol, str(cm, "metadata", "name"))
	}
	mounted := false
	for _, m := range listAt(c, "volumeMounts") {
		if str(m, "name") == "config" && str(m, "mountPath") == "/etc/mcpgate" && get(m, "readOnly") == true {
			mounted = true
		}
	}
	if !mounted {
		t.Errorf("config not mounted read-only at /etc/mcpgate: %v", get(c, "volumeMounts"))
	}
	sameYAML(t, "ConfigMap mcpgate.yaml", renderedConfig(t, r), r.values["config"])

	// Secrets only by reference: every variable the config names is in
	// the env, and every one but the chart's own plain ones is from a
	// Secret.
	env := containerEnv(t, dep)
	plain := mapAt(r.values, "env")
	for name, e := range env {
		ref := mapAt(e, "valueFrom", "secretKeyRef")
		switch {
		case name == "MCPGATE_POD_IP" || name == "MCPGATE_ADVERTISE":
		case plain[name] != nil:
			if secretName.MatchString(name) {
				t.Errorf("env %s looks like a secret but is a plain value (move it to secretEnv)", name)
			}
		case ref == nil || str(ref, "name") == "" || str(ref, "key") == "":
			t.Errorf("env %s is not a secretKeyRef with name and key: %v", name, e)
		}
		if _, ok := e.(map[string]any)["value"]; ok && ref != nil {
			t.Errorf("env %s has both value and valueFrom", name)
		}
	}
	cmText := str(cm, "data", "mcpgate.yaml")
	for _, m := range regexp.MustCompile(`\$\{([A-Za-z_][A-Za-z0-9_]*)\}`).FindAllStringSubmatch(cmText, -1) {
		if env[m[1]] == nil {
			t.Errorf("config references ${%s}, which the Deployment does not set", m[1])
		}
	}
	if !strings.Contains(r.notes, r.fullname) {
		t.Errorf("NOTES.txt does not name the release:\n%s", r.notes)
	}
}

// checkTestHook: the chart's one hook is the helm test pod, which runs the
// chart's own image's `mcpgate health` against the Service, and which the
// Service and the PodDisruptionBudget never select.
func checkTestHook(t *testing.T, r *rendered, d manifest) {
	t.Helper()
	if d.kind() != "Pod" || str(d.obj, "metadata", "annotations", "helm.sh/hook") != "test" {
		t.Errorf("%s: hook %s %q, want the one helm test Pod", d.source, d.kind(), str(d.obj, "metadata", "annotations", "helm.sh/hook"))
		return
	}
	if d.name() != r.fullname+"-test" {
		t.Errorf("test pod name %q, want %s-test", d.name(), r.fullname)
	}
	labels := mapAt(d.obj, "metadata", "labels")
	if labels["app.kubernetes.io/instance"] != r.release || labels["app.kubernetes.io/managed-by"] != "Helm" {
		t.Errorf("test pod labels %v lack the release's", labels)
	}
	if labels["app.kubernetes.io/name"] == "mcpgate" {
		t.Errorf("test pod labels %v match the Service selector: it would receive traffic", labels)
	}
	spec := mapAt(d.obj, "spec")
	if spec["restartPolicy"] != "Never" || spec["automountServiceAccountToken"] != false {
		t.Errorf("test pod restartPolicy %v, automountServiceAccountToken %v; want Never, false", spec["restartPolicy"], spec["automountServiceAccountToken"])
	}
	if get(spec, "securityContext", "runAsNonRoot") != true || get(spec, "containers", 0, "securityContext", "readOnlyRootFilesystem") != true {
		t.Error("test pod is not non-root with a read-only root filesystem")
	}
	dep := r.one(t, "Deployment")
	if img := str(spec, "containers", 0, "image"); img != str(dep, "spec", "template", "spec", "containers", 0, "image") {
		t.Errorf("test pod image %q, want the gateway's own (it has mcpgate health)", img)
	}
	svc := r.one(t, "Service")
	wantURL := fmt.Sprintf("http://%s:%v", str(svc, "metadata", "name"), get(svc, "spec", "ports", 0, "port"))
	args := stringsOf(listAt(spec, "containers", 0, "args"))
	if !slices.Equal(args, []string{"health", "--url", wantURL}) {
		t.Errorf("test pod args %q, want health --url %s", args, wantURL)
	}
}

// dataVolume is the Deployment's data volume (data_dir).
func dataVolume(t *testing.T, r *rendered) map[string]any {
	t.Helper()
	for _, v := range listAt(r.one(t, "Deployment"), "spec", "template", "spec", "volumes") {
		if str(v, "name") == "data" {
			return v.(map[string]any)
		}
	}
	t.Fatal("no data volume")
	return nil
}

// TestChartPersistence: the persistence block's other shapes: a claim of
// the operator's, a storage class (or none, "-"), and no persistence.
func TestChartPersistence(t *testing.T) {
	render := func(p map[string]any) *rendered {
		t.Helper()
		r, err := renderChartSet(t, "mcpgate", map[string]any{"persistence": p})
		if err != nil {
			t.Fatal(err)
		}
		checkChart(t, r)
		return r
	}

	r := render(map[string]any{"existingClaim": "keep-me"})
	if n := len(r.byKind("PersistentVolumeClaim")); n != 0 {
		t.Errorf("existingClaim: the chart creates %d claims, want none", n)
	}
	if v := dataVolume(t, r); str(v, "persistentVolumeClaim", "claimName") != "keep-me" {
		t.Errorf("existingClaim: data volume %v, want claim keep-me", v)
	}
	if got := str(r.one(t, "Deployment"), "spec", "strategy", "type"); got != "Recreate" {
		t.Errorf("existingClaim: strategy %q, want Recreate", got)
	}

	r = render(map[string]any{"storageClass": "fast-ssd", "size": "20Gi", "accessModes": []any{"ReadWriteOncePod"},
		"annotations": map[string]any{"helm.sh/resource-policy": "keep"}})
	pvc := r.one(t, "PersistentVolumeClaim")
	if str(pvc, "spec", "storageClassName") != "fast-ssd" || str(pvc, "spec", "resources", "requests", "storage") != "20Gi" ||
		!slices.Equal(listAt(pvc, "spec", "accessModes"), []any{"ReadWriteOncePod"}) {
		t.Errorf("PVC spec = %v, want fast-ssd 20Gi ReadWriteOncePod", get(pvc, "spec"))
	}
	if str(pvc, "metadata", "annotations", "helm.sh/resource-policy") != "keep" {
		t.Errorf("PVC annotations = %v", get(pvc, "metadata", "annotations"))
	}

	r = render(map[string]any{"size": "512Mi"})
	if got := str(r.one(t, "PersistentVolumeClaim"), "spec", "resources", "requests", "storage"); got != "512Mi" {
		t.Errorf("size 512Mi: storage %q", got)
	}
	if err := valuesSchema(t).Validate(chartValues(t, map[string]any{"persistence": map[string]any{"size": "512Mi"}})); err != nil {
		t.Errorf("size 512Mi refused by the schema: %v", err)
	}

	r = render(map[string]any{"storageClass": "-"})
	sc, ok := mapAt(r.one(t, "PersistentVolumeClaim"), "spec")["storageClassName"]
	if !ok || sc != "" {
		t.Errorf(`storageClass "-": storageClassName = %v (set %v), want "" (no class: a pre-made PV)`, sc, ok)
	}

	r = render(map[string]any{"enabled": false})
	if n := len(r.byKind("PersistentVolumeClaim")); n != 0 {
		t.Errorf("persistence off: %d claims", n)
	}
	if v := dataVolume(t, r); mapAt(v, "emptyDir") == nil {
		t.Errorf("persistence off: data volume %v, want dataVolume's emptyDir", v)
	}
	if s := get(r.one(t, "Deployment"), "spec", "strategy"); s != nil {
		t.Errorf("persistence off: strategy %v, want the default rolling update", s)
	}
}

// TestChartRefusesReplicasOnSQLite: several replicas on the embedded SQLite
// store (each pod its own keys and audit, or two processes on one file)
// do not render; on PostgreSQL they do.
func TestChartRefusesReplicasOnSQLite(t *testing.T) {
	for _, c := range []struct {
		name string
		set  map[string]any
		ok   bool
	}{
		{"two replicas", map[string]any{"replicaCount": 2}, false},
		{"autoscaling", map[string]any{"autoscaling": map[string]any{"enabled": true}}, false},
		{"sqlite named", map[string]any{"replicaCount": 3, "config": map[string]any{"store": map[string]any{"driver": "sqlite"}}}, false},
		{"store without driver", map[string]any{"replicaCount": 2, "config": map[string]any{"store": map[string]any{}}}, false},
		{"one replica", map[string]any{"replicaCount": 1}, true},
		{"postgres", map[string]any{"replicaCount": 3, "persistence": map[string]any{"enabled": false},
			"config":    map[string]any{"store": map[string]any{"driver": "postgres", "dsn": "${MCPGATE_PG_DSN}"}},
			"secretEnv": map[string]any{"MCPGATE_PG_DSN": map[string]any{"key": "pg-dsn"}}}, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			r, err := renderChartSet(t, "mcpgate", c.set)
			if c.ok {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				checkChart(t, r)
				return
			}
			if err == nil {
				t.Fatal("rendered; want a failure naming fleet mode")
			}
			if !strings.Contains(err.Error(), "config.store.driver: postgres") || !strings.Contains(err.Error(), "SQLite") {
				t.Errorf("error %q does not say what to do (config.store.driver: postgres) and why (SQLite)", err)
			}
		})
	}
	// The fleet values raise the replica count on PostgreSQL: they render.
	if _, err := renderChartSet(t, "prod", nil, fleetValues); err != nil {
		t.Errorf("values-fleet.yaml: %v", err)
	}
}

// TestChartTestHook: helm test's pod is there by default, with the service
// port it is given, and gone when tests are off.
func TestChartTestHook(t *testing.T) {
	r, err := renderChartSet(t, "mcpgate", map[string]any{"service": map[string]any{"port": 8080}})
	if err != nil {
		t.Fatal(err)
	}
	checkChart(t, r)
	pod := r.one(t, "Pod")
	if args := stringsOf(listAt(pod, "spec", "containers", 0, "args")); !slices.Contains(args, "http://mcpgate:8080") {
		t.Errorf("test pod args %q, want the Service on port 8080", args)
	}
	r, err = renderChartSet(t, "mcpgate", map[string]any{"tests": map[string]any{"enabled": false}})
	if err != nil {
		t.Fatal(err)
	}
	if n := len(r.byKind("Pod")); n != 0 {
		t.Errorf("tests.enabled false: %d test pods", n)
	}
}

// valuesSchema is the chart's values.schema.json, resolved.
func valuesSchema(t *testing.T) *jsonschema.Resolved {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(chartDir, "values.schema.json"))
	if err != nil {
		t.Fatal(err)
	}
	var s jsonschema.Schema
	if err := json.Unmarshal(b, &s); err != nil {
		t.Fatalf("values.schema.json: %v", err)
	}
	if s.Schema != "http://json-schema.org/draft-07/schema#" {
		t.Errorf("values.schema.json $schema %q, want draft-07 (what every helm 3 validates)", s.Schema)
	}
	rs, err := s.Resolve(nil)
	if err != nil {
		t.Fatalf("values.schema.json: %v", err)
	}
	return rs
}

// chartValues is values.yaml with the overrides merged, in JSON types.
func chartValues(t *testing.T, set map[string]any, overrides ...string) map[string]any {
	t.Helper()
	v := map[string]any{}
	readYAML(t, filepath.Join(chartDir, "values.yaml"), &v)
	for _, f := range overrides {
		var o map[string]any
		readYAML(t, f, &o)
		mergeValues(v, o)
	}
	v = jsonTypes(t, v).(map[string]any)
	if set != nil {
		mergeValues(v, jsonTypes(t, set).(map[string]any))
	}
	return v
}

// TestChartValuesSchema: the chart's own values files pass its schema,
// every key they have is in it, and values helm would otherwise render
// into a broken manifest are refused before rendering.
func TestChartValuesSchema(t *testing.T) {
	rs := valuesSchema(t)
	for _, files := range [][]string{nil, {fleetValues}} {
		if err := rs.Validate(chartValues(t, nil, files...)); err != nil {
			t.Errorf("values.yaml %v: %v", files, err)
		}
	}
	for _, c := range []struct {
		name string
		set  map[string]any
	}{
		{"replicaCount a string", map[string]any{"replicaCount": "two"}},
		{"negative replicas", map[string]any{"replicaCount": -1}},
		{"unknown top-level key", map[string]any{"replicas": 2}},
		{"unknown persistence key", map[string]any{"persistence": map[string]any{"sise": "1Gi"}}},
		{"size not a quantity", map[string]any{"persistence": map[string]any{"size": "lots"}}},
		{"size in bytes' spelling", map[string]any{"persistence": map[string]any{"size": "5GB"}}},
		{"access mode misspelt", map[string]any{"persistence": map[string]any{"accessModes": []any{"RWO"}}}},
		{"pull policy", map[string]any{"image": map[string]any{"pullPolicy": "Sometimes"}}},
		{"empty repository", map[string]any{"image": map[string]any{"repository": ""}}},
		{"service port", map[string]any{"service": map[string]any{"port": 70000}}},
		{"secretEnv without key", map[string]any{"secretEnv": map[string]any{"X": map[string]any{"secretName": "s"}}}},
		{"secretEnv with a value", map[string]any{"secretEnv": map[string]any{"X": map[string]any{"key": "k", "value": "hunter2"}}}},
		{"store driver", map[string]any{"config": map[string]any{"store": map[string]any{"driver": "mysql"}}}},
		{"tests not a bool", map[string]any{"tests": map[string]any{"enabled": "yes"}}},
	} {
		if err := rs.Validate(chartValues(t, c.set)); err == nil {
			t.Errorf("%s: %v accepted", c.name, c.set)
		}
	}

	// Every value the templates read is a key of the schema, so a new
	// value cannot be added without saying what it takes.
	var top struct {
		Properties map[string]json.RawMessage `json:"properties"`
	}
	b, _ := os.ReadFile(filepath.Join(chartDir, "values.schema.json"))
	if err := json.Unmarshal(b, &top); err != nil {
		t.Fatal(err)
	}
	used := map[string]bool{}
	filepath.WalkDir(filepath.Join(chartDir, "templates"), func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		tb, _ := os.ReadFile(path)
		for _, m := range regexp.MustCompile(`\.Values\.([A-Za-z]+)`).FindAllStringSubmatch(string(tb), -1) {
			used[m[1]] = true
		}
		return nil
	})
	if len(used) < 10 {
		t.Fatalf("found only %d values used by the templates", len(used))
	}
	for k := range used {
		if top.Properties[k] == nil {
			t.Errorf("templates read .Values.%s, which values.schema.json does not describe", k)
		}
	}
}

// TestChartImageExplained: values.yaml says which image the chart runs by
// default, that it cannot start npx/uvx stdio servers, and which target
// of the Dockerfile can; the target it names exists.
func TestChartImageExplained(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(chartDir, "values.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	// The comment block right above and inside image:.
	text := string(b)
	i := strings.Index(text, "\nimage:\n")
	j := strings.Index(text, "\nimagePullSecrets:")
	if i < 0 || j < i {
		t.Fatal("no image block in values.yaml")
	}
	block := text[i:j]
	for _, want := range []string{"deploy/Dockerfile", "distroless", "npx", "uvx", "--target runtimes", "repository"} {
		if !strings.Contains(block, want) {
			t.Errorf("values.yaml's image comments do not mention %q", want)
		}
	}
	stages, _ := readDockerfile(t)
	found := false
	for _, s := range stages {
		found = found || s.name == "runtimes"
	}
	if !found {
		t.Error("values.yaml names the Dockerfile target runtimes, which the Dockerfile does not have")
	}
}

// checkConfigParses parses the rendered config as mcpgate would, with
// every variable it references set. The fleet keys (store, state, fleet)
// are being added on other branches; until they are on this one, "unknown
// field" for exactly those keys is logged, not failed.
func checkConfigParses(t *testing.T, r *rendered) {
	t.Helper()
	cm := r.one(t, "ConfigMap")
	parseConfigTolerant(t, []byte(str(cm, "data", "mcpgate.yaml")))
}

var pendingKeys = []string{"store", "state", "fleet"}

func parseConfigTolerant(t *testing.T, data []byte) {
	t.Helper()
	_, err := config.Parse(data, t.TempDir(), func(name string) (string, bool) { return dummyEnv(name), true })
	for _, fe := range config.FieldErrors(err) {
		if slices.Contains(pendingKeys, fe.Path) && strings.HasPrefix(fe.Err.Error(), "unknown field") {
			t.Logf("config key %s is not known to this build yet (issue 14): validate again once it lands", fe.Path)
			continue
		}
		t.Errorf("config does not parse: %v", fe)
	}
}

// dummyEnv gives each variable a value of the shape it will have.
func dummyEnv(name string) string {
	switch {
	case strings.Contains(name, "PG_DSN"):
		return "postgres://mcpgate:pw@postgres:5432/mcpgate?sslmode=disable"
	case strings.Contains(name, "REDIS_URL"):
		return "redis://:pw@redis:6379/0"
	case strings.Contains(name, "ADVERTISE"):
		return "http://10.0.0.5:4000"
	case strings.HasSuffix(name, "_URL"):
		return "http://echo:4200/mcp"
	}
	return "MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY=" // 32 bytes, base64
}

func renderedConfig(t *testing.T, r *rendered) map[string]any {
	t.Helper()
	var cfg map[string]any
	if err := yaml.Unmarshal([]byte(str(r.one(t, "ConfigMap"), "data", "mcpgate.yaml")), &cfg); err != nil {
		t.Fatalf("ConfigMap mcpgate.yaml does not parse: %v", err)
	}
	return cfg
}

func containerEnv(t *testing.T, dep map[string]any) map[string]any {
	t.Helper()
	env := map[string]any{}
	for _, e := range listAt(dep, "spec", "template", "spec", "containers", 0, "env") {
		name := str(e, "name")
		if env[name] != nil {
			t.Errorf("env %s set twice", name)
		}
		env[name] = e
	}
	return env
}

func wantKinds(t *testing.T, r *rendered, want []string) {
	t.Helper()
	var got []string
	for _, d := range r.docs {
		got = append(got, d.kind())
	}
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Errorf("rendered kinds %v, want %v", got, want)
	}
}

func sameMap(t *testing.T, what string, got, want map[string]any) {
	t.Helper()
	if len(got) != len(want) {
		t.Errorf("%s = %v, want %v", what, got, want)
		return
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %v, want %v", what, got, want)
			return
		}
	}
}

// sameYAML compares two values by their YAML form.
func sameYAML(t *testing.T, what string, got, want any) {
	t.Helper()
	g, _ := yaml.Marshal(integral(jsonTypes(t, got)))
	w, _ := yaml.Marshal(integral(jsonTypes(t, want)))
	if string(g) != string(w) {
		t.Errorf("%s:\n%s\nwant\n%s", what, g, w)
	}
}

func stringsOf(l []any) []string {
	var out []string
	for _, v := range l {
		out = append(out, strval(v))
	}
	return out
}

// secretName: variable and value names that hold secrets.
var secretName = regexp.MustCompile(`(?i)(^|_)(key|keys|secret|secrets|password|passwd|dsn|token|credentials?|private_key|master_key|session_keys)$`)

// varRef is a whole-value ${VAR} reference.
var varRef = regexp.MustCompile(`^\$\{[A-Za-z_][A-Za-z0-9_]*\}$`)

// userinfo is a URL with a password in it.
var userinfo = regexp.MustCompile(`://[^/@\s]*:[^/@\s]+@`)

// TestNoPlaintextSecrets: in the chart's values files and the compose
// fleet config, a secret-named value is a ${VAR} reference (or empty),
// and no URL carries a password.
func TestNoPlaintextSecrets(t *testing.T) {
	for _, f := range []string{filepath.Join(chartDir, "values.yaml"), fleetValues, "mcpgate.fleet.yaml"} {
		var v map[string]any
		readYAML(t, f, &v)
		walkSecrets(t, f, "", "", v)
	}
}

func walkSecrets(t *testing.T, file, path, key string, v any) {
	t.Helper()
	switch x := v.(type) {
	case map[string]any:
		for _, k := range sortedKeys(x) {
			if path == "secretEnv" {
				// VAR: {key: <key in the Secret>, secretName: ...}: names only.
				for f := range mapAt(x[k]) {
					if f != "key" && f != "secretName" {
						t.Errorf("%s: secretEnv.%s.%s: only key and secretName are allowed", file, k, f)
					}
				}
				continue
			}
			walkSecrets(t, file, strings.TrimPrefix(path+"."+k, "."), k, x[k])
		}
	case []any:
		for _, e := range x {
			walkSecrets(t, file, path+"[]", key, e)
		}
	case string:
		if userinfo.MatchString(x) {
			t.Errorf("%s: %s holds a URL with a password", file, path)
		}
		if secretName.MatchString(key) && x != "" && !varRef.MatchString(x) {
			t.Errorf("%s: %s looks like a plaintext secret; write ${VAR} and take VAR from a Secret", file, path)
		}
	}
}

// TestHelmCLI runs the real helm when it is installed.
func TestHelmCLI(t *testing.T) {
	helm, err := exec.LookPath("helm")
	if err != nil && os.Getenv("CI") != "" {
		t.Fatalf("helm is required with CI set (bash scripts/install-test-deps.sh builds it into bin/): %v", err)
	}
	if err != nil {
		t.Skip("helm is not installed: the chart is checked by TestChartDefault and TestChartFleet's renderer only")
	}
	for _, args := range [][]string{
		{"lint", chartDir},
		{"lint", chartDir, "-f", fleetValues},
	} {
		if out, err := exec.Command(helm, args...).CombinedOutput(); err != nil {
			t.Errorf("helm %v: %v\n%s", args, err, out)
		}
	}
	for _, c := range []struct {
		release   string
		overrides []string
	}{{"mcpgate", nil}, {"prod", []string{fleetValues}}} {
		args := []string{"template", c.release, chartDir, "--namespace", "mcp"}
		for _, o := range c.overrides {
			args = append(args, "-f", o)
		}
		out, err := exec.Command(helm, args...).Output()
		if err != nil {
			t.Errorf("helm %v: %v", args, err)
			continue
		}
		var helmKinds []string
		dec := yaml.NewDecoder(strings.NewReader(string(out)))
		for {
			var doc map[string]any
			if err := dec.Decode(&doc); errors.Is(err, io.EOF) {
				break
			} else if err != nil {
				t.Fatalf("helm template output does not parse: %v", err)
			}
			if doc != nil {
				helmKinds = append(helmKinds, str(doc, "kind"))
			}
		}
		slices.Sort(helmKinds)
		r := renderChart(t, c.release, c.overrides...)
		wantKinds(t, r, helmKinds)
	}

	// What helm itself refuses: several replicas on SQLite (the chart's
	// fail) and values the schema rejects.
	for _, c := range []struct {
		set  []string
		want string
	}{
		{[]string{"replicaCount=2"}, "config.store.driver: postgres"},
		{[]string{"autoscaling.enabled=true"}, "config.store.driver: postgres"},
		{[]string{"replicaCount=two"}, "replicaCount"},
		{[]string{"persistence.sise=1Gi"}, "sise"},
	} {
		args := []string{"template", "mcpgate", chartDir}
		for _, s := range c.set {
			args = append(args, "--set", s)
		}
		out, err := exec.Command(helm, args...).CombinedOutput()
		if err == nil || !strings.Contains(string(out), c.want) {
			t.Errorf("helm %v: err %v, want a failure naming %q:\n%s", args, err, c.want, out)
		}
	}
	// helm test's pod is part of the release (helm template renders hooks).
	out, err := exec.Command(helm, "template", "mcpgate", chartDir, "--show-only", "templates/tests/test-connection.yaml").Output()
	if err != nil || !strings.Contains(string(out), "helm.sh/hook: test") {
		t.Errorf("helm template --show-only the test pod: %v\n%s", err, out)
	}
}
