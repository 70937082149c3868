use chrono::{Duration, Utc};
use tabby_db::{DbError, Pagination, REFRESH_TOKEN_LIFETIME_DAYS};

use crate::{db, user};

#[tokio::test]
async fn registration_token_exists_and_rotates() {
    let db = db().await;
    let token = db.read_registration_token().await.unwrap();
    assert!(uuid::Uuid::parse_str(&token).is_ok(), "{token}");
    assert_eq!(db.read_registration_token().await.unwrap(), token);
    let new = db.reset_registration_token().await.unwrap();
    assert_ne!(new, token);
    assert_eq!(db.read_registration_token().await.unwrap(), new);
}

#[tokio::test]
async fn invitations_lifecycle() {
    let db = db().await;
    let invitation = db.create_invitation("New@Example.com").await.unwrap();
    assert!(uuid::Uuid::parse_str(&invitation.code).is_ok());
    assert_eq!(invitation.email, "New@Example.com");

    let by_code = db.get_invitation_by_code(&invitation.code).await.unwrap();
    assert_eq!(by_code.as_ref(), Some(&invitation));
    let by_email = db.get_invitation_by_email("new@example.com").await.unwrap();
    assert_eq!(by_email, Some(invitation.clone()));
    assert_eq!(db.get_invitation_by_code("nope").await.unwrap(), None);

    let err = db.create_invitation("NEW@example.com").await.unwrap_err();
    assert!(matches!(
        err,
        DbError::AlreadyExists {
            what: "an invitation for this email"
        }
    ));

    let second = db.create_invitation("two@example.com").await.unwrap();
    let all = db.list_invitations(Pagination::all()).await.unwrap();
    assert_eq!(all, [invitation.clone(), second.clone()]);
    let last = Pagination::relay(None, None, None, Some(1)).unwrap();
    assert_eq!(
        db.list_invitations(last).await.unwrap(),
        std::slice::from_ref(&second)
    );

    db.delete_invitation(invitation.id).await.unwrap();
    assert!(matches!(
        db.delete_invitation(invitation.id).await,
        Err(DbError::NotFound { what: "invitation" })
    ));
    assert_eq!(
        db.list_invitations(Pagination::all()).await.unwrap(),
        [second]
    );
}

#[tokio::test]
async fn an_invitation_registers_exactly_one_user() {
    let db = db().await;
    let invitation = db.create_invitation("new@example.com").await.unwrap();
    let id = db
        .create_user_with_invitation(
            "new@example.com",
            Some("h"),
            false,
            Some("N"),
            invitation.id,
        )
        .await
        .unwrap();
    assert_eq!(
        db.get_user(id).await.unwrap().unwrap().email,
        "new@example.com"
    );
    assert_eq!(
        db.get_invitation_by_code(&invitation.code).await.unwrap(),
        None
    );

    let again = db
        .create_user_with_invitation("other@example.com", None, false, None, invitation.id)
        .await;
    assert!(matches!(
        again,
        Err(DbError::NotFound { what: "invitation" })
    ));
    assert!(
        db.get_user_by_email("other@example.com")
            .await
            .unwrap()
            .is_none()
    );

    // A failed user insert keeps the invitation.
    let taken = db.create_invitation("x@example.com").await.unwrap();
    let err = db
        .create_user_with_invitation("NEW@example.com", None, false, None, taken.id)
        .await
        .unwrap_err();
    assert!(matches!(err, DbError::AlreadyExists { .. }));
    assert!(
        db.get_invitation_by_code(&taken.code)
            .await
            .unwrap()
            .is_some()
    );
}

