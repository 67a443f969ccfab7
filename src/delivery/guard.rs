//! The outbound address guard (docs/api.md#private-networks): every address Dispatch connects
//! to on an account's behalf (a webhook `url`, `auth.tokenUrl`, an SQS/SNS
//! `endpointUrl`) must be globally routable unicast. It is checked when a
//! target is created or changed, and again at every connection: the DNS
//! answers themselves are judged, so a name that later resolves inside
//! (DNS rebinding) is refused. Errors name the host the account wrote, never
//! the address it resolved to. Names are looked up through a [`Resolver`]:
//! the system's, or the fixed table a test gives.

use std::{
    net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr},
    sync::Arc,
};

use reqwest::dns::{Addrs, Name, Resolve, Resolving};
use url::{Host, Url};

use super::resolver::Resolver;

/// Raised by the resolver or a literal check; the delivery classifiers find
/// it in the error chain and make the attempt non-retryable.
#[derive(Debug, thiserror::Error)]
#[error("refused: {host} is not a public address")]
pub struct PrivateAddressRefused {
    /// As the account wrote it.
    pub host: String,
}

/// Whether an address may be connected to: only globally routable unicast.
/// An IPv4 address carried in IPv6 is judged as that IPv4 address.
pub fn is_public(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => is_public_v4(v4),
        IpAddr::V6(v6) => match embedded_v4(v6) {
            Some(v4) => is_public_v4(v4),
            None => is_public_v6(v6),
        },
    }
}

pub fn is_forbidden(ip: IpAddr) -> bool {
    !is_public(ip)
}

fn is_public_v4(v4: Ipv4Addr) -> bool {
    let [a, b, c, _] = v4.octets();
    !(a == 0 // "this network"
        || a == 10
        || a == 127
        || (a == 100 && (64..128).contains(&b)) // shared address space (CGN)
        || (a == 169 && b == 254) // link-local, cloud metadata
        || (a == 172 && (16..32).contains(&b))
        || (a == 192 && b == 0 && c == 0) // protocol assignments
        || (a == 192 && b == 0 && c == 2) // documentation
        || (a == 192 && b == 88 && c == 99) // 6to4 relay anycast
        || (a == 192 && b == 168)
        || (a == 198 && (b == 18 || b == 19)) // benchmarking
        || (a == 198 && b == 51 && c == 100) // documentation
        || (a == 203 && b == 0 && c == 113) // documentation
        || a >= 224) // multicast, reserved, broadcast
}

fn is_public_v6(v6: Ipv6Addr) -> bool {
    let s = v6.segments();
    // Global unicast is 2000::/3; everything else (loopback, unspecified,
    // unique local, link-local, multicast, discard, NAT64 local use) is not.
    s[0] & 0xe000 == 0x2000
        && !(s[0] == 0x2001 && s[1] < 0x0200) // 2001::/23 protocol assignments (Teredo, benchmarking, ORCHID)
        && !(s[0] == 0x2001 && s[1] == 0x0db8) // documentation
        && !(s[0] == 0x3fff && s[1] < 0x1000) // documentation (3fff::/20)
}

/// The IPv4 address an IPv6 address carries: mapped (`::ffff:a.b.c.d`),
/// compatible (`::a.b.c.d`, which includes `::` and `::1`), NAT64
/// (`64:ff9b::/96`) and 6to4 (`2002::/16`).
fn embedded_v4(v6: Ipv6Addr) -> Option<Ipv4Addr> {
    let s = v6.segments();
    let low = Ipv4Addr::from((u32::from(s[6]) << 16) | u32::from(s[7]));
    if let Some(v4) = v6.to_ipv4_mapped() {
        Some(v4)
    } else if s[..6] == [0; 6] || s[..6] == [0x64, 0xff9b, 0, 0, 0, 0] {
        Some(low)
    } else if s[0] == 0x2002 {
        Some(Ipv4Addr::from((u32::from(s[1]) << 16) | u32::from(s[2])))
    } else {
        None
    }
}

/// `localhost` and its subdomains are loopback whatever a resolver says
/// (RFC 6761 §6.3); `localhost.` is the same name, fully qualified.
fn is_localhost_name(name: &str) -> bool {
    let bare = name.strip_suffix('.').unwrap_or(name).to_ascii_lowercase();
    bare == "localhost" || bare.ends_with(".localhost")
}

/// Resolves a name and refuses the whole answer when any address in it is
/// not public (a mixed answer would let the connector pick the bad one).
/// A name the operator lets inside (`webhook.allow_private_hosts`) is
/// resolved and not judged.
pub async fn resolve_public(
    names: &Resolver,
    host: &str,
) -> Result<Vec<IpAddr>, Box<dyn std::error::Error + Send + Sync>> {
    if names.allows_private(host) {
        return Ok(names.lookup(host).await?);
    }
    let refuse = || {
        Box::new(PrivateAddressRefused {
            host: host.to_string(),
        })
    };
    if is_localhost_name(host) {
        return Err(refuse());
    }
    let addrs = names.lookup(host).await?;
    if addrs.iter().any(|ip| is_forbidden(*ip)) {
        return Err(refuse());
    }
    Ok(addrs)
}

