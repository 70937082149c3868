//! Password hashing with argon2id (PHC strings in `users.password_encrypted`), off the async
//! threads because a hash takes tens of milliseconds on purpose.

use std::sync::{LazyLock, Mutex, mpsc};

use argon2::{Argon2, PasswordHasher, PasswordVerifier};
use tokio::sync::Semaphore;

/// Hashes computed at once: one per core, each on one of as many dedicated threads. Each
/// argon2id hash holds 19 MiB, so a flood of sign-ins or registrations waits here instead of
/// exhausting memory and the blocking threads (and the allocator keeps at most one hash's
/// memory per hashing thread, not one per blocking thread that ever ran a hash).
static HASHING: LazyLock<Semaphore> = LazyLock::new(|| Semaphore::new(max_concurrent_hashes()));

type HashJob = Box<dyn FnOnce() + Send>;

static HASHERS: LazyLock<mpsc::Sender<HashJob>> = LazyLock::new(|| {
    let (sender, receiver) = mpsc::channel::<HashJob>();
    let receiver = std::sync::Arc::new(Mutex::new(receiver));
    for i in 0..max_concurrent_hashes() {
        let receiver = receiver.clone();
        let spawned = std::thread::Builder::new()
            .name(format!("argon2-{i}"))
            .spawn(move || {
                loop {
                    let job = receiver.lock().unwrap_or_else(|e| e.into_inner()).recv();
                    let Ok(job) = job else {
                        return;
                    };
                    // A panicking hash fails its own request only.
                    let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(job));
                }
            });
        if let Err(e) = spawned {
            tracing::error!("cannot start a password hashing thread: {e}");
        }
    }
    sender
});

/// Runs one argon2 computation on a hashing thread once a permit is free.
async fn bounded<T: Send + 'static>(
    work: impl FnOnce() -> T + Send + 'static,
) -> anyhow::Result<T> {
    let _permit = HASHING.acquire().await?;
    let (done, result) = tokio::sync::oneshot::channel();
    HASHERS
        .send(Box::new(move || {
            let _ = done.send(work());
        }))
        .map_err(|_| anyhow::anyhow!("the password hashing threads are gone"))?;
    result
        .await
        .map_err(|_| anyhow::anyhow!("password hashing failed"))
}

/// How many hashes may run at once (the number of cores).
pub fn max_concurrent_hashes() -> usize {
    std::thread::available_parallelism().map_or(2, |n| n.get())
}

pub async fn hash(password: &str) -> anyhow::Result<String> {
    let password = password.to_owned();
    bounded(move || {
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
    bounded(move || {
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

    /// Many hashes at once never run more than one per core.
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn hashing_is_bounded_to_the_cores() {
        let running = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let peak = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let tasks: Vec<_> = (0..4 * max_concurrent_hashes())
            .map(|_| {
                let (running, peak) = (running.clone(), peak.clone());
                tokio::spawn(async move {
                    bounded(move || {
                        use std::sync::atomic::Ordering::SeqCst;
                        let now = running.fetch_add(1, SeqCst) + 1;
                        peak.fetch_max(now, SeqCst);
                        std::thread::sleep(std::time::Duration::from_millis(20));
                        running.fetch_sub(1, SeqCst);
                    })
                    .await
                    .unwrap()
                })
            })
            .collect();
        for task in tasks {
            task.await.unwrap();
        }
        let peak = peak.load(std::sync::atomic::Ordering::SeqCst);
        assert!(peak <= max_concurrent_hashes(), "{peak} hashes at once");
    }

    #[test]
    fn constant_time_equality() {
        assert!(constant_time_eq(b"auth_abc", b"auth_abc"));
        assert!(!constant_time_eq(b"auth_abc", b"auth_abd"));
        assert!(!constant_time_eq(b"auth_abc", b"auth_ab"));
    }
}
