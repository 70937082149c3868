use tabby_db::{DbConn, DbError, OWNER_USER_ID, Pagination};

use crate::{db, user};

#[tokio::test]
async fn create_and_read_users() {
    let db = db().await;
    let owner = db
        .create_user("Owner@Example.com", Some("hash"), true, Some("Owner"))
        .await
        .unwrap();
    assert_eq!(owner, OWNER_USER_ID);

    let row = db.get_user(owner).await.unwrap().unwrap();
    assert!(row.is_owner() && row.is_admin && row.active);
    assert_eq!(row.email, "Owner@Example.com");
    assert_eq!(row.name.as_deref(), Some("Owner"));
    assert_eq!(row.password_encrypted.as_deref(), Some("hash"));
    let hex = row.auth_token.strip_prefix("auth_").unwrap();
    assert_eq!(hex.len(), 32);
    assert!(
        hex.chars()
            .all(|c| c.is_ascii_digit() || c.is_ascii_lowercase())
    );

    // E-mail lookup is case-insensitive; the auth token finds its user.
    let by_email = db.get_user_by_email("owner@EXAMPLE.com").await.unwrap();
    assert_eq!(by_email.as_ref(), Some(&row));
    let by_token = db.get_user_by_auth_token(&row.auth_token).await.unwrap();
    assert_eq!(by_token, Some(row));
    assert_eq!(db.get_user_by_auth_token("auth_nope").await.unwrap(), None);
    assert_eq!(db.get_user(42).await.unwrap(), None);

    let sso = db
        .create_user("sso@example.com", None, false, None)
        .await
        .unwrap();
    let sso = db.get_user(sso).await.unwrap().unwrap();
    assert!(!sso.is_owner() && !sso.is_admin);
    assert_eq!((sso.password_encrypted, sso.name), (None, None));
}

#[tokio::test]
async fn duplicate_email_is_a_typed_error_whatever_the_case() {
    let db = db().await;
    user(&db, "a@example.com").await;
    let err = db
        .create_user("A@EXAMPLE.COM", None, false, None)
        .await
        .unwrap_err();
    assert!(
        matches!(
            err,
            DbError::AlreadyExists {
                what: "a user with this email"
            }
        ),
        "{err:?}"
    );
    assert_eq!(err.to_string(), "a user with this email already exists");
}

#[tokio::test]
async fn updates_change_one_user_and_report_missing_ones() {
    let db = db().await;
    let id = user(&db, "a@example.com").await;
    let other = user(&db, "b@example.com").await;

    db.update_user_active(id, false).await.unwrap();
    db.update_user_role(id, true).await.unwrap();
    db.update_user_name(id, "Alice").await.unwrap();
    db.update_user_password(id, Some("new-hash")).await.unwrap();
    let row = db.get_user(id).await.unwrap().unwrap();
    assert!(!row.active && row.is_admin);
    assert_eq!(row.name.as_deref(), Some("Alice"));
    assert_eq!(row.password_encrypted.as_deref(), Some("new-hash"));
    assert!(row.updated_at >= row.created_at);
    db.update_user_password(id, None).await.unwrap();
    assert_eq!(
        db.get_user(id).await.unwrap().unwrap().password_encrypted,
        None
    );

    let untouched = db.get_user(other).await.unwrap().unwrap();
    assert!(untouched.active && !untouched.is_admin && untouched.name.is_none());

    for result in [
        db.update_user_active(99, true).await,
        db.update_user_role(99, true).await,
        db.update_user_name(99, "x").await,
        db.update_user_password(99, None).await,
        db.update_user_avatar(99, None).await,
        db.delete_user(99).await,
    ] {
        assert!(
            matches!(result, Err(DbError::NotFound { what: "user" })),
            "{result:?}"
        );
    }
}

#[tokio::test]
async fn reset_auth_token_replaces_the_old_one() {
    let db = db().await;
    let id = user(&db, "a@example.com").await;
    let old = db.get_user(id).await.unwrap().unwrap().auth_token;
    let new = db.reset_user_auth_token(id).await.unwrap();
    assert_ne!(old, new);
    assert!(new.starts_with("auth_") && new.len() == 37);
    assert_eq!(db.get_user_by_auth_token(&old).await.unwrap(), None);
    assert_eq!(
        db.get_user_by_auth_token(&new).await.unwrap().unwrap().id,
        id
    );
    assert!(matches!(
        db.reset_user_auth_token(99).await,
        Err(DbError::NotFound { .. })
    ));
}