/// The guard as reqwest's resolver and the AWS SDK's.
#[derive(Debug, Default, Clone)]
pub struct GuardedResolver {
    names: Resolver,
}

impl GuardedResolver {
    pub fn new(names: Resolver) -> Self {
        Self { names }
    }
}

impl Resolve for GuardedResolver {
    fn resolve(&self, name: Name) -> Resolving {
        let names = self.names.clone();
        Box::pin(async move {
            let addrs = resolve_public(&names, name.as_str()).await?;
            Ok(Box::new(addrs.into_iter().map(|ip| SocketAddr::new(ip, 0))) as Addrs)
        })
    }
}

impl aws_smithy_runtime_api::client::dns::ResolveDns for GuardedResolver {
    fn resolve_dns<'a>(
        &'a self,
        name: &'a str,
    ) -> aws_smithy_runtime_api::client::dns::DnsFuture<'a> {
        aws_smithy_runtime_api::client::dns::DnsFuture::new(async move {
            resolve_public(&self.names, name)
                .await
                .map_err(aws_smithy_runtime_api::client::dns::ResolveDnsError::new)
        })
    }
}

pub fn resolver(names: &Resolver) -> Arc<GuardedResolver> {
    Arc::new(GuardedResolver::new(names.clone()))
}

/// IP literals never reach a resolver: the connection-time check for them.
pub fn refuse_literal(url: &Url) -> Result<(), PrivateAddressRefused> {
    let ip: IpAddr = match url.host() {
        Some(Host::Ipv4(v4)) => v4.into(),
        Some(Host::Ipv6(v6)) => v6.into(),
        _ => return Ok(()),
    };
    if is_public(ip) {
        Ok(())
    } else {
        Err(PrivateAddressRefused {
            host: url.host_str().unwrap_or_default().to_string(),
        })
    }
}

/// The check when a target is created or changed: an IP literal or a name
/// that resolves now to a non-public address is refused. A name that does
/// not resolve yet is accepted: the guard runs again at every connection.
pub async fn check_url(names: &Resolver, url: &str) -> Result<(), PrivateAddressRefused> {
    let Ok(url) = Url::parse(url) else {
        // Not a URL: the parser names that.
        return Ok(());
    };
    refuse_literal(&url)?;
    let Some(Host::Domain(name)) = url.host() else {
        return Ok(());
    };
    match resolve_public(names, name).await {
        Err(e) if e.is::<PrivateAddressRefused>() => Err(PrivateAddressRefused {
            host: name.to_string(),
        }),
        _ => Ok(()),
    }
}

