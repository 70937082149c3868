//! Token buckets keyed by user, e-mail or client address: in this process's memory
//! ([`RateLimiter`]), or in the database, shared by every replica on it
//! ([`SharedRateLimiter`], for limits an attacker must not multiply by the replica count).

use std::{
    collections::HashMap,
    hash::Hash,
    sync::Mutex,
    time::{Duration, Instant},
};

/// `capacity` tokens at most, starting with `initial`, refilled at `per_second`.
#[derive(Clone, Copy, Debug)]
pub struct BucketSpec {
    pub capacity: f64,
    pub initial: f64,
    pub per_second: f64,
}

/// Keys unused for this long are dropped when the map is swept.
const IDLE_EVICTION: Duration = Duration::from_secs(3600);
const SWEEP_EVERY: usize = 4096;

pub struct RateLimiter<K> {
    spec: BucketSpec,
    state: Mutex<State<K>>,
}

struct State<K> {
    buckets: HashMap<K, (f64, Instant)>,
    calls: usize,
}

impl<K: Eq + Hash + Clone> RateLimiter<K> {
    pub fn new(spec: BucketSpec) -> Self {
        Self {
            spec,
            state: Mutex::new(State {
                buckets: HashMap::new(),
                calls: 0,
            }),
        }
    }

    fn with_bucket<T>(&self, key: &K, f: impl FnOnce(&mut f64) -> T) -> T {
        let now = Instant::now();
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        state.calls += 1;
        if state.calls.is_multiple_of(SWEEP_EVERY) {
            state
                .buckets
                .retain(|_, (_, at)| now.duration_since(*at) < IDLE_EVICTION);
        }
        let spec = self.spec;
        let (tokens, at) = state
            .buckets
            .entry(key.clone())
            .or_insert((spec.initial, now));
        *tokens =
            (*tokens + now.duration_since(*at).as_secs_f64() * spec.per_second).min(spec.capacity);
        *at = now;
        f(tokens)
    }

    /// Takes one token; `false` when the bucket is empty.
    pub fn try_acquire(&self, key: &K) -> bool {
        self.with_bucket(key, |tokens| {
            if *tokens >= 1.0 {
                *tokens -= 1.0;
                true
            } else {
                false
            }
        })
    }

    /// Whether a token is available, without taking it.
    pub fn has_token(&self, key: &K) -> bool {
        self.with_bucket(key, |tokens| *tokens >= 1.0)
    }

    /// Gives back a token taken by [`try_acquire`](Self::try_acquire) (e.g. a sign-in that
    /// succeeded: only failures count).
    pub fn refund(&self, key: &K) {
        let capacity = self.spec.capacity;
        self.with_bucket(key, |tokens| *tokens = (*tokens + 1.0).min(capacity));
    }

    /// Takes a token if one is left (used to count failures).
    pub fn consume(&self, key: &K) {
        self.with_bucket(key, |tokens| *tokens = (*tokens - 1.0).max(0.0));
    }
}

/// How often (in calls) a shared limiter removes the buckets idle for an hour.
const SHARED_SWEEP_EVERY: usize = 1024;

/// A token bucket per key kept in the database's `rate_buckets`, shared by every process on
/// it: failed sign-ins per account count through all replicas. Each call is one write
/// transaction, so it is for rare events (sign-ins), not for every request. Keys are stored as
/// `scope:` and the SHA-256 of the key, so the table holds no e-mail address and no key is
/// longer than 64 hex digits whatever a client sends.
pub struct SharedRateLimiter {
    db: tabby_db::DbConn,
    scope: &'static str,
    spec: tabby_db::RateBucketSpec,
    calls: std::sync::atomic::AtomicUsize,
}

impl SharedRateLimiter {
    pub fn new(db: tabby_db::DbConn, scope: &'static str, spec: BucketSpec) -> Self {
        Self {
            db,
            scope,
            spec: tabby_db::RateBucketSpec {
                capacity: spec.capacity,
                initial: spec.initial,
                per_second: spec.per_second,
            },
            calls: Default::default(),
        }
    }

    fn key(&self, key: &str) -> String {
        use sha2::Digest as _;
        let digest = sha2::Sha256::digest(key.as_bytes());
        let hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
        format!("{}:{hex}", self.scope)
    }

    /// Takes one token; `false` when the bucket is empty.
    pub async fn try_acquire(&self, key: &str) -> tabby_db::DbResult<bool> {
        let now = now_ms();
        let calls = self
            .calls
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        if calls % SHARED_SWEEP_EVERY == SHARED_SWEEP_EVERY - 1 {
            let idle = i64::try_from(IDLE_EVICTION.as_millis()).unwrap_or(i64::MAX);
            self.db
                .delete_idle_rate_buckets(now.saturating_sub(idle))
                .await?;
        }
        self.db
            .take_rate_token(&self.key(key), self.spec, now)
            .await
    }

    /// Gives back a token taken by [`try_acquire`](Self::try_acquire).
    pub async fn refund(&self, key: &str) -> tabby_db::DbResult<()> {
        self.db
            .give_rate_token(&self.key(key), self.spec, now_ms())
            .await
    }
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_are_per_key_and_refill() {
        let limiter = RateLimiter::new(BucketSpec {
            capacity: 3.0,
            initial: 2.0,
            per_second: 1000.0,
        });
        assert!(limiter.try_acquire(&"a"));
        assert!(limiter.try_acquire(&"a"));
        // At 1000 tokens/s a little time refills; with a slow refill the third would fail.
        let slow = RateLimiter::new(BucketSpec {
            capacity: 3.0,
            initial: 2.0,
            per_second: 0.001,
        });
        assert!(slow.try_acquire(&"a") && slow.try_acquire(&"a"));
        assert!(!slow.try_acquire(&"a"));
        assert!(slow.try_acquire(&"b"), "other keys are independent");
        assert!(slow.has_token(&"b"));
        slow.consume(&"b");
        assert!(!slow.has_token(&"b"));
        slow.refund(&"b");
        assert!(
            slow.try_acquire(&"b"),
            "a refunded token can be taken again"
        );
        std::thread::sleep(Duration::from_millis(5));
        assert!(limiter.try_acquire(&"a"));
    }
}
