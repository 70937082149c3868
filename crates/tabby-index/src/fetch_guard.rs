//! What a fetch of a user-given URL may connect to (SSRF protection for the crawler and any
//! future fetch of a URL a user typed).
//!
//! Every host is resolved by us and its addresses are checked against
//! [`tabby_common::net::is_internal_address`] unless `[security] fetch_allowed_hosts` lists
//! the host or a CIDR containing the address. The HTTP client uses the same checked answer to
//! connect (a [`reqwest::dns::Resolve`] that only ever returns allowed addresses), so a name
//! cannot resolve to a public address for the check and to an internal one for the
//! connection (DNS rebinding). IP literals, which reqwest does not resolve, are checked
//! before each request. Proxies are not used: a proxy would connect on our behalf unchecked.

use std::{
    io,
    net::{IpAddr, SocketAddr},
    sync::Arc,
};

use anyhow::bail;
use tabby_common::net::FetchAllowList;
use url::Url;

/// Resolves host names (a stub in tests; the system resolver otherwise).
#[async_trait::async_trait]
pub trait HostResolver: Send + Sync {
    async fn lookup(&self, host: &str) -> io::Result<Vec<IpAddr>>;
}

/// The system's resolver (`getaddrinfo` through tokio).
pub struct SystemResolver;

#[async_trait::async_trait]
impl HostResolver for SystemResolver {
    async fn lookup(&self, host: &str) -> io::Result<Vec<IpAddr>> {
        Ok(tokio::net::lookup_host((host, 0))
            .await?
            .map(|a| a.ip())
            .collect())
    }
}

/// The allow-list and the resolver a guarded fetch uses.
#[derive(Clone)]
pub struct FetchGuard {
    allow: FetchAllowList,
    resolver: Arc<dyn HostResolver>,
}

impl std::fmt::Debug for FetchGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FetchGuard")
            .field("allow", &self.allow)
            .finish()
    }
}

impl Default for FetchGuard {
    /// No allow-list: only public addresses.
    fn default() -> Self {
        Self::new(&[])
    }
}

fn refused(host: &str, ip: IpAddr) -> String {
    format!(
        "{host} resolves to {ip}, an internal address (loopback, private, link-local or \
         metadata); add the host or its network to `[security] fetch_allowed_hosts` in \
         config.toml to fetch it"
    )
}

impl FetchGuard {
    /// `allowed_hosts`: `[security] fetch_allowed_hosts` (host names, IPs, CIDRs).
    pub fn new(allowed_hosts: &[String]) -> Self {
        Self::with_resolver(allowed_hosts, Arc::new(SystemResolver))
    }

    pub fn with_resolver(allowed_hosts: &[String], resolver: Arc<dyn HostResolver>) -> Self {
        Self {
            allow: FetchAllowList::new(allowed_hosts),
            resolver,
        }
    }

    /// The addresses `host` may be reached at (all of its addresses that are allowed), or
    /// why none may.
    async fn allowed_addresses(&self, host: &str) -> anyhow::Result<Vec<IpAddr>> {
        let host = host.trim_start_matches('[').trim_end_matches(']');
        let ips = match host.parse::<IpAddr>() {
            Ok(ip) => vec![ip],
            Err(_) => self
                .resolver
                .lookup(host)
                .await
                .map_err(|e| anyhow::anyhow!("cannot resolve {host}: {e}"))?,
        };
        let allowed: Vec<IpAddr> = ips
            .iter()
            .copied()
            .filter(|ip| self.allow.may_connect(host, *ip))
            .collect();
        match (allowed.is_empty(), ips.first()) {
            (false, _) => Ok(allowed),
            (true, Some(ip)) => bail!(refused(host, *ip)),
            (true, None) => bail!("{host} has no address"),
        }
    }

    /// Whether `url` may be fetched: http(s), and its host allowed. Checked for the start page
    /// and before every redirect hop.
    pub async fn check(&self, url: &Url) -> anyhow::Result<()> {
        if !matches!(url.scheme(), "http" | "https") {
            bail!("only http(s) URLs can be fetched, not {url}");
        }
        let Some(host) = url.host_str() else {
            bail!("{url} has no host");
        };
        self.allowed_addresses(host).await.map(|_| ())
    }

    /// Why `url` is refused because of where it resolves (an internal address not
    /// allow-listed), or `None`: also `None` when it cannot be resolved now (a later fetch
    /// checks again). For refusing a URL when a user enters it.
    pub async fn internal_refusal(&self, url: &str) -> Option<String> {
        let url = Url::parse(url).ok()?;
        let host = url.host_str()?;
        let bare = host.trim_start_matches('[').trim_end_matches(']');
        let ips = match bare.parse::<IpAddr>() {
            Ok(ip) => vec![ip],
            Err(_) => self.resolver.lookup(bare).await.ok()?,
        };
        let first = *ips.first()?;
        let any_allowed = ips.iter().any(|ip| self.allow.may_connect(bare, *ip));
        (!any_allowed).then(|| refused(bare, first))
    }

    /// An HTTP client that connects only to allowed addresses, follows no redirect by itself
    /// and uses no proxy.
    pub fn client(&self, builder: reqwest::ClientBuilder) -> reqwest::Result<reqwest::Client> {
        builder
            .no_proxy()
            .redirect(reqwest::redirect::Policy::none())
            .dns_resolver(Arc::new(self.clone()))
            .build()
    }
}

