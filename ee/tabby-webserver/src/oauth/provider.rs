//! The providers' side of the authorization-code flow: where to send the browser, how to
//! redeem the code (with the PKCE verifier), and who the user is — from a verified OpenID
//! Connect ID token (Google, GitLab, generic OIDC) or from GitHub's API (GitHub is OAuth 2.0
//! only). Only e-mail addresses the provider says are verified are returned.

use std::time::Duration;

use anyhow::{Context as _, bail};
use jsonwebtoken::{Algorithm, DecodingKey, Validation, jwk::JwkSet};
use serde::Deserialize;
use serde_json::Value;
use tabby_schema::oauth::OAuthProvider;

/// A provider's answers are small; a larger one is refused before it is parsed.
const MAX_RESPONSE_BYTES: usize = 1 << 20;
/// Clock skew allowed on `exp`/`iat`/`nbf`.
const LEEWAY_SECS: u64 = 60;

/// What a flow needs from a provider's configuration.
#[derive(Clone, Debug)]
pub enum Endpoints {
    Oidc {
        issuer: String,
        authorization_endpoint: String,
        token_endpoint: String,
        jwks_uri: String,
        userinfo_endpoint: Option<String>,
    },
    Github {
        authorize: String,
        token: String,
        api: String,
    },
}

/// The user as the provider vouches for them.
#[derive(Clone, Debug)]
pub struct Identity {
    pub email: String,
    pub name: Option<String>,
}

pub fn http_client() -> reqwest::Client {
    crate::outbound::client(Duration::from_secs(10))
}

async fn json(response: reqwest::Response, what: &str) -> anyhow::Result<Value> {
    let status = response.status();
    let bytes = crate::outbound::read_bounded(response, MAX_RESPONSE_BYTES, what).await?;
    let value: Value = serde_json::from_slice(&bytes)
        .with_context(|| format!("{what}: the answer ({status}) is not JSON"))?;
    if !status.is_success() {
        let error = value["error_description"]
            .as_str()
            .or(value["error"].as_str())
            .or(value["message"].as_str())
            .unwrap_or("no reason given");
        bail!("{what}: {status}: {error}");
    }
    Ok(value)
}

/// The issuer a provider's ID tokens come from.
fn issuer(provider: OAuthProvider, config_url: Option<&str>) -> anyhow::Result<String> {
    Ok(match provider {
        OAuthProvider::Google => "https://accounts.google.com".to_owned(),
        OAuthProvider::Gitlab => config_url.unwrap_or("https://gitlab.com").to_owned(),
        OAuthProvider::Oidc => config_url
            .context("the OIDC provider has no issuer URL")?
            .to_owned(),
        OAuthProvider::Github => bail!("GitHub is not an OpenID Connect provider"),
    })
}

/// The endpoints of `provider`: GitHub's fixed paths, or an OIDC discovery document whose
/// `issuer` must be exactly the configured one.
pub async fn endpoints(
    http: &reqwest::Client,
    provider: OAuthProvider,
    config_url: Option<&str>,
) -> anyhow::Result<Endpoints> {
    if provider == OAuthProvider::Github {
        return Ok(match config_url {
            None => Endpoints::Github {
                authorize: "https://github.com/login/oauth/authorize".into(),
                token: "https://github.com/login/oauth/access_token".into(),
                api: "https://api.github.com".into(),
            },
            // GitHub Enterprise Server.
            Some(base) => Endpoints::Github {
                authorize: format!("{base}/login/oauth/authorize"),
                token: format!("{base}/login/oauth/access_token"),
                api: format!("{base}/api/v3"),
            },
        });
    }
    let issuer = issuer(provider, config_url)?;
    let url = format!(
        "{}/.well-known/openid-configuration",
        issuer.trim_end_matches('/')
    );
    let doc = json(
        http.get(&url)
            .send()
            .await
            .with_context(|| format!("cannot fetch {url}"))?,
        "the discovery document",
    )
    .await?;
    let field = |name: &str| -> anyhow::Result<String> {
        doc[name]
            .as_str()
            .map(str::to_owned)
            .with_context(|| format!("the discovery document has no {name}"))
    };
    let found = field("issuer")?;
    if found.trim_end_matches('/') != issuer.trim_end_matches('/') {
        bail!("the discovery document is for issuer {found}, not {issuer}");
    }
    Ok(Endpoints::Oidc {
        issuer: found,
        authorization_endpoint: field("authorization_endpoint")?,
        token_endpoint: field("token_endpoint")?,
        jwks_uri: field("jwks_uri")?,
        userinfo_endpoint: doc["userinfo_endpoint"].as_str().map(str::to_owned),
    })
}

