package admin

import (
	"net/http"
	"strings"
	"sync"
)

// opDoc documents one route in the OpenAPI document.
type opDoc struct {
	summary  string
	body     string // schema name of the request body, "" for none
	response string // schema name of the 2xx body, "" for none
	status   string // 2xx status
	query    []string
}

// docs documents every route, keyed by "METHOD path"; a test checks that
// routes and docs list the same endpoints. Built on first use, as is
// schemas: only GET /openapi.json reads them, and as package data they
// were ~200 KB of heap in every gateway for its whole life.
var docs = sync.OnceValue(func() map[string]opDoc {
	return map[string]opDoc{
		"GET /openapi.json":                     {summary: "This document", response: "", status: "200"},
		"POST /reload":                          {summary: "Read the config file again and apply what changed without dropping sessions (also SIGHUP and reload.watch); 422 with the file's problems by field, and then nothing changed; in a fleet the other replicas reload their own files too", response: "ReloadReport", status: "200"},
		"GET /keys":                             {summary: "List virtual keys (never their secrets)", response: "KeyList", status: "200"},
		"POST /keys":                            {summary: "Create a key; the only answer that shows its secret", body: "KeyAttributes", response: "CreatedKey", status: "201"},
		"GET /keys/{alias}":                     {summary: "One key", response: "Key", status: "200"},
		"PATCH /keys/{alias}":                   {summary: "Change the attributes present in the body; an absent field is left as it is, null clears expires (never expires), allowed_cidrs (any network), tools (every tool), deny_tools, toolsets and access_groups, as [] or {} does for the lists (config keys are read-only)", body: "KeyAttributes", response: "Key", status: "200"},
		"DELETE /keys/{alias}":                  {summary: "Revoke a key; it stops working at once", status: "204"},
		"GET /grants":                           {summary: "What JWT callers may use, by user, team or role: the config file's grants and runtime ones", response: "GrantList", status: "200"},
		"PUT /grants/{kind}/{value}":            {summary: "Create or replace the runtime grant of a user, team or role (kind: user|team|role); applies at once", body: "KeyAttributes", response: "Grant", status: "200"},
		"DELETE /grants/{kind}/{value}":         {summary: "Remove a runtime grant (config-file grants are read-only)", status: "204"},
		"GET /servers":                          {summary: "Upstream servers with their health", response: "ServersReport", status: "200"},
		"POST /servers":                         {summary: "Add (or replace) a runtime sse/http/openapi server: the fields of a config-file server entry plus name, except those naming a file on the gateway's host (tls.ca_file, tls.cert_file, tls.key_file, auth.private_key_file: give tls.ca, tls.cert, tls.key, auth.private_key, the PEM itself)", body: "Server", response: "AddedServer", status: "201"},
		"PATCH /servers/{name}":                 {summary: "Change a runtime server with a JSON merge patch (RFC 7396) of its fields: present members replace the stored ones, null removes one, the rest (credentials included) is kept", body: "ServerPatch", response: "AddedServer", status: "200"},
		"DELETE /servers/{name}":                {summary: "Remove a runtime server (config-file servers are read-only)", status: "204"},
		"GET /servers/{name}/preview":           {summary: "The request the gateway sends to a server, credentials masked", response: "Preview", status: "200"},
		"POST /servers/{name}/test":             {summary: "Reach the server afresh, as mcpgate doctor does: a new session's handshake and tools/list walk (protocol version, server name, tool count, latency), TLS expiry and the auth result, with a verdict; no credential in the answer", response: "ServerCheck", status: "200"},
		"GET /servers/{name}/tools":             {summary: "Every tool the server offers (before its tool policy), whether the policy shows it and under which name, and the policy", response: "ServerTools", status: "200"},
		"PUT /servers/{name}/tools":             {summary: "Replace a runtime server's tool policy (allow, deny, overrides); config-file servers are read-only", body: "ToolPolicy", response: "ServerTools", status: "200"},
		"GET /toolsets":                         {summary: "Toolsets and their tools: the config file's and runtime ones", response: "Toolsets", status: "200"},
		"PUT /toolsets/{name}":                  {summary: "Create or replace a runtime toolset (config-file toolsets are read-only); applies at once", body: "ToolsetBody", response: "Toolset", status: "200"},
		"DELETE /toolsets/{name}":               {summary: "Remove a runtime toolset (config-file toolsets are read-only)", status: "204"},
		"GET /integrity":                        {summary: "Tool integrity: the tool, prompt and resource template definitions awaiting review (changed since approved, or new), each with both definitions, a line diff, the scanner's findings and whether it is held (hidden, its calls refused); ?server= for one server", response: "IntegrityList", status: "200", query: []string{"server"}},
		"POST /integrity/{server}/approve":      {summary: "Approve the server's definitions awaiting review: all, or those named in tools; they are served at once on every replica; 404 names those that await nothing", body: "SettleRequest", response: "SettleResult", status: "200"},
		"POST /integrity/{server}/reject":       {summary: "Reject the server's definitions awaiting review: all, or those named in tools; they stay held while the server offers them (the approved definition, if any, is served again when the server goes back to it)", body: "SettleRequest", response: "SettleResult", status: "200"},
		"GET /tools":                            {summary: "The merged catalog, as the key named by ?key= would see it on ?route=", response: "Tools", status: "200", query: []string{"key", "route"}},
		"POST /tools/call":                      {summary: "Call a tool as the key named in the body (or as the master key), without a session", body: "CallRequest", response: "CallToolResult", status: "200"},
		"GET /explain":                          {summary: "Whether a key may call a tool on a route, and the rule that decided", response: "Explanation", status: "200", query: []string{"key", "user", "team", "role", "route", "tool"}},
		"GET /stats":                            {summary: "Tool calls per server since start (calls, errors, p50 and p99 latency), from the gateway's metrics; what was dropped since start (audit records, records answered before their commit, exporters' records by exporter, log lines); with a shared state backend, its health and the fleet's size as this replica sees them", response: "Stats", status: "200"},
		"GET /sessions":                         {summary: "Live downstream sessions (S13.1); in a fleet every replica's, each naming the replicas holding a copy (incomplete says why some may be missing)", response: "SessionsReport", status: "200"},
		"POST /sessions/terminate":              {summary: "End sessions by id prefix and/or user on every replica; their ids are remembered first (S13.2), and it answers once every replica confirmed ending its copies (unconfirmed: those some replica did not confirm within 2 s); 503 (with what was ended) when the store does not record an end or other replicas' sessions cannot be found", body: "TerminateRequest", response: "TerminateResult", status: "200"},
		"GET /stats/series":                     {summary: "The last hour of tool calls per server in one-minute buckets (calls, errors, p50 and p99 latency), read from the audit store; at most 20,000 calls are read (truncated says when more were made)", response: "StatsSeries", status: "200"},
		"GET /usage/series":                     {summary: "Cost and calls per key, user or team over the last 24h (hourly), 7d (6-hourly) or 30d (daily), from the audit store: the 8 costliest groups and (other)", response: "UsageSeries", status: "200", query: []string{"by", "range"}},
		"GET /usage":                            {summary: "Tool calls and their cost summed per key, user or team over a period", response: "UsageReport", status: "200", query: []string{"by", "since", "until"}},
		"GET /audit":                            {summary: "Recent tool calls, newest first", response: "ToolCallPage", status: "200", query: []string{"key", "user", "team", "server", "tool", "outcome", "since", "limit", "before"}},
		"GET /audit/events":                     {summary: "Recent admin actions, newest first", response: "EventPage", status: "200", query: []string{"actor", "action", "limit", "before"}},
		"PUT /me/credentials/{server}":          {summary: "Store your own credential for a user_api_key server (any key or JWT caller; sealed in the vault)", body: "CredentialRequest", response: "CredentialInfo", status: "200"},
		"GET /me/credentials":                   {summary: "Your own stored credentials: server, updated, last used (never the value)", response: "CredentialList", status: "200"},
		"DELETE /me/credentials/{server}":       {summary: "Remove your own credential for a server", status: "204"},
		"GET /connections":                      {summary: "People's connections (connected accounts and stored credentials): issuer, scopes, expiry, last use, never a secret; ?person= is key:ALIAS or oidc:ISSUER|SUBJECT", response: "ConnectionList", status: "200", query: []string{"server", "person"}},
		"DELETE /connections/{person}":          {summary: "Revoke all of a person's connections; they stop being used at once", response: "RevokedConnections", status: "200"},
		"DELETE /connections/{person}/{server}": {summary: "Revoke a person's connection to a server; it stops being used at once", status: "204"},
		"GET /me/servers":                       {summary: "The servers you may use that need your own account (oauth2_user: connect it at connect_url) or credential (user_api_key: PUT /me/credentials/{server}), and whether you have", response: "MyServers", status: "200"},
		"GET /me/connections":                   {summary: "Your own connections (connected accounts and stored credentials), never a secret", response: "ConnectionList", status: "200"},
		"DELETE /me/connections/{server}":       {summary: "Revoke your own connection to a server (a connected account or a stored credential)", status: "204"},
	}
})

