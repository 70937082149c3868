//! Secrets the server must send on to someone else (the SMTP password today; OAuth client
//! secrets and integration tokens next) are stored sealed: AES-256-GCM with a random nonce,
//! under a key derived by HKDF-SHA256 from the server's encryption secret.
//!
//! The secret comes from `TABBY_WEBSERVER_ENCRYPTION_SECRET` (at least 32 characters), or is
//! generated once and kept in the database beside the JWT secret. Setting the variable keeps
//! the key out of the database, so a copy of the file alone does not reveal the secrets. A
//! value sealed under another secret does not open: the caller says which setting to enter
//! again, nothing is guessed.
//!
//! Sealed form: `v1:` and the hex of nonce ‖ ciphertext ‖ tag.

use anyhow::{Context as _, bail};
use aws_lc_rs::{
    aead::{AES_256_GCM, Aad, NONCE_LEN, Nonce, RandomizedNonceKey},
    hkdf,
};
use tabby_db::DbConn;

pub const ENCRYPTION_SECRET_ENV: &str = "TABBY_WEBSERVER_ENCRYPTION_SECRET";
const MIN_SECRET_LEN: usize = 32;
const PREFIX: &str = "v1:";
/// Binds the key to its use: another purpose derived from the same secret gets another key.
const HKDF_INFO: &[u8] = b"tabby-rs stored secrets v1";
const HKDF_SALT: &[u8] = b"tabby-rs secret box";

pub struct SecretBox {
    key: RandomizedNonceKey,
}

impl SecretBox {
    pub fn new(secret: &str) -> anyhow::Result<Self> {
        if secret.len() < MIN_SECRET_LEN {
            bail!(
                "the encryption secret must be at least {MIN_SECRET_LEN} characters long, not {}",
                secret.len()
            );
        }
        let prk = hkdf::Salt::new(hkdf::HKDF_SHA256, HKDF_SALT).extract(secret.as_bytes());
        let mut key = [0u8; 32];
        prk.expand(&[HKDF_INFO], &AES_256_GCM)
            .and_then(|okm| okm.fill(&mut key))
            .map_err(|_| anyhow::anyhow!("cannot derive the encryption key"))?;
        let key = RandomizedNonceKey::new(&AES_256_GCM, &key)
            .map_err(|_| anyhow::anyhow!("cannot build the encryption key"))?;
        Ok(Self { key })
    }

    /// The secret from the environment, else the one persisted in the database.
    pub async fn load(db: &DbConn) -> anyhow::Result<Self> {
        match std::env::var(ENCRYPTION_SECRET_ENV) {
            Ok(secret) => Self::new(secret.trim())
                .with_context(|| format!("{ENCRYPTION_SECRET_ENV} cannot be used")),
            Err(std::env::VarError::NotUnicode(_)) => {
                bail!("{ENCRYPTION_SECRET_ENV} is not valid UTF-8")
            }
            Err(std::env::VarError::NotPresent) => {
                let secret = db
                    .get_or_create_encryption_secret()
                    .await
                    .context("cannot read the encryption secret from the database")?;
                Self::new(&secret)
            }
        }
    }

    /// Seals `plaintext`. `purpose` (e.g. `"email_setting.smtp_password"`) is authenticated
    /// with it, so a sealed value copied into another column does not open there.
    pub fn seal(&self, purpose: &str, plaintext: &str) -> String {
        let mut in_out = plaintext.as_bytes().to_vec();
        let nonce = self
            .key
            .seal_in_place_append_tag(Aad::from(purpose.as_bytes()), &mut in_out)
            .expect("AES-GCM sealing of an in-memory buffer does not fail");
        let mut sealed = String::with_capacity(PREFIX.len() + 2 * (NONCE_LEN + in_out.len()));
        sealed.push_str(PREFIX);
        for b in nonce.as_ref().iter().chain(&in_out) {
            sealed.push_str(&format!("{b:02x}"));
        }
        sealed
    }

    /// Opens what [`SecretBox::seal`] made for the same `purpose`.
    pub fn open(&self, purpose: &str, sealed: &str) -> anyhow::Result<String> {
        let hex = sealed
            .strip_prefix(PREFIX)
            .context("not a sealed value of this version")?;
        let bytes = decode_hex(hex).context("a sealed value is not hex")?;
        if bytes.len() < NONCE_LEN + AES_256_GCM.tag_len() {
            bail!("a sealed value is too short");
        }
        let (nonce, ciphertext) = bytes.split_at(NONCE_LEN);
        let nonce = Nonce::try_assume_unique_for_key(nonce).expect("nonce length checked");
        let mut in_out = ciphertext.to_vec();
        let plaintext = self
            .key
            .open_in_place(nonce, Aad::from(purpose.as_bytes()), &mut in_out)
            .map_err(|_| {
                anyhow::anyhow!(
                    "a stored secret cannot be decrypted: it was sealed under another \
                     encryption secret ({ENCRYPTION_SECRET_ENV} or the database changed); \
                     enter it again"
                )
            })?;
        String::from_utf8(plaintext.to_vec()).context("a sealed value is not UTF-8")
    }
}

fn decode_hex(hex: &str) -> Option<Vec<u8>> {
    if !hex.len().is_multiple_of(2) {
        return None;
    }
    (0..hex.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(hex.get(i..i + 2)?, 16).ok())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECRET: &str = "0123456789abcdef0123456789abcdef";

    #[test]
    fn sealed_values_open_only_with_the_same_secret_and_purpose() {
        let sb = SecretBox::new(SECRET).unwrap();
        let sealed = sb.seal("smtp", "hunter2 ünïcode");
        assert!(sealed.starts_with("v1:"), "{sealed}");
        assert!(!sealed.contains("hunter2"));
        assert_ne!(sealed, sb.seal("smtp", "hunter2 ünïcode"), "random nonce");
        assert_eq!(sb.open("smtp", &sealed).unwrap(), "hunter2 ünïcode");
        assert!(sb.open("oauth", &sealed).is_err(), "another purpose");
        let other = SecretBox::new(&format!("{SECRET}x")).unwrap();
        let err = other.open("smtp", &sealed).unwrap_err().to_string();
        assert!(err.contains("enter it again"), "{err}");
        assert!(!err.contains("hunter2"));
        // Tampering with any byte is detected.
        let mut tampered = sealed.clone().into_bytes();
        let last = tampered.len() - 1;
        tampered[last] = if tampered[last] == b'0' { b'1' } else { b'0' };
        assert!(
            sb.open("smtp", std::str::from_utf8(&tampered).unwrap())
                .is_err()
        );
        for bad in ["", "v1:", "v1:zz", "v1:abc", "hunter2", "v2:00"] {
            assert!(sb.open("smtp", bad).is_err(), "{bad}");
        }
        assert!(SecretBox::new("short").is_err());
    }
}
