//! What the completion path derives from the index once per searcher generation (a file's
//! imports, its parse), by (source id, path), bounded in entries and bytes: a new generation,
//! or a full map, starts afresh.

use std::{
    collections::HashMap,
    sync::{Arc, Mutex},
};

/// Values by (source id, path) for one searcher generation.
pub struct PerGeneration<V> {
    inner: Mutex<Entries<V>>,
    max_entries: usize,
    max_bytes: usize,
}

/// The generation, the bytes held, and the values.
type Entries<V> = (u64, usize, HashMap<(String, String), Arc<V>>);

impl<V> PerGeneration<V> {
    pub fn new(max_entries: usize, max_bytes: usize) -> Self {
        Self {
            inner: Mutex::new((0, 0, HashMap::new())),
            max_entries,
            max_bytes,
        }
    }

    /// The value for (`source_id`, `path`) in `generation`, from the map or `make` (whose
    /// value weighs `size` bytes); `make` runs outside the lock.
    pub fn get_or_make<E>(
        &self,
        generation: u64,
        source_id: &str,
        path: &str,
        make: impl FnOnce() -> Result<V, E>,
        size: impl FnOnce(&V) -> usize,
    ) -> Result<Arc<V>, E> {
        let key = (source_id.to_string(), path.to_string());
        {
            let inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
            if inner.0 == generation
                && let Some(found) = inner.2.get(&key)
            {
                return Ok(found.clone());
            }
        }
        let value = Arc::new(make()?);
        let bytes = size(&value);
        let mut inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        if inner.0 != generation
            || inner.2.len() >= self.max_entries
            || inner.1 + bytes > self.max_bytes
        {
            *inner = (generation, 0, HashMap::new());
        }
        inner.1 += bytes;
        inner.2.insert(key, value.clone());
        Ok(value)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_live_for_their_generation_within_bounds() {
        let map: PerGeneration<String> = PerGeneration::new(2, 10);
        let made = std::cell::Cell::new(0);
        let get = |generation: u64, path: &str, value: &str| {
            map.get_or_make::<()>(
                generation,
                "s",
                path,
                || {
                    made.set(made.get() + 1);
                    Ok(value.to_string())
                },
                |v| v.len(),
            )
            .unwrap()
        };
        assert_eq!(*get(1, "a", "aaa"), "aaa");
        assert_eq!(*get(1, "a", "zzz"), "aaa", "kept");
        assert_eq!(made.get(), 1);
        assert_eq!(*get(2, "a", "new"), "new", "a new generation starts afresh");
        get(2, "b", "bbb");
        get(2, "c", "ccc");
        assert_eq!(made.get(), 4);
        assert_eq!(*get(2, "a", "again"), "again", "two entries at most");
        // Over the byte bound: the map starts afresh.
        get(2, "d", "dddddddddd");
        assert_eq!(*get(2, "a", "fresh"), "fresh");
        assert!(
            map.get_or_make(3, "s", "e", || Err("failed"), |_: &String| 0)
                .is_err()
        );
    }
}
