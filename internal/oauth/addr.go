package oauth

import (
	"net/netip"

	"github.com/mcpgate/mcpgate/internal/netaddr"
)

// PublicAddr reports whether a is a public unicast address: the one rule
// of every fetch the gateway makes on someone else's behalf (client
// metadata documents, an upstream's OAuth metadata), checked on the
// address actually dialled. It is netaddr.IsPublicIP, kept under this
// name for the package's callers.
func PublicAddr(a netip.Addr) bool { return netaddr.IsPublicIP(a) }