/// Where the browser goes to sign in.
pub fn authorize_url(
    endpoints: &Endpoints,
    client_id: &str,
    redirect_uri: &str,
    state: &str,
    challenge: &str,
    nonce: &str,
) -> anyhow::Result<String> {
    let (base, scope) = match endpoints {
        Endpoints::Oidc {
            authorization_endpoint,
            ..
        } => (authorization_endpoint.as_str(), "openid email profile"),
        Endpoints::Github { authorize, .. } => (authorize.as_str(), "read:user user:email"),
    };
    let mut url = url::Url::parse(base).context("the authorization endpoint is not a URL")?;
    {
        let mut query = url.query_pairs_mut();
        query
            .append_pair("response_type", "code")
            .append_pair("client_id", client_id)
            .append_pair("redirect_uri", redirect_uri)
            .append_pair("scope", scope)
            .append_pair("state", state)
            .append_pair("code_challenge", challenge)
            .append_pair("code_challenge_method", "S256");
        if matches!(endpoints, Endpoints::Oidc { .. }) {
            query.append_pair("nonce", nonce);
        }
    }
    Ok(url.into())
}

/// What a flow remembers to check the provider's answer.
pub struct Redemption<'a> {
    pub client_id: &'a str,
    pub client_secret: &'a str,
    pub redirect_uri: &'a str,
    pub code: &'a str,
    pub verifier: &'a str,
    pub nonce: &'a str,
}

/// Redeems the code and says who signed in.
pub async fn identify(
    http: &reqwest::Client,
    endpoints: &Endpoints,
    r: &Redemption<'_>,
) -> anyhow::Result<Identity> {
    let token_endpoint = match endpoints {
        Endpoints::Oidc { token_endpoint, .. } => token_endpoint,
        Endpoints::Github { token, .. } => token,
    };
    let form = url::form_urlencoded::Serializer::new(String::new())
        .append_pair("grant_type", "authorization_code")
        .append_pair("code", r.code)
        .append_pair("redirect_uri", r.redirect_uri)
        .append_pair("client_id", r.client_id)
        .append_pair("client_secret", r.client_secret)
        .append_pair("code_verifier", r.verifier)
        .finish();
    let tokens = json(
        http.post(token_endpoint)
            .header("accept", "application/json")
            .header("content-type", "application/x-www-form-urlencoded")
            .body(form)
            .send()
            .await
            .context("cannot reach the token endpoint")?,
        "the token endpoint",
    )
    .await?;
    if let Some(error) = tokens["error"].as_str() {
        bail!(
            "the token endpoint refused the code: {error} {}",
            tokens["error_description"].as_str().unwrap_or_default()
        );
    }
    match endpoints {
        Endpoints::Oidc {
            issuer,
            jwks_uri,
            userinfo_endpoint,
            ..
        } => {
            let id_token = tokens["id_token"]
                .as_str()
                .context("the token endpoint sent no ID token")?;
            let claims = verify_id_token(http, id_token, jwks_uri, issuer, r.client_id).await?;
            if claims.nonce.as_deref() != Some(r.nonce) {
                bail!("the ID token's nonce is not this sign-in's");
            }
            let (mut email, mut verified, mut name) =
                (claims.email, claims.email_verified.is_true(), claims.name);
            if email.is_none()
                && let (Some(userinfo), Some(access)) =
                    (userinfo_endpoint, tokens["access_token"].as_str())
            {
                let info = json(
                    http.get(userinfo)
                        .bearer_auth(access)
                        .send()
                        .await
                        .context("cannot reach the userinfo endpoint")?,
                    "the userinfo endpoint",
                )
                .await?;
                if info["sub"].as_str() != Some(claims.sub.as_str()) {
                    bail!("the userinfo endpoint answered for another subject");
                }
                email = info["email"].as_str().map(str::to_owned);
                verified = Verified::from_json(&info["email_verified"]).is_true();
                name = name.or(info["name"].as_str().map(str::to_owned));
            }
            let email = email.context("the provider gave no e-mail address")?;
            if !verified {
                bail!("the provider has not verified the e-mail address {email}");
            }
            Ok(Identity { email, name })
        }
        Endpoints::Github { api, .. } => {
            let access = tokens["access_token"]
                .as_str()
                .context("GitHub sent no access token")?;
            let get = |path: &str| {
                http.get(format!("{api}{path}"))
                    .bearer_auth(access)
                    .header("accept", "application/vnd.github+json")
                    .send()
            };
            let user = json(
                get("/user").await.context("cannot reach GitHub")?,
                "GitHub /user",
            )
            .await?;
            let emails = json(
                get("/user/emails").await.context("cannot reach GitHub")?,
                "GitHub /user/emails",
            )
            .await?;
            let email = emails
                .as_array()
                .into_iter()
                .flatten()
                .find(|e| e["primary"] == true && e["verified"] == true)
                .and_then(|e| e["email"].as_str())
                .context("the GitHub account has no verified primary e-mail address")?;
            Ok(Identity {
                email: email.to_owned(),
                name: user["name"]
                    .as_str()
                    .or(user["login"].as_str())
                    .map(str::to_owned),
            })
        }
    }
}

