// Package deploy holds mcpgate's deployment files, not Go code: the
// container images (Dockerfile: the distroless gateway and its runtimes
// variant for npx/uvx stdio servers), a local fleet (compose.yaml with
// nginx.conf and mcpgate.fleet.yaml), the Helm chart (helm/mcpgate, with
// its values schema and helm test) and a Grafana dashboard
// (grafana/mcpgate.json). Its tests render the chart without helm, check
// the essentials of each, and check every dashboard query against the
// metrics the gateway exports.
package deploy
