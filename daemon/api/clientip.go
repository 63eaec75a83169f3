package api

import (
	"net"
	"net/netip"
	"slices"
	"strings"

	"github.com/gofiber/fiber/v2"
)

// clientIP is the address of the request's client, the one the login
// limits count: the TCP peer, or, when the peer is a trusted proxy
// (Deps.TrustedProxies), the right-most address in X-Forwarded-For that
// is not a trusted proxy. Entries left of it are whatever the client
// claimed, so they are never believed. A request another node forwarded
// comes from the client that node saw.
func (s *Server) clientIP(c *fiber.Ctx) string {
	if f := s.forwarded(c); f.ok {
		return f.client
	}
	return clientAddr(c.Context().RemoteIP(), c.Request().Header.PeekAll(fiber.HeaderXForwardedFor), s.d.TrustedProxies)
}

// clientAddr walks X-Forwarded-For (every header line, every
// comma-separated hop) from the right while the hop is a trusted proxy.
// An entry that is not an address ends the walk at the nearest trusted
// hop: only a trusted proxy could have written it there, and it says
// nothing we can use.
func clientAddr(peer net.IP, forwarded [][]byte, trusted []netip.Prefix) string {
	addr, ok := netip.AddrFromSlice(peer)
	if !ok {
		return peer.String()
	}
	addr = addr.Unmap()
	isTrusted := func(a netip.Addr) bool {
		return slices.ContainsFunc(trusted, func(p netip.Prefix) bool { return p.Contains(a) })
	}
	if !isTrusted(addr) {
		return addr.String()
	}
	for i := len(forwarded) - 1; i >= 0; i-- {
		hops := strings.Split(string(forwarded[i]), ",")
		for j := len(hops) - 1; j >= 0; j-- {
			hop := strings.TrimSpace(hops[j])
			a, err := netip.ParseAddr(hop)
			if err != nil {
				ap, perr := netip.ParseAddrPort(hop) // some proxies add the port
				if perr != nil {
					return addr.String()
				}
				a = ap.Addr()
			}
			a = a.Unmap().WithZone("")
			if !isTrusted(a) {
				return a.String()
			}
			addr = a
		}
	}
	return addr.String()
}