/// `email_verified` is a boolean, but some providers send the string `"true"`.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(untagged)]
pub enum Verified {
    Bool(bool),
    Text(String),
    #[default]
    Missing,
}

impl Verified {
    fn is_true(&self) -> bool {
        match self {
            Verified::Bool(b) => *b,
            Verified::Text(t) => t == "true",
            Verified::Missing => false,
        }
    }

    fn from_json(value: &Value) -> Self {
        serde_json::from_value(value.clone()).unwrap_or_default()
    }
}

#[derive(Debug, Deserialize)]
pub struct IdClaims {
    pub sub: String,
    #[serde(default)]
    pub aud: Audience,
    pub azp: Option<String>,
    pub nonce: Option<String>,
    pub email: Option<String>,
    #[serde(default)]
    pub email_verified: Verified,
    pub name: Option<String>,
}

/// `aud` is checked against the client id by the JWT library; only a list matters here (the
/// `azp` rule).
#[derive(Debug, Default, Deserialize)]
#[serde(untagged)]
pub enum Audience {
    Many(Vec<String>),
    One(serde::de::IgnoredAny),
    #[default]
    Missing,
}

/// Asymmetric signatures only: `none` and the HMAC family (whose key would be the public
/// client secret or a public key misread as one) are refused.
const ALGORITHMS: [Algorithm; 8] = [
    Algorithm::RS256,
    Algorithm::RS384,
    Algorithm::RS512,
    Algorithm::PS256,
    Algorithm::PS384,
    Algorithm::PS512,
    Algorithm::ES256,
    Algorithm::ES384,
];

/// Checks an ID token: signature against the provider's JWKS, issuer, audience (and `azp`
/// when there are several), expiry.
pub async fn verify_id_token(
    http: &reqwest::Client,
    id_token: &str,
    jwks_uri: &str,
    issuer: &str,
    client_id: &str,
) -> anyhow::Result<IdClaims> {
    let header = jsonwebtoken::decode_header(id_token).context("the ID token is not a JWT")?;
    if !ALGORITHMS.contains(&header.alg) {
        bail!(
            "the ID token is signed with {:?}, which is not accepted",
            header.alg
        );
    }
    let keys: JwkSet = serde_json::from_value(
        json(
            http.get(jwks_uri)
                .send()
                .await
                .with_context(|| format!("cannot fetch {jwks_uri}"))?,
            "the provider's keys",
        )
        .await?,
    )
    .context("the provider's keys are not a JWK set")?;
    let jwk = match &header.kid {
        Some(kid) => keys.find(kid),
        None if keys.keys.len() == 1 => keys.keys.first(),
        None => None,
    }
    .context("the ID token's key is not among the provider's keys")?;
    let key = DecodingKey::from_jwk(jwk).context("the provider's key cannot be used")?;
    let mut validation = Validation::new(header.alg);
    validation.set_issuer(&[issuer]);
    validation.set_audience(&[client_id]);
    validation.leeway = LEEWAY_SECS;
    validation.set_required_spec_claims(&["exp", "iss", "aud", "sub"]);
    let claims = jsonwebtoken::decode::<IdClaims>(id_token, &key, &validation)
        .map_err(|e| anyhow::anyhow!("the ID token is not valid: {e}"))?
        .claims;
    if let Audience::Many(audiences) = &claims.aud
        && audiences.len() > 1
        && claims.azp.as_deref() != Some(client_id)
    {
        bail!("the ID token has several audiences and was not issued to this client");
    }
    Ok(claims)
}