impl reqwest::dns::Resolve for FetchGuard {
    fn resolve(&self, name: reqwest::dns::Name) -> reqwest::dns::Resolving {
        let guard = self.clone();
        let host = name.as_str().to_string();
        Box::pin(async move {
            let ips = guard.allowed_addresses(&host).await.map_err(
                |e| -> Box<dyn std::error::Error + Send + Sync> {
                    Box::new(io::Error::new(
                        io::ErrorKind::PermissionDenied,
                        format!("{e:#}"),
                    ))
                },
            )?;
            // Port 0 is replaced by the URL's port.
            let addrs: reqwest::dns::Addrs =
                Box::new(ips.into_iter().map(|ip| SocketAddr::new(ip, 0)));
            Ok(addrs)
        })
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;

    struct Stub(HashMap<&'static str, Vec<IpAddr>>);

    #[async_trait::async_trait]
    impl HostResolver for Stub {
        async fn lookup(&self, host: &str) -> io::Result<Vec<IpAddr>> {
            self.0
                .get(host)
                .cloned()
                .ok_or_else(|| io::Error::new(io::ErrorKind::NotFound, "unknown host"))
        }
    }

    fn guard(allowed: &[&str]) -> FetchGuard {
        let ip = |s: &str| s.parse::<IpAddr>().unwrap();
        let stub = Stub(HashMap::from([
            ("docs.example.com", vec![ip("93.184.216.34")]),
            ("metadata.test", vec![ip("169.254.169.254")]),
            ("intranet.test", vec![ip("10.1.2.3")]),
            ("mapped.test", vec![ip("::ffff:127.0.0.1")]),
            ("mixed.test", vec![ip("10.0.0.1"), ip("93.184.216.34")]),
        ]));
        FetchGuard::with_resolver(
            &allowed.iter().map(|s| s.to_string()).collect::<Vec<_>>(),
            Arc::new(stub),
        )
    }

    async fn check(guard: &FetchGuard, url: &str) -> Result<(), String> {
        guard
            .check(&Url::parse(url).unwrap())
            .await
            .map_err(|e| e.to_string())
    }

    #[tokio::test]
    async fn internal_addresses_are_refused_by_name_and_literal() {
        let g = guard(&[]);
        assert_eq!(check(&g, "https://docs.example.com/x").await, Ok(()));
        for url in [
            "http://metadata.test/latest/meta-data/",
            "http://intranet.test/",
            "http://mapped.test/",
            "http://127.0.0.1:8080/",
            "http://169.254.169.254/",
            "http://[::1]/",
            "http://[::ffff:169.254.169.254]/",
            "http://10.0.0.8/",
            "http://100.64.1.1/",
            "http://0.0.0.0/",
        ] {
            let err = check(&g, url).await.unwrap_err();
            assert!(err.contains("fetch_allowed_hosts"), "{url}: {err}");
        }
        assert!(check(&g, "file:///etc/passwd").await.is_err());
        assert!(check(&g, "http://unknown.test/").await.is_err());
    }

    #[tokio::test]
    async fn internal_refusals_name_the_address() {
        let g = guard(&[]);
        let refusal = |u: &'static str| {
            let g = g.clone();
            async move { g.internal_refusal(u).await }
        };
        assert!(
            refusal("http://metadata.test/")
                .await
                .unwrap()
                .contains("169.254.169.254")
        );
        assert!(refusal("http://[::1]:8080/").await.is_some());
        assert_eq!(refusal("https://docs.example.com/").await, None);
        assert_eq!(
            refusal("https://unknown.test/").await,
            None,
            "checked again when fetched"
        );
    }

    #[tokio::test]
    async fn the_allow_list_admits_hosts_and_networks() {
        let g = guard(&["intranet.test", "169.254.0.0/16", "127.0.0.1"]);
        assert_eq!(check(&g, "http://intranet.test/").await, Ok(()));
        assert_eq!(check(&g, "http://metadata.test/").await, Ok(()));
        assert_eq!(check(&g, "http://127.0.0.1:9/").await, Ok(()));
        assert_eq!(check(&g, "http://mapped.test/").await, Ok(()));
        assert!(check(&g, "http://127.0.0.2/").await.is_err());
        assert!(check(&g, "http://10.0.0.8/").await.is_err());
    }

    /// The connection uses only the checked addresses: an internal one among public ones is
    /// dropped, not connected to.
    #[tokio::test]
    async fn connections_are_pinned_to_allowed_addresses() {
        use reqwest::dns::Resolve;
        let g = guard(&[]);
        let addrs: Vec<SocketAddr> = g
            .resolve("mixed.test".parse().unwrap())
            .await
            .unwrap()
            .collect();
        assert_eq!(addrs, ["93.184.216.34:0".parse::<SocketAddr>().unwrap()]);
        let err = match g.resolve("metadata.test".parse().unwrap()).await {
            Ok(_) => panic!("metadata.test resolved"),
            Err(e) => e.to_string(),
        };
        assert!(err.contains("169.254.169.254"), "{err}");
    }
}
