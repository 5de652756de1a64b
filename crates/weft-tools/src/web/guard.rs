//! The SSRF guard for tools that reach URLs the model chose: only `http`/`https`, and only
//! public addresses — names are resolved first, every address checked, and the connection
//! pinned to the checked addresses (the resolver *is* the check); every redirect is checked
//! again. Loopback, private, link-local (cloud metadata included), shared, multicast and
//! reserved ranges are refused unless `allow_private_network`; `allowed_hosts` lists names
//! an operator trusts (an intranet wiki) whatever they resolve to.

use std::collections::HashSet;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use reqwest::dns::{Addrs, Name, Resolve, Resolving};
use reqwest::redirect::Policy;
use reqwest::Url;

/// Most redirects one fetch follows.
pub const MAX_REDIRECTS: usize = 5;

/// What the guard lets through.
#[derive(Debug, Clone, Default)]
pub struct NetPolicy {
    pub allow_private_network: bool,
    /// Host names (lowercase) reachable whatever they resolve to.
    pub allowed_hosts: HashSet<String>,
}

impl NetPolicy {
    fn trusts(&self, host: &str) -> bool {
        self.allow_private_network || self.allowed_hosts.contains(&host.to_ascii_lowercase())
    }

    /// Whether `url` may be requested as far as it can be told without resolving it:
    /// its scheme, and its address when the host is one.
    pub fn check_url(&self, url: &Url) -> Result<(), String> {
        if !matches!(url.scheme(), "http" | "https") {
            return Err(format!(
                "only http and https URLs can be fetched, not {}:",
                url.scheme()
            ));
        }
        let host = url.host_str().ok_or("the URL has no host")?;
        if self.trusts(host) {
            return Ok(());
        }
        let literal = match url.host() {
            Some(url::Host::Ipv4(ip)) => Some(IpAddr::V4(ip)),
            Some(url::Host::Ipv6(ip)) => Some(IpAddr::V6(ip)),
            _ => None,
        };
        match literal {
            Some(ip) if !is_public(ip) => Err(refused(host, ip)),
            _ => Ok(()),
        }
    }

    /// An HTTP client that can only reach what this policy allows: no proxy (a proxy would
    /// resolve names itself), the checking resolver, checked redirects.
    pub fn client(&self, timeout: Duration) -> reqwest::Result<reqwest::Client> {
        let policy = Arc::new(self.clone());
        let for_redirects = policy.clone();
        reqwest::Client::builder()
            .no_proxy()
            .timeout(timeout)
            .connect_timeout(timeout.min(Duration::from_secs(10)))
            .dns_resolver(Arc::new(GuardedResolver { policy }))
            .redirect(Policy::custom(move |attempt| {
                if attempt.previous().len() >= MAX_REDIRECTS {
                    return attempt.error(format!("more than {MAX_REDIRECTS} redirects"));
                }
                match for_redirects.check_url(attempt.url()) {
                    Ok(()) => attempt.follow(),
                    Err(why) => attempt.error(why),
                }
            }))
            .user_agent(concat!("Weft/", env!("CARGO_PKG_VERSION")))
            .build()
    }
}

fn refused(host: &str, ip: IpAddr) -> String {
    format!("refused: {host} is {ip}, a loopback, private or otherwise non-public address")
}

/// Resolves a name and refuses it when any of its addresses is not public, so a name cannot
/// mix a public and a private answer; reqwest then connects to exactly these addresses.
struct GuardedResolver {
    policy: Arc<NetPolicy>,
}

impl Resolve for GuardedResolver {
    fn resolve(&self, name: Name) -> Resolving {
        let policy = self.policy.clone();
        Box::pin(async move {
            let addrs = policy.resolve(name.as_str(), 0).await?;
            Ok(Box::new(addrs.into_iter()) as Addrs)
        })
    }
}

impl NetPolicy {
    /// The addresses of `host` (a name or a literal address) at `port`, all of them
    /// checked: a host with any address that is not public is refused unless trusted. Connect
    /// to exactly these (resolving again could answer differently).
    pub async fn resolve(&self, host: &str, port: u16) -> Result<Vec<SocketAddr>, String> {
        let host = host.trim_start_matches('[').trim_end_matches(']');
        let addrs: Vec<SocketAddr> = tokio::net::lookup_host((host, port))
            .await
            .map_err(|e| format!("{host} does not resolve: {e}"))?
            .collect();
        if addrs.is_empty() {
            return Err(format!("{host} does not resolve"));
        }
        if !self.trusts(host) {
            if let Some(bad) = addrs.iter().find(|a| !is_public(a.ip())) {
                return Err(refused(host, bad.ip()));
            }
        }
        Ok(addrs)
    }
}

/// Whether `ip` is a public unicast address.
pub fn is_public(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => is_public_v4(v4),
        IpAddr::V6(v6) => is_public_v6(v6),
    }
}

fn is_public_v4(ip: Ipv4Addr) -> bool {
    let [a, b, c, _] = ip.octets();
    !(ip.is_unspecified()
        || ip.is_loopback()
        || ip.is_private()
        || ip.is_link_local() // 169.254/16: cloud metadata lives here
        || ip.is_broadcast()
        || ip.is_multicast()
        || ip.is_documentation()
        || a == 0
        || (a == 100 && (64..128).contains(&b)) // shared address space (CGNAT)
        || (a == 192 && b == 0 && c == 0) // IETF protocol assignments
        || (a == 198 && (b == 18 || b == 19)) // benchmarking
        || a >= 240) // reserved
}

fn is_public_v6(ip: Ipv6Addr) -> bool {
    if let Some(v4) = ip.to_ipv4_mapped() {
        return is_public_v4(v4);
    }
    let segments = ip.segments();
    // NAT64 (64:ff9b::/96) carries an IPv4 address in its low bits.
    if segments[..6] == [0x64, 0xff9b, 0, 0, 0, 0] {
        let [.., hi, lo] = segments;
        let v4 = Ipv4Addr::new((hi >> 8) as u8, hi as u8, (lo >> 8) as u8, lo as u8);
        return is_public_v4(v4);
    }
    !(ip.is_unspecified()
        || ip.is_loopback()
        || ip.is_multicast()
        || (segments[0] & 0xfe00) == 0xfc00 // unique local
        || (segments[0] & 0xffc0) == 0xfe80 // link-local
        || (segments[0] & 0xffc0) == 0xfec0 // site-local (deprecated)
        || (segments[0] == 0x2001 && segments[1] == 0xdb8) // documentation
        || segments[..6] == [0, 0, 0, 0, 0, 0]) // IPv4-compatible (deprecated)
}
