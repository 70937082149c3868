//! Password hashing with argon2id (PHC strings in `users.password_encrypted`), off the async
//! threads because a hash takes tens of milliseconds on purpose.

use argon2::{Argon2, PasswordHasher, PasswordVerifier};

pub async fn hash(password: &str) -> anyhow::Result<String> {
    let password = password.to_owned();
    tokio::task::spawn_blocking(move || {
        Argon2::default()
            .hash_password(password.as_bytes())
            .map(|hash| hash.to_string())
            .map_err(|e| anyhow::anyhow!("cannot hash the password: {e}"))
    })
    .await?
}

/// Whether `password` matches the PHC string `hash` (false for a malformed hash).
pub async fn verify(password: &str, hash: &str) -> bool {
    let password = password.to_owned();
    let hash = hash.to_owned();
    tokio::task::spawn_blocking(move || {
        PasswordVerifier::<str>::verify_password(&Argon2::default(), password.as_bytes(), &hash)
            .is_ok()
    })
    .await
    .unwrap_or(false)
}

/// Equality whose time does not depend on where the inputs differ (only on their lengths).
pub fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn hash_and_verify() {
        let phc = hash("Passw0rd!").await.unwrap();
        assert!(phc.starts_with("$argon2id$"), "{phc}");
        assert!(verify("Passw0rd!", &phc).await);
        assert!(!verify("passw0rd!", &phc).await);
        assert!(!verify("Passw0rd!", "not a hash").await);
        assert_ne!(phc, hash("Passw0rd!").await.unwrap(), "salted");
    }

    #[test]
    fn constant_time_equality() {
        assert!(constant_time_eq(b"auth_abc", b"auth_abc"));
        assert!(!constant_time_eq(b"auth_abc", b"auth_abd"));
        assert!(!constant_time_eq(b"auth_abc", b"auth_ab"));
    }
}
