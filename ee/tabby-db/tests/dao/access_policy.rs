use tabby_db::{DbError, Revoked};

use crate::{db, user};

fn ids(list: &[&str]) -> Vec<String> {
    list.iter().map(|s| s.to_string()).collect()
}

#[tokio::test]
async fn user_groups_crud() {
    let db = db().await;
    let eng = db.create_user_group("eng").await.unwrap();
    let design = db.create_user_group("design").await.unwrap();
    let names: Vec<String> = db
        .list_user_groups()
        .await
        .unwrap()
        .into_iter()
        .map(|g| g.name)
        .collect();
    assert_eq!(names, ["design", "eng"]);
    assert_eq!(db.get_user_group(eng).await.unwrap().unwrap().name, "eng");
    assert!(matches!(
        db.create_user_group("eng").await,
        Err(DbError::AlreadyExists {
            what: "a user group with this name"
        })
    ));
    db.delete_user_group(design).await.unwrap();
    assert_eq!(db.get_user_group(design).await.unwrap(), None);
    assert!(matches!(
        db.delete_user_group(design).await,
        Err(DbError::NotFound { what: "user group" })
    ));
}

#[tokio::test]
async fn memberships_upsert_list_and_delete() {
    let db = db().await;
    let a = user(&db, "a@example.com").await;
    let b = user(&db, "b@example.com").await;
    let eng = db.create_user_group("eng").await.unwrap();
    let ops = db.create_user_group("ops").await.unwrap();

    db.upsert_user_group_membership(a, eng, false)
        .await
        .unwrap();
    db.upsert_user_group_membership(b, eng, true).await.unwrap();
    db.upsert_user_group_membership(a, ops, false)
        .await
        .unwrap();
    // Upserting again changes the role instead of adding a row.
    db.upsert_user_group_membership(a, eng, true).await.unwrap();

    let members = db.list_user_group_memberships(eng).await.unwrap();
    let summary: Vec<(i64, bool)> = members
        .iter()
        .map(|m| (m.user_id, m.is_group_admin))
        .collect();
    assert_eq!(summary, [(a, true), (b, true)]);
    let of_a: Vec<i64> = db
        .list_user_group_memberships_of_user(a)
        .await
        .unwrap()
        .into_iter()
        .map(|m| m.user_group_id)
        .collect();
    assert_eq!(of_a, [eng, ops]);

    db.delete_user_group_membership(a, eng).await.unwrap();
    assert!(matches!(
        db.delete_user_group_membership(a, eng).await,
        Err(DbError::NotFound {
            what: "user group membership"
        })
    ));
    assert_eq!(db.list_user_group_memberships(eng).await.unwrap().len(), 1);

    for (user, group) in [(99, eng), (a, 99)] {
        assert!(matches!(
            db.upsert_user_group_membership(user, group, false).await,
            Err(DbError::NotFound {
                what: "user or user group"
            })
        ));
    }
}

