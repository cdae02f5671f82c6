// Package docs holds mcpgate's documentation, not Go code: the guides the
// README links to, the generated configuration reference (config.md,
// written by go generate ./internal/config, never by hand) and the design
// notes. Its tests hold the README and the guides to what a reader needs:
// links that resolve inside the repository, a table of contents in every
// guide, no rule codes the text never explains, and the README's commands
// (install, quickstart, test) matching the repository.
package docs