#[tokio::test]
async fn avatar_round_trip() {
    let db = db().await;
    let id = user(&db, "a@example.com").await;
    assert_eq!(db.get_user_avatar(id).await.unwrap(), None);
    db.update_user_avatar(id, Some(&[0x89, b'P', b'N', b'G', 0]))
        .await
        .unwrap();
    assert_eq!(
        db.get_user_avatar(id).await.unwrap().as_deref(),
        Some(&[0x89, b'P', b'N', b'G', 0][..])
    );
    db.update_user_avatar(id, None).await.unwrap();
    assert_eq!(db.get_user_avatar(id).await.unwrap(), None);
    assert!(matches!(
        db.get_user_avatar(99).await,
        Err(DbError::NotFound { what: "user" })
    ));
}

#[tokio::test]
async fn counts_and_delete() {
    let db = db().await;
    let a = user(&db, "a@example.com").await;
    let b = user(&db, "b@example.com").await;
    db.update_user_active(b, false).await.unwrap();
    assert_eq!(db.count_users().await.unwrap(), 2);
    assert_eq!(db.count_active_users().await.unwrap(), 1);
    db.delete_user(a).await.unwrap();
    assert_eq!(db.get_user(a).await.unwrap(), None);
    assert_eq!(db.count_users().await.unwrap(), 1);
    // Ids are never reused.
    assert!(user(&db, "c@example.com").await > b);
}

#[tokio::test]
async fn list_users_pages_forwards_and_backwards() {
    let db = db().await;
    let mut ids = Vec::new();
    for i in 0..5 {
        ids.push(user(&db, &format!("u{i}@example.com")).await);
    }
    let list = |ids: Vec<i64>, page: Pagination| {
        let db = db.clone();
        async move {
            db.list_users(&ids, page)
                .await
                .unwrap()
                .into_iter()
                .map(|u| u.id)
                .collect::<Vec<_>>()
        }
    };
    assert_eq!(list(vec![], Pagination::all()).await, ids);
    let first_two = Pagination::relay(None, None, Some(2), None).unwrap();
    assert_eq!(list(vec![], first_two).await, ids[..2]);
    let after_second = Pagination::relay(Some(ids[1]), None, Some(2), None).unwrap();
    assert_eq!(list(vec![], after_second).await, ids[2..4]);
    let last_two = Pagination::relay(None, None, None, Some(2)).unwrap();
    assert_eq!(list(vec![], last_two).await, ids[3..]);
    let before_fourth = Pagination::relay(None, Some(ids[3]), None, Some(2)).unwrap();
    assert_eq!(list(vec![], before_fourth).await, ids[1..3]);
    let between = Pagination::relay(Some(ids[0]), Some(ids[4]), None, None).unwrap();
    assert_eq!(list(vec![], between).await, ids[1..4]);
    let chosen = vec![ids[4], ids[0]];
    assert_eq!(list(chosen, Pagination::all()).await, [ids[0], ids[4]]);
}

#[tokio::test]
async fn only_the_first_account_becomes_owner_even_when_racing() {
    let dir = tempfile::tempdir().unwrap();
    let db = DbConn::open(&dir.path().join("db.sqlite")).await.unwrap();
    let attempts = (0..8).map(|i| {
        let db = db.clone();
        tokio::spawn(async move {
            db.create_owner(&format!("u{i}@example.com"), Some("hash"), None)
                .await
                .unwrap()
        })
    });
    let created: Vec<i64> = futures_join(attempts).await.into_iter().flatten().collect();
    assert_eq!(created, [OWNER_USER_ID], "exactly one owner");
    let owner = db.get_user(OWNER_USER_ID).await.unwrap().unwrap();
    assert!(owner.is_admin && owner.is_owner());
    assert_eq!(db.count_users().await.unwrap(), 1);
}

async fn futures_join<T>(handles: impl Iterator<Item = tokio::task::JoinHandle<T>>) -> Vec<T> {
    let mut out = Vec::new();
    for handle in handles {
        out.push(handle.await.unwrap());
    }
    out
}
