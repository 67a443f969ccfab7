//! The address a request came from, for the limits kept per address and for
//! logs: the peer of the connection, unless the peer is a trusted proxy
//! (`server.trusted_proxies`), in which case the nearest address in
//! `X-Forwarded-For` that is not a trusted proxy. Behind a reverse proxy
//! every client would otherwise share the proxy's address, and one client's
//! failed attempts would lock every other out. A header from any other peer
//! is ignored: a client cannot choose the address it is counted under.

use std::net::{IpAddr, SocketAddr};

use axum::{
    extract::{ConnectInfo, FromRequestParts},
    http::{request::Parts, HeaderMap},
};
use ipnet::IpNet;

use crate::state::AppState;

/// The address a request came from (see the module).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClientIp(pub IpAddr);

/// The client of a request that `peer` sent with `headers`: walking
/// `X-Forwarded-For` from its end (the address the nearest proxy saw) past
/// the trusted proxies. A header that does not read, or that names only
/// trusted proxies, leaves the last trusted address.
pub fn client_ip(peer: IpAddr, headers: &HeaderMap, trusted: &[IpNet]) -> IpAddr {
    let is_trusted = |ip: &IpAddr| trusted.iter().any(|net| net.contains(&canonical(*ip)));
    if !is_trusted(&peer) {
        return peer;
    }
    let mut client = peer;
    // Every X-Forwarded-For line, in order, as one list.
    let hops: Vec<&str> = headers
        .get_all("x-forwarded-for")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(str::trim)
        .collect();
    for hop in hops.iter().rev() {
        let Some(ip) = parse_hop(hop) else {
            return client;
        };
        client = ip;
        if !is_trusted(&ip) {
            return ip;
        }
    }
    client
}

/// One address of `X-Forwarded-For`: an IP, or an IP with a port
/// (`192.0.2.1:4711`, `[2001:db8::1]:4711`).
fn parse_hop(hop: &str) -> Option<IpAddr> {
    hop.parse::<IpAddr>()
        .ok()
        .or_else(|| hop.parse::<SocketAddr>().ok().map(|s| s.ip()))
        .map(canonical)
}

/// An IPv4 address mapped into IPv6 as the IPv4 address it is.
fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 => v4,
    }
}

impl FromRequestParts<AppState> for ClientIp {
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(
        parts: &mut Parts,
        state: &AppState,
    ) -> Result<Self, Self::Rejection> {
        // Served without connection info (an in-process router in a test):
        // nowhere.
        let peer = parts
            .extensions
            .get::<ConnectInfo<SocketAddr>>()
            .map_or(IpAddr::from([0, 0, 0, 0]), |c| c.0.ip());
        Ok(ClientIp(client_ip(
            peer,
            &parts.headers,
            &state.config.server.trusted_proxies,
        )))
    }
}

#[cfg(test)]
mod tests {
    use axum::http::HeaderValue;

    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    fn forwarded(values: &[&str]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for v in values {
            h.append("x-forwarded-for", HeaderValue::from_str(v).unwrap());
        }
        h
    }

    #[test]
    fn a_header_from_a_peer_that_is_not_trusted_is_ignored() {
        let trusted: Vec<IpNet> = vec!["10.0.0.0/8".parse().unwrap()];
        let h = forwarded(&["203.0.113.7"]);
        assert_eq!(
            client_ip(ip("198.51.100.1"), &h, &trusted),
            ip("198.51.100.1")
        );
        assert_eq!(client_ip(ip("10.1.2.3"), &h, &[]), ip("10.1.2.3"));
    }

    #[test]
    fn behind_trusted_proxies_the_nearest_untrusted_address_counts() {
        let trusted: Vec<IpNet> = vec!["10.0.0.0/8".parse().unwrap()];
        // A client that forges a first hop does not choose its address.
        let h = forwarded(&["1.2.3.4, 203.0.113.7", "10.0.0.2"]);
        assert_eq!(client_ip(ip("10.0.0.1"), &h, &trusted), ip("203.0.113.7"));
        // Ports and IPv6, and an IPv4 peer seen as mapped IPv6.
        let h = forwarded(&["[2001:db8::1]:4711"]);
        assert_eq!(
            client_ip(ip("::ffff:10.0.0.1"), &h, &trusted),
            ip("2001:db8::1")
        );
        let h = forwarded(&["203.0.113.9:80"]);
        assert_eq!(client_ip(ip("10.0.0.1"), &h, &trusted), ip("203.0.113.9"));
    }

    #[test]
    fn a_header_that_does_not_read_or_is_missing_leaves_the_proxy() {
        let trusted: Vec<IpNet> = vec!["10.0.0.0/8".parse().unwrap()];
        assert_eq!(
            client_ip(ip("10.0.0.1"), &HeaderMap::new(), &trusted),
            ip("10.0.0.1")
        );
        let h = forwarded(&["203.0.113.7, not-an-address"]);
        assert_eq!(client_ip(ip("10.0.0.1"), &h, &trusted), ip("10.0.0.1"));
        let h = forwarded(&["10.0.0.9"]);
        assert_eq!(client_ip(ip("10.0.0.1"), &h, &trusted), ip("10.0.0.9"));
    }
}