#[tokio::test]
async fn refresh_tokens_expire_in_seven_days_and_rotate_once() {
    let db = db().await;
    let id = user(&db, "a@example.com").await;
    let token = db.create_refresh_token(id).await.unwrap();
    assert_eq!(token.user_id, id);
    assert_eq!(token.token.len(), 32);
    assert!(!token.is_expired());
    let lifetime = token.expires_at - token.created_at;
    assert_eq!(lifetime, Duration::days(REFRESH_TOKEN_LIFETIME_DAYS));
    assert!((token.created_at - Utc::now()).num_seconds().abs() < 60);

    // Lookup ignores case (the column is NOCASE).
    let found = db
        .get_refresh_token(&token.token.to_uppercase())
        .await
        .unwrap();
    assert_eq!(found, Some(token.clone()));

    let rotated = db.rotate_refresh_token(&token.token).await.unwrap();
    assert_eq!(rotated.user_id, id);
    assert_ne!(rotated.token, token.token);
    assert!(rotated.expires_at >= token.expires_at);
    assert_eq!(db.get_refresh_token(&token.token).await.unwrap(), None);
    // Presented again at once (a double refresh): refused, the family stays.
    assert!(matches!(
        db.rotate_refresh_token(&token.token).await,
        Err(DbError::Reused {
            what: "refresh token"
        })
    ));
    assert!(matches!(
        db.rotate_refresh_token("0123456789abcdef0123456789abcdef")
            .await,
        Err(DbError::NotFound {
            what: "refresh token"
        })
    ));
    assert!(
        db.get_refresh_token(&rotated.token)
            .await
            .unwrap()
            .is_some()
    );

    assert!(matches!(
        db.create_refresh_token(99).await,
        Err(DbError::NotFound { what: "user" })
    ));
}

#[tokio::test]
async fn concurrent_rotations_of_one_token_let_only_one_through() {
    let dir = tempfile::tempdir().unwrap();
    let db = tabby_db::DbConn::open(&dir.path().join("db.sqlite"))
        .await
        .unwrap();
    let id = user(&db, "a@example.com").await;
    let token = db.create_refresh_token(id).await.unwrap().token;
    let attempts: Vec<_> = (0..8)
        .map(|_| {
            let db = db.clone();
            let token = token.clone();
            tokio::spawn(async move { db.rotate_refresh_token(&token).await })
        })
        .collect();
    let mut successes = 0;
    for attempt in attempts {
        match attempt.await.unwrap() {
            Ok(_) => successes += 1,
            Err(DbError::Reused { .. }) => {}
            Err(other) => panic!("{other:?}"),
        }
    }
    assert_eq!(successes, 1);
    db.close().await;
}

/// Only the digest of a token is stored.
#[tokio::test]
async fn refresh_tokens_are_stored_as_digests() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("db.sqlite");
    let db = tabby_db::DbConn::open(&path).await.unwrap();
    let id = user(&db, "a@example.com").await;
    let token = db.create_refresh_token(id).await.unwrap().token;
    let rotated = db.rotate_refresh_token(&token).await.unwrap().token;
    db.close().await;
    let bytes = std::fs::read(&path).unwrap();
    let wal = std::fs::read(dir.path().join("db.sqlite-wal")).unwrap_or_default();
    for secret in [&token, &rotated] {
        let needle = secret.as_bytes();
        for file in [&bytes, &wal] {
            assert!(
                !file.windows(needle.len()).any(|w| w == needle),
                "a refresh token is stored in plain text"
            );
        }
    }
}

/// A rotated token presented again after the grace period is theft: the whole family (the
/// thief's and the owner's current token) is revoked; other sign-ins are not.
#[tokio::test]
async fn reusing_a_rotated_token_revokes_its_family() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("db.sqlite");
    let db = tabby_db::DbConn::open(&path).await.unwrap();
    let id = user(&db, "a@example.com").await;
    let stolen = db.create_refresh_token(id).await.unwrap().token;
    let other_device = db.create_refresh_token(id).await.unwrap().token;
    let current = db.rotate_refresh_token(&stolen).await.unwrap().token;
    let pool = sqlx::SqlitePool::connect(&format!("sqlite://{}", path.display()))
        .await
        .unwrap();
    sqlx::query("UPDATE refresh_tokens SET used_at = DATETIME('now', '-1 minute') WHERE used_at IS NOT NULL")
        .execute(&pool)
        .await
        .unwrap();
    pool.close().await;
    assert!(matches!(
        db.rotate_refresh_token(&stolen).await,
        Err(DbError::Reused { .. })
    ));
    assert!(matches!(
        db.rotate_refresh_token(&current).await,
        Err(DbError::NotFound { .. })
    ));
    assert!(db.rotate_refresh_token(&other_device).await.is_ok());
    db.close().await;
}

