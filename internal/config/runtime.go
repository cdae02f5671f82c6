package config

// RuntimeServers is what servers added through the admin API may reach.
// Such a server is a caller's word over the network (an admin key, or a
// replica relaying one), not the operator's file: it is refused
// link-local addresses and the cloud metadata services, where no MCP
// server is and the host's cloud credentials are, unless the operator
// opts in here.
type RuntimeServers struct {
	AllowLinkLocal bool `config:"allow_link_local" doc:"Let runtime servers reach link-local addresses (169.254.0.0/16, fe80::/10) and the cloud metadata services (169.254.169.254, fd00:ec2::254, 100.100.100.200, 168.63.129.16, metadata.google.internal). Default: false: the gateway refuses such a server's requests, judged on the address each name resolves to when it is dialled, so nothing is sent there. Read at start: a change needs a restart."`
}