#[tokio::test]
async fn read_access_public_member_non_member_admin() {
    let db = db().await;
    let admin = db
        .create_user("admin@example.com", None, true, None)
        .await
        .unwrap();
    let member = user(&db, "member@example.com").await;
    let outsider = user(&db, "outsider@example.com").await;
    let eng = db.create_user_group("eng").await.unwrap();
    let empty = db.create_user_group("empty").await.unwrap();
    db.upsert_user_group_membership(member, eng, false)
        .await
        .unwrap();

    db.grant_source_id_read_access("git:private", eng)
        .await
        .unwrap();
    db.grant_source_id_read_access("git:private", eng)
        .await
        .unwrap(); // idempotent
    db.grant_source_id_read_access("git:nobody", empty)
        .await
        .unwrap();

    let sources = ids(&["git:public", "git:private", "git:nobody", "config:x"]);
    let allowed = |user, is_admin| {
        let db = db.clone();
        let sources = sources.clone();
        async move {
            db.allowed_source_ids(user, is_admin, &sources)
                .await
                .unwrap()
        }
    };
    assert_eq!(
        allowed(member, false).await,
        ids(&["git:public", "git:private", "config:x"])
    );
    assert_eq!(
        allowed(outsider, false).await,
        ids(&["git:public", "config:x"])
    );
    assert_eq!(allowed(admin, true).await, sources);
    // Admins bypass by role, not by membership.
    assert_eq!(
        allowed(admin, false).await,
        ids(&["git:public", "config:x"])
    );

    let granted: Vec<String> = db
        .list_source_id_read_access_user_groups("git:private")
        .await
        .unwrap()
        .into_iter()
        .map(|g| g.name)
        .collect();
    assert_eq!(granted, ["eng"]);
    assert!(
        db.list_source_id_read_access_user_groups("git:public")
            .await
            .unwrap()
            .is_empty()
    );

    // The last grant stays unless the caller asks for the source to become public.
    assert_eq!(
        db.revoke_source_id_read_access("git:private", eng, false)
            .await
            .unwrap(),
        Revoked::LastGrant
    );
    assert_eq!(
        allowed(outsider, false).await,
        ids(&["git:public", "config:x"])
    );
    // With another grant in place, revoking one is fine.
    let ops = db.create_user_group("ops").await.unwrap();
    db.grant_source_id_read_access("git:private", ops)
        .await
        .unwrap();
    assert_eq!(
        db.revoke_source_id_read_access("git:private", ops, false)
            .await
            .unwrap(),
        Revoked::Removed
    );
    // Revoking with `make_public` makes the source public again.
    assert_eq!(
        db.revoke_source_id_read_access("git:private", eng, true)
            .await
            .unwrap(),
        Revoked::Removed
    );
    assert_eq!(
        db.revoke_source_id_read_access("git:private", eng, true)
            .await
            .unwrap(),
        Revoked::NotGranted
    );
    assert_eq!(
        allowed(outsider, false).await,
        ids(&["git:public", "git:private", "config:x"])
    );

    assert!(matches!(
        db.grant_source_id_read_access("git:x", 99).await,
        Err(DbError::NotFound { what: "user group" })
    ));
}

#[tokio::test]
async fn removing_membership_or_group_updates_access() {
    let db = db().await;
    let member = user(&db, "member@example.com").await;
    let eng = db.create_user_group("eng").await.unwrap();
    db.upsert_user_group_membership(member, eng, false)
        .await
        .unwrap();
    db.grant_source_id_read_access("git:1", eng).await.unwrap();
    let sources = ids(&["git:1"]);
    assert_eq!(
        db.allowed_source_ids(member, false, &sources)
            .await
            .unwrap(),
        sources
    );

    db.delete_user_group_membership(member, eng).await.unwrap();
    assert!(
        db.allowed_source_ids(member, false, &sources)
            .await
            .unwrap()
            .is_empty()
    );

    // Deleting the group cascades to its grants: the source is public again.
    db.delete_user_group(eng).await.unwrap();
    assert!(
        db.list_source_id_read_access_user_groups("git:1")
            .await
            .unwrap()
            .is_empty()
    );
    assert_eq!(
        db.allowed_source_ids(member, false, &sources)
            .await
            .unwrap(),
        sources
    );
}

#[tokio::test]
async fn deleting_a_user_removes_their_memberships() {
    let db = db().await;
    let a = user(&db, "a@example.com").await;
    let b = user(&db, "b@example.com").await;
    let eng = db.create_user_group("eng").await.unwrap();
    db.upsert_user_group_membership(a, eng, false)
        .await
        .unwrap();
    db.upsert_user_group_membership(b, eng, false)
        .await
        .unwrap();
    db.delete_user(a).await.unwrap();
    let left: Vec<i64> = db
        .list_user_group_memberships(eng)
        .await
        .unwrap()
        .into_iter()
        .map(|m| m.user_id)
        .collect();
    assert_eq!(left, [b]);
}