#[tokio::test]
async fn refresh_token_deletion() {
    let db = db().await;
    let a = user(&db, "a@example.com").await;
    let b = user(&db, "b@example.com").await;
    let a1 = db.create_refresh_token(a).await.unwrap();
    db.create_refresh_token(a).await.unwrap();
    let b1 = db.create_refresh_token(b).await.unwrap();

    db.delete_refresh_token(&a1.token).await.unwrap();
    assert!(matches!(
        db.delete_refresh_token(&a1.token).await,
        Err(DbError::NotFound { .. })
    ));
    assert_eq!(db.delete_refresh_tokens_of_user(a).await.unwrap(), 1);
    assert_eq!(db.delete_expired_refresh_tokens().await.unwrap(), 0);
    assert!(db.get_refresh_token(&b1.token).await.unwrap().is_some());
}

#[tokio::test]
async fn password_reset_keeps_one_code_per_user() {
    let db = db().await;
    let id = user(&db, "a@example.com").await;
    assert_eq!(db.get_password_reset_by_user_id(id).await.unwrap(), None);
    let first = db.create_password_reset(id).await.unwrap();
    assert_eq!(first.user_id, id);
    assert_eq!(first.code.len(), 32);
    let stored = db.get_password_reset_by_user_id(id).await.unwrap().unwrap();
    assert_ne!(stored.code, first.code, "only the digest is stored");
    assert_eq!(stored.code.len(), 64);
    let second = db.create_password_reset(id).await.unwrap();
    assert_eq!(second.id, first.id, "replaced, not added");
    assert_ne!(second.code, first.code);
    assert_eq!(
        db.redeem_password_reset(&first.code, 24).await.unwrap(),
        None,
        "the replaced code no longer works"
    );
    assert_eq!(
        db.redeem_password_reset(&second.code.to_uppercase(), 24)
            .await
            .unwrap(),
        Some(id)
    );
    assert_eq!(
        db.redeem_password_reset(&second.code, 24).await.unwrap(),
        None,
        "single use"
    );
    assert_eq!(db.get_password_reset_by_user_id(id).await.unwrap(), None);
    db.create_password_reset(id).await.unwrap();
    db.delete_password_reset_by_user_id(id).await.unwrap();
    assert!(matches!(
        db.delete_password_reset_by_user_id(id).await,
        Err(DbError::NotFound {
            what: "password reset"
        })
    ));
    assert!(matches!(
        db.create_password_reset(99).await,
        Err(DbError::NotFound { what: "user" })
    ));
}

/// Eight redemptions of one code at once, on tasks of a multi-threaded runtime over a file
/// database: exactly one gets the user.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_reset_code_is_redeemed_once_under_concurrency() {
    let shared = crate::shared_db().await;
    let db = shared.db.clone();
    let id = user(&db, "a@example.com").await;
    let reset = db.create_password_reset(id).await.unwrap();
    let tasks: Vec<_> = (0..8)
        .map(|_| {
            let (db, code) = (db.clone(), reset.code.clone());
            tokio::spawn(async move { db.redeem_password_reset(&code, 24).await.unwrap() })
        })
        .collect();
    let mut winners = 0;
    for task in tasks {
        if task.await.unwrap() == Some(id) {
            winners += 1;
        }
    }
    assert_eq!(winners, 1);
}

#[tokio::test]
async fn an_expired_reset_code_is_refused_and_removed() {
    let shared = crate::shared_db().await;
    let db = shared.db.clone();
    let id = user(&db, "a@example.com").await;
    let reset = db.create_password_reset(id).await.unwrap();
    shared
        .exec("UPDATE password_reset SET created_at = DATETIME('now', '-25 hours')")
        .await;
    assert_eq!(
        db.redeem_password_reset(&reset.code, 24).await.unwrap(),
        None
    );
    assert_eq!(db.get_password_reset_by_user_id(id).await.unwrap(), None);
}

