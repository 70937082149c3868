//! Session access tokens: HS256 JWTs `{exp, iat, sub}` valid for 30 minutes, `sub` being the
//! user's hashid.
//!
//! The secret comes from `TABBY_WEBSERVER_JWT_TOKEN_SECRET` or is generated once and kept in
//! the database, so sessions survive a restart (upstream draws a new secret per process and
//! signs everyone out whenever the server restarts).

use anyhow::{Context as _, bail};
use chrono::{DateTime, Duration, Utc};
use jsonwebtoken::{Algorithm, DecodingKey, EncodingKey, Header, Validation};
use serde::{Deserialize, Serialize};
use tabby_db::DbConn;
use tabby_schema::{decode_id, encode_id};

pub const JWT_SECRET_ENV: &str = "TABBY_WEBSERVER_JWT_TOKEN_SECRET";
pub const ACCESS_TOKEN_LIFETIME: Duration = Duration::minutes(30);
/// Shorter secrets are refused: HS256 needs at least 256 bits of key to be as strong as its
/// hash; a UUID (upstream's required format) has 36 characters.
const MIN_SECRET_LEN: usize = 32;

#[derive(Debug, Serialize, Deserialize)]
struct JwtClaims {
    exp: i64,
    iat: i64,
    sub: String,
    /// The user's session generation when issued (absent: 0).
    #[serde(default, skip_serializing_if = "is_zero")]
    sep: i64,
}

fn is_zero(n: &i64) -> bool {
    *n == 0
}

pub struct JwtKeys {
    encoding: EncodingKey,
    decoding: DecodingKey,
    validation: Validation,
}

impl JwtKeys {
    pub fn new(secret: &str) -> anyhow::Result<Self> {
        if secret.len() < MIN_SECRET_LEN {
            bail!(
                "{JWT_SECRET_ENV} must be at least {MIN_SECRET_LEN} characters (e.g. a UUID); \
                 got {} characters",
                secret.len()
            );
        }
        let mut validation = Validation::new(Algorithm::HS256);
        validation.leeway = 0;
        validation.set_required_spec_claims(&["exp", "sub"]);
        Ok(Self {
            encoding: EncodingKey::from_secret(secret.as_bytes())?,
            decoding: DecodingKey::from_secret(secret.as_bytes())?,
            validation,
        })
    }

    /// The secret from the environment, else the one persisted in the database (created on
    /// first use).
    pub async fn load(db: &DbConn) -> anyhow::Result<Self> {
        match std::env::var(JWT_SECRET_ENV) {
            Ok(secret) => Self::new(secret.trim()),
            Err(std::env::VarError::NotUnicode(_)) => bail!("{JWT_SECRET_ENV} is not valid UTF-8"),
            Err(std::env::VarError::NotPresent) => {
                let secret = db
                    .get_or_create_jwt_secret()
                    .await
                    .context("cannot read the JWT secret from the database")?;
                Self::new(&secret)
            }
        }
    }

    /// A new access token for the user (of session generation `epoch`) and its expiry.
    pub fn issue(&self, user_id: i64, epoch: i64) -> anyhow::Result<(String, DateTime<Utc>)> {
        let now = Utc::now();
        let exp = now + ACCESS_TOKEN_LIFETIME;
        let claims = JwtClaims {
            exp: exp.timestamp(),
            iat: now.timestamp(),
            sub: encode_id(user_id),
            sep: epoch,
        };
        let token = jsonwebtoken::encode(&Header::new(Algorithm::HS256), &claims, &self.encoding)?;
        Ok((token, exp))
    }

    /// The user id of a valid, unexpired token.
    pub fn verify(&self, token: &str) -> Option<i64> {
        self.verify_with_epoch(token).map(|(user, _)| user)
    }

    /// The user id and session generation of a valid, unexpired token.
    pub fn verify_with_epoch(&self, token: &str) -> Option<(i64, i64)> {
        let data =
            jsonwebtoken::decode::<JwtClaims>(token, &self.decoding, &self.validation).ok()?;
        Some((decode_id(&data.claims.sub)?, data.claims.sep))
    }

    /// When a valid, unexpired token expires.
    pub fn expires_at(&self, token: &str) -> Option<DateTime<Utc>> {
        let data =
            jsonwebtoken::decode::<JwtClaims>(token, &self.decoding, &self.validation).ok()?;
        DateTime::from_timestamp(data.claims.exp, 0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECRET: &str = "0b6d2e4a-7f1c-4c8e-9a3b-5d6e7f8a9b0c";

    #[test]
    fn round_trip_expiry_and_wrong_key() {
        let keys = JwtKeys::new(SECRET).unwrap();
        let (token, exp) = keys.issue(7, 0).unwrap();
        assert_eq!(keys.verify(&token), Some(7));
        assert_eq!(
            keys.expires_at(&token).map(|t| t.timestamp()),
            Some(exp.timestamp())
        );
        let minutes = (exp - Utc::now()).num_minutes();
        assert!((29..=30).contains(&minutes), "{minutes}");

        let other = JwtKeys::new("another-secret-that-is-long-enough-1234").unwrap();
        assert_eq!(other.verify(&token), None, "signed with another key");

        let expired = JwtClaims {
            exp: Utc::now().timestamp() - 1,
            iat: Utc::now().timestamp() - 1800,
            sub: encode_id(7),
            sep: 0,
        };
        let expired =
            jsonwebtoken::encode(&Header::new(Algorithm::HS256), &expired, &keys.encoding).unwrap();
        assert_eq!(keys.verify(&expired), None);
        assert_eq!(keys.verify("not.a.jwt"), None);
        assert_eq!(keys.verify(""), None);
    }

    #[test]
    fn short_secrets_are_refused() {
        let err = JwtKeys::new("short").err().unwrap().to_string();
        assert!(err.contains(JWT_SECRET_ENV), "{err}");
    }
}