/// Finds the guard's refusal in an error chain.
pub fn find_refusal<'a>(
    e: &'a (dyn std::error::Error + 'static),
) -> Option<&'a PrivateAddressRefused> {
    let mut cur = Some(e);
    while let Some(err) = cur {
        if let Some(refused) = err.downcast_ref::<PrivateAddressRefused>() {
            return Some(refused);
        }
        cur = err.source();
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn private_and_special_addresses_are_forbidden() {
        for s in [
            "127.0.0.1",
            "10.1.2.3",
            "172.16.0.1",
            "172.31.255.255",
            "192.168.1.1",
            "169.254.169.254",
            "100.64.0.1",
            "100.127.255.255",
            "0.0.0.0",
            "0.1.2.3",
            "255.255.255.255",
            "224.0.0.1",
            "240.0.0.1",
            "192.0.0.8",
            "192.0.2.1",
            "198.18.0.1",
            "198.51.100.7",
            "203.0.113.9",
            "192.88.99.1",
            "::1",
            "::",
            "fc00::1",
            "fd00:ec2::254",
            "fe80::1",
            "fec0::1",
            "ff02::1",
            "100::1",
            "64:ff9b:1::1",
            "2001::1",
            "2001:2::1",
            "2001:db8::1",
            "3fff::1",
            "5f00::1",
            // IPv4 carried in IPv6 is judged as IPv4.
            "::ffff:127.0.0.1",
            "::ffff:10.0.0.1",
            "::ffff:a9fe:a9fe",
            "::127.0.0.1",
            "::10.0.0.1",
            "64:ff9b::7f00:1",
            "64:ff9b::a9fe:a9fe",
            "2002:7f00:1::1",
            "2002:a00:1::",
            "2002:c0a8:101::1",
        ] {
            assert!(is_forbidden(ip(s)), "{s}");
        }
    }

    #[test]
    fn public_addresses_pass_also_when_carried_in_ipv6() {
        for s in [
            "93.184.216.34",
            "8.8.8.8",
            "1.1.1.1",
            "172.32.0.1",
            "100.128.0.1",
            "192.0.1.1",
            "2606:4700::1111",
            "2a00:1450:4001::1",
            "2001:4860::8888",
            "::ffff:8.8.8.8",
            "::8.8.8.8",
            "64:ff9b::808:808",
            "2002:808:808::1",
        ] {
            assert!(is_public(ip(s)), "{s}");
        }
    }

    /// A table whose answers the tests choose; `localhost` is given a public
    /// answer, which the guard must not believe.
    fn table() -> Resolver {
        Resolver::fixed([
            ("localhost", vec![ip("93.184.216.34")]),
            ("api.localhost", vec![ip("93.184.216.34")]),
            ("inside.test", vec![ip("10.0.0.5")]),
            ("loopback6.test", vec![ip("::1")]),
            ("metadata.test", vec![ip("::ffff:169.254.169.254")]),
            ("mixed.test", vec![ip("93.184.216.34"), ip("192.168.1.1")]),
            (
                "outside.test",
                vec![ip("93.184.216.34"), ip("2606:4700::1111")],
            ),
        ])
    }

    #[tokio::test]
    async fn localhost_names_and_private_literals_are_refused_without_naming_an_address() {
        let names = table();
        for url in [
            "http://localhost/",
            "http://LocalHost./",
            "http://api.localhost./",
        ] {
            let err = check_url(&names, url).await.unwrap_err().to_string();
            assert!(
                !err.contains("127.0.0.1") && !err.contains("::1") && !err.contains("93.184"),
                "{url}: {err}"
            );
        }
        for url in [
            "http://10.0.0.1/",
            "http://[::ffff:7f00:1]/",
            "http://2130706433/",
        ] {
            assert!(check_url(&names, url).await.is_err(), "{url}");
        }
        check_url(&names, "https://93.184.216.34/").await.unwrap();
    }

    #[tokio::test]
    async fn a_name_is_judged_by_every_address_it_resolves_to() {
        let names = table();
        for host in [
            "inside.test",
            "loopback6.test",
            "metadata.test",
            "mixed.test",
        ] {
            let err = resolve_public(&names, host).await.unwrap_err();
            let refused = find_refusal(err.as_ref()).unwrap_or_else(|| panic!("{host}: {err}"));
            assert_eq!(refused.host, host);
            for answer in ["10.0.0.5", "::1", "169.254", "192.168", "93.184"] {
                assert!(!err.to_string().contains(answer), "{host}: {err}");
            }
            let url = format!("https://{host}/hook");
            assert_eq!(check_url(&names, &url).await.unwrap_err().host, host);
        }
        assert_eq!(
            resolve_public(&names, "outside.test").await.unwrap(),
            [ip("93.184.216.34"), ip("2606:4700::1111")]
        );
        check_url(&names, "https://outside.test/hook")
            .await
            .unwrap();
        // A name that does not resolve is no refusal: it is accepted at
        // creation and judged again at every connection.
        let err = resolve_public(&names, "unknown.test").await.unwrap_err();
        assert!(find_refusal(err.as_ref()).is_none(), "{err}");
        check_url(&names, "https://unknown.test/").await.unwrap();
    }

    #[tokio::test]
    async fn both_resolvers_judge_the_answers_of_the_table_they_were_given() {
        use aws_smithy_runtime_api::client::dns::ResolveDns;
        let guarded = GuardedResolver::new(table());
        for host in ["localhost", "inside.test", "mixed.test"] {
            let err = guarded.resolve(host.parse().unwrap()).await.err().unwrap();
            assert!(find_refusal(err.as_ref()).is_some(), "{host}: {err}");
            let err = guarded.resolve_dns(host).await.unwrap_err();
            assert!(find_refusal(&err).is_some(), "{host}: {err}");
        }
        let addrs: Vec<IpAddr> = guarded
            .resolve("outside.test".parse().unwrap())
            .await
            .unwrap()
            .map(|a| a.ip())
            .collect();
        assert_eq!(addrs, [ip("93.184.216.34"), ip("2606:4700::1111")]);
        assert_eq!(
            guarded.resolve_dns("outside.test").await.unwrap(),
            [ip("93.184.216.34"), ip("2606:4700::1111")]
        );
    }

    #[tokio::test]
    async fn only_the_names_the_operator_lets_inside_pass_with_private_answers() {
        use aws_smithy_runtime_api::client::dns::ResolveDns;
        let names = table().allowing_private(&["Inside.Test".to_string(), "localhost".to_string()]);
        assert_eq!(
            resolve_public(&names, "inside.test").await.unwrap(),
            [ip("10.0.0.5")]
        );
        check_url(&names, "http://inside.test:5000/").await.unwrap();
        let guarded = GuardedResolver::new(names.clone());
        assert_eq!(
            guarded.resolve_dns("inside.test").await.unwrap(),
            [ip("10.0.0.5")]
        );
        // Named, localhost is the operator's choice too.
        check_url(&names, "http://localhost/").await.unwrap();
        // Every other name, and every address written as one, is judged.
        for url in [
            "http://mixed.test/",
            "http://metadata.test/",
            "http://10.0.0.5/",
            "http://api.localhost/",
        ] {
            assert!(check_url(&names, url).await.is_err(), "{url}");
        }
        let err = guarded.resolve_dns("loopback6.test").await.unwrap_err();
        assert!(find_refusal(&err).is_some(), "{err}");
    }
}
