package metrics

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Config reload outcomes (mcpgate_config_reloads_total{result}).
const (
	ReloadApplied   = "applied"   // something changed and was applied
	ReloadUnchanged = "unchanged" // the file says what is served already
	ReloadInvalid   = "invalid"   // the file was refused; nothing changed
	ReloadFailed    = "failed"    // applying failed (the store, ...)
)

var reloadResults = [...]string{ReloadApplied, ReloadUnchanged, ReloadInvalid, ReloadFailed}

// reloadMetrics count config reloads (SIGHUP, POST /admin/v1/reload, the
// file watcher).
type reloadMetrics struct {
	total       *prometheus.CounterVec // result
	lastSuccess prometheus.Gauge
	restart     prometheus.Gauge
}

func newReloadMetrics(reg *prometheus.Registry) reloadMetrics {
	r := reloadMetrics{
		total: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: Namespace,
			Name:      "config_reloads_total",
			Help:      "Config file reloads, by result: applied, unchanged, invalid (refused, nothing changed) or failed.",
		}, []string{"result"}),
		lastSuccess: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: Namespace,
			Name:      "config_last_reload_success_timestamp_seconds",
			Help:      "When the config file was last loaded successfully (start, or a reload that applied or found nothing to change), in Unix seconds.",
		}),
		restart: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: Namespace,
			Name:      "config_restart_required",
			Help:      "1 while the config file has changes to fields read only at start (see the reload's restart_required), else 0.",
		}),
	}
	for _, res := range reloadResults {
		r.total.WithLabelValues(res)
	}
	reg.MustRegister(r.total, r.lastSuccess, r.restart)
	return r
}

// ConfigLoaded records a successful load of the config file at t: at
// start, or a reload (result ReloadApplied or ReloadUnchanged); pending
// says whether some changed field waits for a restart.
func (m *Metrics) ConfigLoaded(t time.Time, pending bool) {
	if m == nil {
		return
	}
	m.reload.lastSuccess.Set(float64(t.UnixNano()) / 1e9)
	v := 0.0
	if pending {
		v = 1
	}
	m.reload.restart.Set(v)
}

// ConfigReload counts one reload with its result.
func (m *Metrics) ConfigReload(result string) {
	if m == nil {
		return
	}
	m.reload.total.WithLabelValues(result).Inc()
}