func obj(props map[string]any, required ...string) map[string]any {
	o := map[string]any{"type": "object", "properties": props}
	if len(required) > 0 {
		o["required"] = required
	}
	return o
}

var (
	str     = map[string]any{"type": "string"}
	integer = map[string]any{"type": "integer"}
	boolean = map[string]any{"type": "boolean"}
	strList = map[string]any{"type": "array", "items": str}
	toolMap = map[string]any{"type": "object", "additionalProperties": strList}
	// clearable is a list or map field of a PATCH body that null clears.
	clearable = func(schema map[string]any, desc string) map[string]any {
		out := map[string]any{"description": desc}
		for k, v := range schema {
			out[k] = v
		}
		out["type"] = []string{schema["type"].(string), "null"}
		return out
	}
	ref    = func(name string) map[string]any { return map[string]any{"$ref": "#/components/schemas/" + name} }
	listOf = func(name string) map[string]any { return map[string]any{"type": "array", "items": ref(name)} }
)

var schemas = sync.OnceValue(func() map[string]any {
	return map[string]any{
		"Finding": obj(map[string]any{"rule": str, "severity": map[string]any{"type": "string", "enum": []string{"warn", "quarantine"}}, "path": str, "excerpt": str}, "rule", "severity"),
		"IntegrityChange": obj(map[string]any{"server": str, "kind": map[string]any{"type": "string", "enum": []string{"tool", "prompt", "template"}}, "name": str,
			"status": map[string]any{"type": "string", "enum": []string{"changed", "new"}}, "mode": str, "held": boolean,
			"old": str, "new": str, "diff": map[string]any{"type": "string", "description": "line diff of old and new: '- ' removed, '+ ' added, '  ' kept"},
			"findings": listOf("Finding"), "old_fingerprint": str, "new_fingerprint": str, "seen_at": str, "source": str, "version": str},
			"server", "kind", "name", "status", "held", "new", "diff", "findings"),
		"IntegrityList": obj(map[string]any{"changes": listOf("IntegrityChange")}, "changes"),
		"SettleRequest": obj(map[string]any{"tools": map[string]any{"type": "array", "items": str, "description": "names to settle; absent or empty: all of the server's"}}),
		"SettleResult":  obj(map[string]any{"server": str, "settled": strList}, "server", "settled"),
		"Grant": obj(map[string]any{"kind": map[string]any{"type": "string", "enum": []string{"user", "team", "role"}}, "value": str,
			"source": map[string]any{"type": "string", "enum": []string{"config", "api"}}, "servers": strList, "tools": toolMap, "deny_tools": toolMap,
			"toolsets": strList, "access_groups": strList, "admin": boolean, "rate_limit_rpm": integer}, "kind", "value", "source"),
		"Changes": obj(map[string]any{"added": strList, "removed": strList, "changed": strList}),
		"ReloadReport": obj(map[string]any{
			"changed": boolean, "servers": ref("Changes"), "keys": ref("Changes"),
			"sections":         map[string]any{"type": "array", "items": str, "description": "other top-level sections changed and applied"},
			"restart_required": map[string]any{"type": "array", "items": str, "description": "fields that changed but are read only at start: served as before until a restart"},
			"by":               map[string]any{"type": "string", "description": "who reloaded: an admin caller, SIGHUP, watch, or fleet:<caller>"},
		}, "changed", "servers", "keys", "by"),
		"GrantList": obj(map[string]any{"grants": listOf("Grant")}, "grants"),
		"Error":     obj(map[string]any{"error": str, "details": str, "code": map[string]any{"type": "integer", "description": "the JSON-RPC error code of a failed tool call"}}, "error"),
		"KeyAttributes": obj(map[string]any{
			"alias": str, "user": str, "team": str,
			"servers":        map[string]any{"type": []string{"array", "null"}, "items": str, "description": "absent or null: every server; []: none"},
			"all_servers":    boolean,
			"tools":          clearable(toolMap, "per server, the only tools the key may call; a server not listed allows every tool; null or {} in a PATCH: every tool"),
			"deny_tools":     clearable(toolMap, "per server, tools the key may not call; null or {} in a PATCH: none"),
			"toolsets":       clearable(strList, "null or [] in a PATCH: none"),
			"access_groups":  clearable(strList, "null or [] in a PATCH: none"),
			"allowed_cidrs":  clearable(strList, "addresses or CIDRs the key works from; empty: any; null or [] in a PATCH: any"),
			"rate_limit_rpm": integer,
			"expires": map[string]any{"type": []string{"string", "null"}, "format": "date-time",
				"description": "when the key stops working; absent at creation: never; in a PATCH, absent leaves it, null removes it (never expires)"},
			"budget": obj(map[string]any{"amount": map[string]any{"type": "number", "minimum": 0, "description": "0 removes the budget"},
				"period": map[string]any{"type": "string", "enum": []string{"day", "week", "month"}}}),
			"admin": boolean, "no_mcp": boolean, "disabled": boolean,
		}),
		"CreatedKey": obj(map[string]any{"alias": str, "key": str}, "alias", "key"),
		"Key": obj(map[string]any{
			"alias": str, "key_prefix": str, "user": str, "team": str,
			"servers": map[string]any{"type": []string{"array", "null"}, "items": str},
			"tools":   toolMap, "deny_tools": toolMap, "toolsets": strList, "access_groups": strList, "allowed_cidrs": strList,
			"rate_limit_rpm": integer, "expires": str, "admin": boolean, "no_mcp": boolean, "disabled": boolean,
			"budget": obj(map[string]any{"amount": map[string]any{"type": "number"}, "period": str}),
			"source": map[string]any{"type": "string", "enum": []string{"config", "api"}}, "created_at": str, "updated_at": str, "last_used_at": str,
		}, "alias", "source"),
		"KeyList": obj(map[string]any{"keys": listOf("Key")}, "keys"),
		"ServersReport": obj(map[string]any{"servers": map[string]any{"type": "array", "items": obj(map[string]any{
			"name": str, "transport": str, "target": str, "session_mode": str, "auth": str,
			"state": map[string]any{"type": "string", "enum": []string{"starting", "ready", "degraded", "down"}},
			"since": str, "last_error": str, "sessions": integer,
		})}}, "servers"),
		"Server": obj(map[string]any{"name": str, "transport": map[string]any{"type": "string", "enum": []string{"http", "sse"}}, "url": str,
			"headers": map[string]any{"type": "object", "additionalProperties": str}, "timeout": str, "protocol_version": str,
			"session_mode": str, "auth": map[string]any{"type": "object"}, "tls": map[string]any{"type": "object"}, "tools": map[string]any{"type": "object"}}, "name", "transport", "url"),
		"ServerCheck": obj(map[string]any{"name": str, "transport": str, "verdict": map[string]any{"type": "string", "enum": []string{"ok", "warn", "fail"}},
			"protocol_version": str, "server_info": obj(map[string]any{"name": str, "version": str}), "tools": integer, "latency_ms": integer,
			"tls_not_after": str, "detail": str}, "name", "verdict"),
		"ToolPolicy": obj(map[string]any{"allow": map[string]any{"type": []string{"array", "null"}, "items": str, "description": "absent or null: every tool; []: none"},
			"deny": strList, "overrides": map[string]any{"type": "object", "additionalProperties": obj(map[string]any{"name": str, "description": str})},
			"costs": map[string]any{"type": "object", "additionalProperties": map[string]any{"type": "number"}}, "cost_per_kb": map[string]any{"type": "number"}}),
		"ServerTools": obj(map[string]any{"server": str, "source": map[string]any{"type": "string", "enum": []string{"config", "api"}}, "policy": ref("ToolPolicy"),
			"tools": map[string]any{"type": "array", "items": obj(map[string]any{"name": str, "description": str, "visible": boolean, "display_name": str})}}, "server", "source", "policy", "tools"),
		"ServerPatch": map[string]any{"type": "object", "description": "a JSON merge patch (RFC 7396) of the server's fields (those of Server but name)"},
		"AddedServer": obj(map[string]any{"name": str, "transport": str}),
		"Preview":     obj(map[string]any{"method": str, "url": str, "headers": map[string]any{"type": "object", "additionalProperties": strList}}),
		"Toolsets":    obj(map[string]any{"toolsets": map[string]any{"type": "array", "items": obj(map[string]any{"name": str, "servers": toolMap, "source": str})}}, "toolsets"),
		"Toolset":     obj(map[string]any{"name": str, "servers": toolMap, "source": str}, "name", "servers", "source"),
		"ToolsetBody": obj(map[string]any{"servers": toolMap}, "servers"),
		"Tools": obj(map[string]any{"tools": map[string]any{"type": "array", "items": obj(map[string]any{
			"name": str, "server": str, "upstream_name": str, "description": str, "input_schema": map[string]any{"type": "object"}})}}, "tools"),
		"Explanation": obj(map[string]any{"allowed": boolean, "rule": str, "key": str, "route": str, "server": str, "tool": str,
			"steps": map[string]any{"type": "array", "items": obj(map[string]any{"check": str, "passed": boolean, "rule": str})}}, "allowed", "rule"),
		"SessionInfo": obj(map[string]any{"id_prefix": str, "client_name": str, "client_version": str, "user": str, "key_alias": str,
			"team": str, "client_ip": str, "route": str, "servers": strList, "created": str, "idle_seconds": map[string]any{"type": "number"},
			"in_flight": integer, "upstream_sessions": integer, "replicas": strList}),
		"Stats": obj(map[string]any{"servers": map[string]any{"type": "array", "items": obj(map[string]any{
			"server": str, "calls": integer, "errors": integer, "p50_ms": map[string]any{"type": "number"}, "p99_ms": map[string]any{"type": "number"}})},
			"state": obj(map[string]any{"driver": str, "status": map[string]any{"type": "string", "enum": []string{"ok", "degraded"}}, "since": str, "last_error": str, "replicas": integer}, "driver", "status", "since"),
			"losses": obj(map[string]any{"audit_records": integer, "audit_unconfirmed": integer, "log_lines": integer,
				"export_records": map[string]any{"type": "object", "additionalProperties": integer}}, "audit_records", "audit_unconfirmed", "export_records", "log_lines")}, "servers"),
		"CallRequest":    obj(map[string]any{"name": str, "arguments": map[string]any{"type": "object"}, "key": str, "route": str}, "name"),
		"CallToolResult": obj(map[string]any{"content": map[string]any{"type": "array", "items": map[string]any{"type": "object"}}, "isError": boolean, "structuredContent": map[string]any{"type": "object"}}),
		"Count":          obj(map[string]any{"label": str, "count": integer}),
		"SessionsReport": obj(map[string]any{"instance": str, "total": integer, "by_client": listOf("Count"),
			"by_user": listOf("Count"), "sessions": listOf("SessionInfo"), "replicas": strList, "incomplete": str}, "total", "by_client", "by_user", "sessions"),
		"TerminateRequest": obj(map[string]any{"session_id_prefix": str, "user": str}),
		"TerminateResult":  obj(map[string]any{"terminated": integer, "sessions": listOf("SessionInfo"), "unconfirmed": integer, "error": str, "details": str}, "terminated", "sessions"),
		"ToolCallPage": obj(map[string]any{"next": str, "calls": map[string]any{"type": "array", "items": obj(map[string]any{
			"id": integer, "time": str, "key_alias": str, "user": str, "team": str, "server": str, "tool": str, "outcome": str, "fault": str,
			"duration_ms": integer, "session": str, "request_bytes": integer, "response_bytes": integer, "guardrail": str, "cost": map[string]any{"type": "number"}})}}, "calls"),
		"StatsSeries": obj(map[string]any{"since": str, "until": str, "step_seconds": integer, "truncated": boolean,
			"servers": map[string]any{"type": "array", "items": obj(map[string]any{"server": str, "points": map[string]any{"type": "array", "items": obj(map[string]any{
				"time": str, "calls": integer, "errors": integer, "p50_ms": map[string]any{"type": "number"}, "p99_ms": map[string]any{"type": "number"}})}})}}, "since", "until", "step_seconds", "servers"),
		"UsageSeries": obj(map[string]any{"by": str, "range": str, "step_seconds": integer, "buckets": strList,
			"groups": map[string]any{"type": "array", "items": obj(map[string]any{"group": str, "calls": map[string]any{"type": "array", "items": integer},
				"cost": map[string]any{"type": "array", "items": map[string]any{"type": "number"}}, "total_calls": integer, "total_cost": map[string]any{"type": "number"}})}}, "by", "range", "step_seconds", "buckets", "groups"),
		"UsageReport": obj(map[string]any{"by": str, "since": str, "until": str, "total": map[string]any{"type": "number"},
			"usage": map[string]any{"type": "array", "items": obj(map[string]any{"group": str, "calls": integer, "cost": map[string]any{"type": "number"}}, "group", "calls", "cost")}}, "by", "total", "usage"),
		"CredentialRequest": obj(map[string]any{"value": str}, "value"),
		"CredentialInfo":    obj(map[string]any{"server": str, "updated_at": str, "last_used_at": str}, "server"),
		"CredentialList":    obj(map[string]any{"credentials": listOf("CredentialInfo")}, "credentials"),
		"ConnectionInfo": obj(map[string]any{"person": str, "server": str, "kind": map[string]any{"type": "string", "enum": []string{"oauth", "static"}},
			"issuer": str, "scopes": strList, "expires_at": str, "refreshable": boolean, "updated_at": str, "last_used_at": str}, "person", "server", "kind"),
		"MyServers": obj(map[string]any{"servers": map[string]any{"type": "array", "items": obj(map[string]any{
			"server": str, "auth": map[string]any{"type": "string", "enum": []string{"user_api_key", "oauth2_user"}}, "connected": boolean, "connect_url": str})}}, "servers"),
		"ConnectionList":     obj(map[string]any{"connections": listOf("ConnectionInfo")}, "connections"),
		"RevokedConnections": obj(map[string]any{"person": str, "servers": strList}, "person", "servers"),
		"EventPage": obj(map[string]any{"next": str, "events": map[string]any{"type": "array", "items": obj(map[string]any{
			"time": str, "actor": str, "action": str, "target": str, "detail": map[string]any{}})}}, "events"),
	}
})