#[tokio::test]
async fn deleting_a_user_removes_their_credentials() {
    let db = db().await;
    let id = user(&db, "a@example.com").await;
    let keep = user(&db, "b@example.com").await;
    let token = db.create_refresh_token(id).await.unwrap();
    let kept = db.create_refresh_token(keep).await.unwrap();
    let reset = db.create_password_reset(id).await.unwrap();
    db.delete_user(id).await.unwrap();
    assert_eq!(db.get_refresh_token(&token.token).await.unwrap(), None);
    assert_eq!(db.get_password_reset_by_user_id(id).await.unwrap(), None);
    assert_eq!(
        db.redeem_password_reset(&reset.code, 24).await.unwrap(),
        None
    );
    assert!(db.get_refresh_token(&kept.token).await.unwrap().is_some());
}

#[tokio::test]
async fn stale_password_resets_are_removed() {
    let shared = crate::shared_db().await;
    let db = shared.db.clone();
    let old = user(&db, "old@example.com").await;
    let fresh = user(&db, "fresh@example.com").await;
    db.create_password_reset(old).await.unwrap();
    db.create_password_reset(fresh).await.unwrap();
    shared
        .exec(&format!(
            "UPDATE password_reset SET created_at = DATETIME('now', '-25 hours') WHERE user_id = {old}"
        ))
        .await;
    assert_eq!(db.delete_password_resets_older_than(24).await.unwrap(), 1);
    assert!(
        db.get_password_reset_by_user_id(old)
            .await
            .unwrap()
            .is_none()
    );
    assert!(
        db.get_password_reset_by_user_id(fresh)
            .await
            .unwrap()
            .is_some(),
        "a fresh code stays"
    );
}

/// A shared token bucket: ten failures, then refused, through two connections as two
/// replicas would hold; a refund gives one back; time refills it; idle buckets are swept.
#[tokio::test]
async fn rate_buckets_are_shared_by_every_connection() {
    let shared = crate::shared_db().await;
    let (a, b) = (shared.db.clone(), shared.open_again().await);
    let spec = tabby_db::RateBucketSpec {
        capacity: 10.0,
        initial: 10.0,
        per_second: 1.0 / 30.0,
    };
    let key = "sign-in:a@example.com";
    for i in 0..10 {
        let db = if i % 2 == 0 { &a } else { &b };
        assert!(
            db.take_rate_token(key, spec, 1_000).await.unwrap(),
            "attempt {i}"
        );
    }
    assert!(!a.take_rate_token(key, spec, 1_000).await.unwrap());
    assert!(!b.take_rate_token(key, spec, 1_000).await.unwrap());
    assert!(
        b.take_rate_token("sign-in:other@example.com", spec, 1_000)
            .await
            .unwrap()
    );
    a.give_rate_token(key, spec, 1_000).await.unwrap();
    assert!(
        b.take_rate_token(key, spec, 1_000).await.unwrap(),
        "refunded"
    );
    assert!(!a.take_rate_token(key, spec, 1_000).await.unwrap());
    assert!(
        a.take_rate_token(key, spec, 31_000).await.unwrap(),
        "30 s refill one"
    );
    assert!(!a.take_rate_token(key, spec, 31_000).await.unwrap());
    // Concurrent takes never hand out more than the bucket holds.
    let racers: Vec<_> = (0..12)
        .map(|i| {
            let db = if i % 2 == 0 { a.clone() } else { b.clone() };
            tokio::spawn(async move { db.take_rate_token("race", spec, 5_000).await.unwrap() })
        })
        .collect();
    let mut granted = 0;
    for racer in racers {
        granted += usize::from(racer.await.unwrap());
    }
    assert_eq!(granted, 10);
    // "other" was last touched at 1 s; the key at 31 s and "race" at 5 s.
    assert_eq!(a.delete_idle_rate_buckets(4_000).await.unwrap(), 1);
    assert_eq!(a.delete_idle_rate_buckets(4_000).await.unwrap(), 0);
    assert_eq!(a.delete_idle_rate_buckets(40_000).await.unwrap(), 2);
}
