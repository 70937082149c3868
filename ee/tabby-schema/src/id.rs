//! GraphQL ids are hashids of SQLite row ids (salt `tabby-id-serializer`, at least 6
//! characters), as upstream, so ids stay stable across the two implementations and row counts
//! are not exposed.

use std::sync::LazyLock;

use harsh::Harsh;
use juniper::ID;

use crate::{CoreError, Result};

static HASHER: LazyLock<Harsh> = LazyLock::new(|| {
    Harsh::builder()
        .salt("tabby-id-serializer")
        .length(6)
        .build()
        .expect("the hashid alphabet and salt are valid")
});

/// Row id → GraphQL id.
pub trait AsID {
    fn as_id(&self) -> ID;
}

impl AsID for i64 {
    fn as_id(&self) -> ID {
        ID::new(encode_id(*self))
    }
}

pub fn encode_id(rowid: i64) -> String {
    HASHER.encode(&[u64::try_from(rowid).unwrap_or_default()])
}

/// Decodes a hashid; `None` when it is not one of ours.
pub fn decode_id(id: &str) -> Option<i64> {
    match HASHER.decode(id).ok()?.as_slice() {
        [value] => i64::try_from(*value).ok(),
        _ => None,
    }
}

/// GraphQL id → row id; a malformed id is a NOT_FOUND error (no such object).
pub trait AsRowid {
    fn as_rowid(&self) -> Result<i64>;
}

impl AsRowid for ID {
    fn as_rowid(&self) -> Result<i64> {
        decode_id(self).ok_or(CoreError::NotFound("No object with this id"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_round_trip_and_reject_garbage() {
        for rowid in [1, 2, 42, 1_000_000] {
            let id = rowid.as_id();
            assert!(id.len() >= 6, "{id:?}");
            assert_eq!(id.as_rowid().unwrap(), rowid);
        }
        assert_ne!(1.as_id(), 2.as_id());
        assert!(ID::new("not-an-id!").as_rowid().is_err());
        assert!(ID::new("").as_rowid().is_err());
    }
}