// document builds the OpenAPI 3.1 document of the API.
func document() map[string]any {
	paths := map[string]any{}
	for key, d := range docs() {
		method, path, _ := strings.Cut(key, " ")
		op := map[string]any{"summary": d.summary, "operationId": operationID(method, path)}
		var params []any
		for _, seg := range strings.Split(path, "/") {
			if strings.HasPrefix(seg, "{") {
				params = append(params, map[string]any{"name": strings.Trim(seg, "{}"), "in": "path", "required": true, "schema": str})
			}
		}
		for _, q := range d.query {
			params = append(params, map[string]any{"name": q, "in": "query", "schema": str})
		}
		if params != nil {
			op["parameters"] = params
		}
		if d.body != "" {
			op["requestBody"] = map[string]any{"required": true, "content": map[string]any{"application/json": map[string]any{"schema": ref(d.body)}}}
		}
		ok := map[string]any{"description": http.StatusText(atoi(d.status))}
		if d.response != "" {
			ok["content"] = map[string]any{"application/json": map[string]any{"schema": ref(d.response)}}
		}
		if method != http.MethodGet {
			ok["headers"] = map[string]any{HeaderUnconfirmed: map[string]any{
				"description": "In a fleet: how many of the request's changes not every other replica confirmed applying within 2 s (or whose announcement failed). They are made and committed; those replicas apply them once they hear of them or at their next resync, and may serve what they replaced until then. Absent when every replica confirmed. A termination says the same of its sessions in its body (unconfirmed).",
				"schema":      map[string]any{"type": "integer", "minimum": 1}}}
		}
		errResp := func(desc string) map[string]any {
			return map[string]any{"description": desc, "content": map[string]any{"application/json": map[string]any{"schema": ref("Error")}}}
		}
		forbidden := "Not an admin key"
		if selfRoutes[method+" "+Prefix+path] {
			forbidden = "Not a person: the master key and anonymous callers have no entries of their own"
		}
		op["responses"] = map[string]any{d.status: ok, "400": errResp("Invalid input; details name the field"),
			"401": map[string]any{"description": "No valid key"}, "403": errResp(forbidden), "404": errResp("Not found"),
			"503": errResp("The store did not answer: nothing was changed (try again)")}
		p, _ := paths[Prefix+path].(map[string]any)
		if p == nil {
			p = map[string]any{}
			paths[Prefix+path] = p
		}
		p[strings.ToLower(method)] = op
	}
	return map[string]any{
		"openapi": "3.1.0",
		"info": map[string]any{"title": "mcpgate admin API", "version": "1",
			"description": "Administer an mcpgate gateway: keys, servers, toolsets, sessions, catalog, access explanations, audit and people's connections. Authenticate with the master key or an admin key in X-Mcpgate-Api-Key or Authorization: Bearer; the /me endpoints take any person's own key or token."},
		"paths": paths,
		"components": map[string]any{"schemas": schemas(), "securitySchemes": map[string]any{
			"apiKey": map[string]any{"type": "apiKey", "in": "header", "name": "X-Mcpgate-Api-Key"},
			"bearer": map[string]any{"type": "http", "scheme": "bearer"}}},
		"security": []any{map[string]any{"apiKey": []any{}}, map[string]any{"bearer": []any{}}},
	}
}

func operationID(method, path string) string {
	var b strings.Builder
	b.WriteString(strings.ToLower(method))
	for _, seg := range strings.Split(path, "/") {
		seg = strings.Trim(seg, "{}")
		seg = strings.TrimSuffix(seg, ".json")
		if seg == "" {
			continue
		}
		b.WriteString(strings.ToUpper(seg[:1]) + seg[1:])
	}
	return b.String()
}

func atoi(s string) int {
	n := 0
	for _, c := range s {
		n = n*10 + int(c-'0')
	}
	return n
}

func (a *API) openAPI(w http.ResponseWriter, r *http.Request) error {
	writeJSON(w, http.StatusOK, document())
	return nil
}
