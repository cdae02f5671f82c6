// Package clientconf owns the configuration files of the MCP clients
// people already run (Claude Desktop, Claude Code, Cursor, VS Code,
// Windsurf): reading their server entries, turning them into mcpgate
// servers with every secret moved to a ${VAR} reference, and writing the
// one entry that points such a client at mcpgate instead.
//
// Flow of an import:
//
//	Detect (the file's shape and name) -> Parse (JSON with comments, each
//	client's keys) -> Convert (mcpgate names, transports, client
//	variables translated, secrets replaced by ${MCPGATE_<SERVER>_<NAME>})
//	-> MergeServers (the servers: section added to a YAML document,
//	keeping everything else) -> the caller validates with config.Parse.
//
// It does no I/O beyond what a caller passes in (an env file is read
// through a function the caller supplies), starts nothing, and never puts
// a secret value in an error, a warning or the list of variables.
package clientconf
