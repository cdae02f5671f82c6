// Package deploy holds mcpgate's deployment files, not Go code: the
// container image (Dockerfile), a local fleet (compose.yaml with
// nginx.conf and mcpgate.fleet.yaml) and the Helm chart (helm/mcpgate).
// Its tests render the chart without helm and check the essentials of all
// three.
package deploy
