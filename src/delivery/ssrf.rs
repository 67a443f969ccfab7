//! The private-network guard. Every address a webhook host resolves to is
//! checked when the connection is made, not only when the target is created,
//! so a DNS answer that changes later cannot reach inside.

use std::{
    net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr},
    sync::Arc,
};

use reqwest::dns::{Addrs, Name, Resolve, Resolving};

/// Raised by the resolver; the classifier finds it in the error chain and
/// makes the attempt non-retryable.
#[derive(Debug, thiserror::Error)]
#[error("refused: {host} resolves to the non-public address {addr}")]
pub struct PrivateAddressRefused {
    pub host: String,
    pub addr: IpAddr,
}

/// Loopback, private, link-local (cloud metadata included), shared, unspecified,
/// multicast and reserved addresses.
pub fn is_forbidden(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => is_forbidden_v4(v4),
        IpAddr::V6(v6) => {
            if let Some(v4) = v6.to_ipv4_mapped() {
                return is_forbidden_v4(v4);
            }
            v6.is_loopback()
                || v6.is_unspecified()
                || v6.is_multicast()
                || v6.is_unique_local()
                || v6.is_unicast_link_local()
                // 64:ff9b::/96 NAT64 can reach IPv4 private space.
                || v6.segments()[..6] == [0x64, 0xff9b, 0, 0, 0, 0]
                // 2001:db8::/32 documentation
                || v6.segments()[..2] == [0x2001, 0xdb8]
        }
    }
}

fn is_forbidden_v4(v4: Ipv4Addr) -> bool {
    let [a, b, ..] = v4.octets();
    v4.is_loopback()
        || v4.is_private()
        || v4.is_link_local()
        || v4.is_unspecified()
        || v4.is_broadcast()
        || v4.is_multicast()
        || v4.is_documentation()
        || a == 0
        || (a == 100 && (64..128).contains(&b)) // 100.64.0.0/10 shared address space
        || (a == 192 && b == 0 && v4.octets()[2] == 0) // 192.0.0.0/24 protocol assignments
        || (a == 198 && (b == 18 || b == 19)) // benchmarking
        || a >= 240 // reserved
}

/// Resolves with the system resolver and refuses any answer that holds a
/// forbidden address.
#[derive(Debug, Default, Clone)]
pub struct GuardedResolver;

impl Resolve for GuardedResolver {
    fn resolve(&self, name: Name) -> Resolving {
        Box::pin(async move {
            let host = name.as_str().to_string();
            let addrs: Vec<SocketAddr> =
                tokio::net::lookup_host((host.as_str(), 0)).await?.collect();
            if let Some(bad) = addrs.iter().find(|a| is_forbidden(a.ip())) {
                return Err(Box::new(PrivateAddressRefused {
                    host,
                    addr: bad.ip(),
                }) as _);
            }
            Ok(Box::new(addrs.into_iter()) as Addrs)
        })
    }
}

pub fn resolver() -> Arc<GuardedResolver> {
    Arc::new(GuardedResolver)
}

/// Checks a host at target creation: an IP literal or a name that resolves
/// to a forbidden address is refused. A name that does not resolve now is
/// accepted: the guard runs again at every connection.
pub async fn check_host(host: &url::Host<&str>) -> Result<(), PrivateAddressRefused> {
    let refuse = |addr: IpAddr| PrivateAddressRefused {
        host: host.to_string(),
        addr,
    };
    match host {
        url::Host::Ipv4(v4) if is_forbidden(IpAddr::V4(*v4)) => Err(refuse(IpAddr::V4(*v4))),
        url::Host::Ipv6(v6) if is_forbidden(IpAddr::V6(*v6)) => Err(refuse(IpAddr::V6(*v6))),
        url::Host::Domain(name) => {
            // `localhost.` is the same name, fully qualified.
            let bare = name.strip_suffix('.').unwrap_or(name).to_ascii_lowercase();
            if bare == "localhost" || bare.ends_with(".localhost") {
                return Err(refuse(IpAddr::V6(Ipv6Addr::LOCALHOST)));
            }
            if let Ok(addrs) = tokio::net::lookup_host((*name, 0)).await {
                for a in addrs {
                    if is_forbidden(a.ip()) {
                        return Err(refuse(a.ip()));
                    }
                }
            }
            Ok(())
        }
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn private_and_special_addresses_are_forbidden() {
        for ip in [
            "127.0.0.1",
            "10.1.2.3",
            "172.16.0.1",
            "192.168.1.1",
            "169.254.169.254",
            "100.64.0.1",
            "0.0.0.0",
            "255.255.255.255",
            "::1",
            "::",
            "fc00::1",
            "fd00:ec2::254",
            "fe80::1",
            "::ffff:127.0.0.1",
            "::ffff:10.0.0.1",
        ] {
            assert!(is_forbidden(ip.parse().unwrap()), "{ip}");
        }
    }

    #[test]
    fn public_addresses_are_allowed() {
        for ip in [
            "93.184.216.34",
            "8.8.8.8",
            "2606:4700::1111",
            "172.32.0.1",
            "100.128.0.1",
        ] {
            assert!(!is_forbidden(ip.parse().unwrap()), "{ip}");
        }
    }

    #[tokio::test]
    async fn localhost_and_literals_are_refused_at_creation() {
        assert!(check_host(&url::Host::Domain("localhost")).await.is_err());
        assert!(check_host(&url::Host::Domain("LocalHost.")).await.is_err());
        assert!(check_host(&url::Host::Domain("api.localhost."))
            .await
            .is_err());
        assert!(check_host(&url::Host::Ipv4("10.0.0.1".parse().unwrap()))
            .await
            .is_err());
        assert!(
            check_host(&url::Host::Ipv4("93.184.216.34".parse().unwrap()))
                .await
                .is_ok()
        );
    }

    #[tokio::test]
    async fn the_resolver_refuses_loopback_names() {
        let err = GuardedResolver
            .resolve("localhost".parse().unwrap())
            .await
            .err()
            .unwrap();
        assert!(
            err.downcast_ref::<PrivateAddressRefused>().is_some(),
            "{err}"
        );
    }
}
