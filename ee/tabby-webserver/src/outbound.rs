//! HTTP requests this server makes to other servers on an admin's behalf (OAuth providers,
//! GitHub/GitLab APIs): one client setup — timeouts, no redirects followed, our user agent —
//! and bodies read only up to a bound.

use std::time::Duration;

use anyhow::{Context as _, bail};

const USER_AGENT: &str = concat!("tabby-rs/", env!("CARGO_PKG_VERSION"));

/// A client whose requests end after `timeout` and never follow a redirect (an answer that
/// moves elsewhere is an error, not a request to wherever it points).
pub fn client(timeout: Duration) -> reqwest::Client {
    reqwest::Client::builder()
        .timeout(timeout)
        .connect_timeout(Duration::from_secs(5))
        .redirect(reqwest::redirect::Policy::none())
        .user_agent(USER_AGENT)
        .build()
        .expect("the HTTP client builds")
}

/// The body of `response`, refused once it exceeds `max` bytes (announced or read).
pub async fn read_bounded(
    response: reqwest::Response,
    max: usize,
    what: &str,
) -> anyhow::Result<Vec<u8>> {
    if response.content_length().is_some_and(|n| n > max as u64) {
        bail!("{what}: the answer is larger than {} KiB", max >> 10);
    }
    let bytes = response
        .bytes()
        .await
        .with_context(|| format!("{what}: cannot read the answer"))?;
    if bytes.len() > max {
        bail!("{what}: the answer is larger than {} KiB", max >> 10);
    }
    Ok(bytes.to_vec())
}
