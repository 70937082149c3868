use tabby_db::{DbConn, DbError, Pagination, RepositoryDAO};

use crate::{db, shared_db};

#[tokio::test]
async fn server_setting_defaults_and_updates() {
    let db = db().await;
    let setting = db.read_server_setting().await.unwrap();
    assert_eq!(setting.network_external_url, "http://localhost:8080");
    assert!(!setting.security_disable_client_side_telemetry);
    assert!(!setting.security_disable_password_login);
    assert!(setting.allowed_register_domains().is_empty());
    assert_eq!(setting.billing_enterprise_license, None);
    assert_eq!((setting.branding_logo, setting.branding_icon), (None, None));

    db.update_security_setting(Some("example.com, corp.example ,"), true, true)
        .await
        .unwrap();
    db.update_network_setting("https://tabby.example.com")
        .await
        .unwrap();
    db.update_enterprise_license(Some("license-jwt"))
        .await
        .unwrap();
    db.update_branding_setting(Some("logo-b64"), Some("icon-b64"))
        .await
        .unwrap();
    let setting = db.read_server_setting().await.unwrap();
    assert_eq!(
        setting.allowed_register_domains(),
        ["example.com", "corp.example"]
    );
    assert!(setting.security_disable_client_side_telemetry);
    assert!(setting.security_disable_password_login);
    assert_eq!(setting.network_external_url, "https://tabby.example.com");
    assert_eq!(
        setting.billing_enterprise_license.as_deref(),
        Some("license-jwt")
    );
    assert_eq!(setting.branding_logo.as_deref(), Some("logo-b64"));
    assert_eq!(setting.branding_icon.as_deref(), Some("icon-b64"));

    db.update_enterprise_license(None).await.unwrap();
    db.update_security_setting(None, false, false)
        .await
        .unwrap();
    let setting = db.read_server_setting().await.unwrap();
    assert_eq!(setting.billing_enterprise_license, None);
    assert_eq!(setting.security_allowed_register_domain_list, None);
    assert_eq!(setting.network_external_url, "https://tabby.example.com");
}

#[tokio::test]
async fn jwt_secret_is_created_once_and_survives_restart() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("db.sqlite");
    let db = DbConn::open(&path).await.unwrap();
    let secret = db.get_or_create_jwt_secret().await.unwrap();
    assert_eq!(secret.len(), 64);
    assert!(secret.chars().all(|c| c.is_ascii_hexdigit()));
    assert_eq!(db.get_or_create_jwt_secret().await.unwrap(), secret);
    db.close().await;

    let db = DbConn::open(&path).await.unwrap();
    assert_eq!(db.get_or_create_jwt_secret().await.unwrap(), secret);
    db.close().await;

    let fresh = DbConn::new_in_memory().await.unwrap();
    assert_ne!(fresh.get_or_create_jwt_secret().await.unwrap(), secret);
}

#[tokio::test]
async fn concurrent_first_calls_agree_on_the_jwt_secret() {
    let dir = tempfile::tempdir().unwrap();
    let db = DbConn::open(&dir.path().join("db.sqlite")).await.unwrap();
    let calls: Vec<_> = (0..8)
        .map(|_| {
            let db = db.clone();
            tokio::spawn(async move { db.get_or_create_jwt_secret().await.unwrap() })
        })
        .collect();
    let mut secrets = Vec::new();
    for call in calls {
        secrets.push(call.await.unwrap());
    }
    secrets.dedup();
    assert_eq!(secrets.len(), 1);
    db.close().await;
}

#[tokio::test]
async fn repositories_crud() {
    let db = db().await;
    let refs = vec!["main".to_owned(), "refs/tags/v1".to_owned()];
    let id = db
        .create_repository("tabby", "https://github.com/TabbyML/tabby", &refs)
        .await
        .unwrap();
    let repo = db.get_repository(id).await.unwrap().unwrap();
    assert_eq!(
        repo,
        RepositoryDAO {
            id,
            name: "tabby".into(),
            git_url: "https://github.com/TabbyML/tabby".into(),
            refs: refs.clone(),
        }
    );
    assert_eq!(
        db.get_repository_by_git_url("https://github.com/TabbyML/tabby")
            .await
            .unwrap(),
        Some(repo)
    );

    let name_taken = db
        .create_repository("tabby", "https://example.com/other", &[])
        .await
        .unwrap_err();
    assert!(matches!(
        name_taken,
        DbError::AlreadyExists {
            what: "a repository with this name"
        }
    ));
    let url_taken = db
        .create_repository("other", "https://github.com/TabbyML/tabby", &[])
        .await
        .unwrap_err();
    assert!(matches!(
        url_taken,
        DbError::AlreadyExists {
            what: "a repository with this git URL"
        }
    ));

    let second = db
        .create_repository("other", "https://example.com/other", &[])
        .await
        .unwrap();
    assert!(
        db.get_repository(second)
            .await
            .unwrap()
            .unwrap()
            .refs
            .is_empty()
    );
    db.update_repository_refs(second, &["dev".to_owned()])
        .await
        .unwrap();
    db.update_repository(second, "renamed", "https://example.com/renamed")
        .await
        .unwrap();
    let updated = db.get_repository(second).await.unwrap().unwrap();
    assert_eq!(
        (
            updated.name.as_str(),
            updated.git_url.as_str(),
            updated.refs
        ),
        (
            "renamed",
            "https://example.com/renamed",
            vec!["dev".to_owned()]
        )
    );
    assert!(matches!(
        db.update_repository(second, "tabby", "https://example.com/x")
            .await,
        Err(DbError::AlreadyExists { .. })
    ));

    let names: Vec<String> = db
        .list_repositories(Pagination::all())
        .await
        .unwrap()
        .into_iter()
        .map(|r| r.name)
        .collect();
    assert_eq!(names, ["tabby", "renamed"]);
    let page = Pagination::relay(Some(id), None, Some(10), None).unwrap();
    assert_eq!(db.list_repositories(page).await.unwrap().len(), 1);

    db.delete_repository(id).await.unwrap();
    assert_eq!(db.get_repository(id).await.unwrap(), None);
    for result in [
        db.delete_repository(id).await,
        db.update_repository_refs(id, &[]).await,
        db.update_repository(id, "x", "y").await,
    ] {
        assert!(matches!(
            result,
            Err(DbError::NotFound { what: "repository" })
        ));
    }
}

#[tokio::test]
async fn encryption_secret_is_created_once_and_differs_from_the_jwt_secret() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("db.sqlite");
    let db = DbConn::open(&path).await.unwrap();
    let secret = db.get_or_create_encryption_secret().await.unwrap();
    assert_eq!(secret.len(), 64);
    assert_ne!(secret, db.get_or_create_jwt_secret().await.unwrap());
    db.close().await;
    let db = DbConn::open(&path).await.unwrap();
    assert_eq!(db.get_or_create_encryption_secret().await.unwrap(), secret);
}

fn smtp(password: Option<&str>) -> tabby_db::EmailSettingDAO {
    tabby_db::EmailSettingDAO {
        smtp_username: "tabby".into(),
        smtp_password: password.map(Into::into),
        smtp_server: "smtp.example.com".into(),
        smtp_port: 587,
        from_address: "tabby@example.com".into(),
        encryption: "starttls".into(),
        auth_method: "plain".into(),
    }
}

#[tokio::test]
async fn email_setting_keeps_its_password_unless_given_a_new_one() {
    let db = DbConn::new_in_memory().await.unwrap();
    assert_eq!(db.read_email_setting().await.unwrap(), None);
    db.update_email_setting(&smtp(Some("sealed-1")))
        .await
        .unwrap();
    let mut changed = smtp(None);
    changed.smtp_port = 465;
    db.update_email_setting(&changed).await.unwrap();
    let stored = db.read_email_setting().await.unwrap().unwrap();
    assert_eq!(stored.smtp_port, 465);
    assert_eq!(stored.smtp_password.as_deref(), Some("sealed-1"));
    db.update_email_setting(&smtp(Some("sealed-2")))
        .await
        .unwrap();
    assert_eq!(
        db.read_email_setting()
            .await
            .unwrap()
            .unwrap()
            .smtp_password
            .as_deref(),
        Some("sealed-2")
    );
    let mut bad = smtp(None);
    bad.encryption = "tls1.0".into();
    assert!(
        db.update_email_setting(&bad).await.is_err(),
        "checked by the schema"
    );
    assert!(db.delete_email_setting().await.unwrap());
    assert!(!db.delete_email_setting().await.unwrap());
}

#[tokio::test]
async fn outbox_claims_retries_and_gives_up() {
    let db = DbConn::new_in_memory().await.unwrap();
    assert_eq!(db.seconds_to_next_email().await.unwrap(), None);
    let id = db
        .enqueue_email("invitation", "a@example.com", "Hi", "link", 2)
        .await
        .unwrap();
    assert_eq!(db.seconds_to_next_email().await.unwrap(), Some(0.0));
    let claimed = db.claim_due_email(60).await.unwrap().unwrap();
    assert_eq!((claimed.id, claimed.attempts), (id, 1));
    assert!(
        db.claim_due_email(60).await.unwrap().is_none(),
        "leased: not claimed twice"
    );
    db.mark_email_attempt_failed(id, "connection refused", Some(0))
        .await
        .unwrap();
    let stats = db.email_outbox_stats().await.unwrap();
    assert_eq!(stats.pending, 1);
    assert_eq!(stats.last_error.as_deref(), Some("connection refused"));
    let again = db.claim_due_email(60).await.unwrap().unwrap();
    assert_eq!(again.attempts, 2);
    db.mark_email_attempt_failed(id, "still refused", None)
        .await
        .unwrap();
    let given_up = db.get_email(id).await.unwrap().unwrap();
    assert!(given_up.failed_at.is_some());
    assert_eq!(given_up.body, None, "the link is not kept");
    let stats = db.email_outbox_stats().await.unwrap();
    assert_eq!((stats.pending, stats.failed_recently), (0, 1));
    assert!(db.claim_due_email(60).await.unwrap().is_none());

    let sent = db
        .enqueue_email("test", "b@example.com", "Test", "body", 1)
        .await
        .unwrap();
    db.claim_due_email(60).await.unwrap().unwrap();
    db.mark_email_sent(sent).await.unwrap();
    let row = db.get_email(sent).await.unwrap().unwrap();
    assert!(row.sent_at.is_some() && row.body.is_none());
    // Timestamps have whole seconds, so "older than 0 days" races the clock: ask for a day.
    assert_eq!(
        db.delete_emails_older_than(1).await.unwrap(),
        0,
        "created just now"
    );
}

#[tokio::test]
async fn finished_mail_older_than_the_retention_is_deleted() {
    let shared = shared_db().await;
    let db = &shared.db;
    let pending = db
        .enqueue_email("test", "a@example.com", "Hi", "body", 1)
        .await
        .unwrap();
    let sent = db
        .enqueue_email("test", "b@example.com", "Hi", "body", 1)
        .await
        .unwrap();
    let claimed = db.claim_due_email(60).await.unwrap().unwrap();
    let (sent, pending) = if claimed.id == sent {
        (sent, pending)
    } else {
        (pending, sent)
    };
    db.mark_email_sent(sent).await.unwrap();
    assert_eq!(
        shared
            .exec("UPDATE email_outbox SET created_at = DATETIME('now', '-3 days')")
            .await,
        2
    );
    assert_eq!(
        db.delete_emails_older_than(2).await.unwrap(),
        1,
        "the sent one"
    );
    assert!(db.get_email(sent).await.unwrap().is_none());
    assert!(
        db.get_email(pending).await.unwrap().is_some(),
        "unsent mail is kept, however old"
    );
}

#[tokio::test]
async fn ldap_credential_and_external_sign_ins() {
    let db = DbConn::new_in_memory().await.unwrap();
    assert_eq!(db.read_ldap_credential().await.unwrap(), None);
    let now = chrono::Utc::now();
    let mut value = tabby_db::LdapCredentialDAO {
        host: "ldap.example.com".into(),
        port: 389,
        bind_dn: "cn=tabby,dc=example,dc=com".into(),
        bind_password: Some("sealed-1".into()),
        base_dn: "dc=example,dc=com".into(),
        user_filter: "(uid=%s)".into(),
        encryption: "starttls".into(),
        skip_tls_verify: false,
        email_attribute: "mail".into(),
        name_attribute: Some("cn".into()),
        created_at: now,
        updated_at: now,
    };
    db.update_ldap_credential(&value).await.unwrap();
    value.bind_password = None;
    value.port = 636;
    db.update_ldap_credential(&value).await.unwrap();
    let stored = db.read_ldap_credential().await.unwrap().unwrap();
    assert_eq!(stored.port, 636);
    assert_eq!(stored.bind_password.as_deref(), Some("sealed-1"), "kept");
    value.encryption = "ssl".into();
    assert!(db.update_ldap_credential(&value).await.is_err());

    let admin = db
        .create_user("admin@example.com", None, true, None)
        .await
        .unwrap();
    let member = db
        .create_user("member@example.com", None, false, None)
        .await
        .unwrap();
    db.record_external_sign_in(member, "ldap").await.unwrap();
    assert!(
        !db.admin_signed_in_with("ldap").await.unwrap(),
        "a member only"
    );
    db.record_external_sign_in(admin, "ldap").await.unwrap();
    assert!(db.admin_signed_in_with("ldap").await.unwrap());
    db.update_user_active(admin, false).await.unwrap();
    assert!(!db.admin_signed_in_with("ldap").await.unwrap(), "inactive");
    assert!(db.delete_ldap_credential().await.unwrap());
}

#[tokio::test]
async fn oauth_credentials_per_provider() {
    let db = DbConn::new_in_memory().await.unwrap();
    assert!(db.list_oauth_providers().await.unwrap().is_empty());
    db.update_oauth_credential(
        "oidc",
        "id-1",
        Some("sealed-1"),
        Some("https://idp.example"),
    )
    .await
    .unwrap();
    db.update_oauth_credential("github", "gh", Some("sealed-gh"), None)
        .await
        .unwrap();
    db.update_oauth_credential("oidc", "id-2", None, Some("https://idp2.example"))
        .await
        .unwrap();
    let oidc = db.read_oauth_credential("oidc").await.unwrap().unwrap();
    assert_eq!(oidc.client_id, "id-2");
    assert_eq!(oidc.client_secret, "sealed-1", "kept");
    assert_eq!(oidc.config_url.as_deref(), Some("https://idp2.example"));
    assert_eq!(db.list_oauth_providers().await.unwrap(), ["github", "oidc"]);
    assert!(
        db.update_oauth_credential("myspace", "x", Some("y"), None)
            .await
            .is_err()
    );
    assert!(db.delete_oauth_credential("oidc").await.unwrap());
    assert!(!db.delete_oauth_credential("oidc").await.unwrap());
}

#[tokio::test]
async fn integrations_sync_their_provided_repositories() {
    let db = DbConn::new_in_memory().await.unwrap();
    let id = db
        .create_integration(
            "gitlab_self_hosted",
            "GitLab",
            "sealed-1",
            Some("https://gl.example"),
        )
        .await
        .unwrap();
    let repo = |v: &str, name: &str| tabby_db::VendorRepository {
        vendor_id: v.into(),
        name: name.into(),
        git_url: format!("https://gl.example/{name}.git"),
    };
    let counts = db
        .sync_provided_repositories(id, &[repo("1", "g/a"), repo("2", "g/sub/b")])
        .await
        .unwrap();
    assert_eq!((counts.added, counts.updated, counts.removed), (2, 0, 0));
    let counts = db
        .sync_provided_repositories(id, &[repo("1", "g/renamed"), repo("3", "g/c")])
        .await
        .unwrap();
    assert_eq!((counts.added, counts.updated, counts.removed), (1, 1, 1));
    let listed = db
        .list_provided_repositories(&[id], None, None, Pagination::all())
        .await
        .unwrap();
    let names: Vec<&str> = listed.iter().map(|r| r.name.as_str()).collect();
    assert_eq!(names, ["g/renamed", "g/c"]);
    let integration = db.get_integration(id).await.unwrap().unwrap();
    assert!(integration.synced && integration.error.is_none());
    db.set_integration_error(id, "401").await.unwrap();
    db.update_integration(
        id,
        "gitlab_self_hosted",
        "GL",
        None,
        Some("https://gl.example"),
    )
    .await
    .unwrap();
    let integration = db.get_integration(id).await.unwrap().unwrap();
    assert_eq!(integration.access_token, "sealed-1", "kept");
    assert_eq!(integration.error, None, "cleared for the next sync");
    assert!(
        db.create_integration("bitbucket", "x", "y", None)
            .await
            .is_err(),
        "checked by the schema"
    );
    db.delete_integration(id).await.unwrap();
    assert!(
        db.list_provided_repositories(&[], None, None, Pagination::all())
            .await
            .unwrap()
            .is_empty(),
        "cascade"
    );
}

#[tokio::test]
async fn provided_repositories_are_activated_with_refs_and_a_docs_cursor() {
    let db = DbConn::new_in_memory().await.unwrap();
    let id = db
        .create_integration("github", "GitHub", "sealed", None)
        .await
        .unwrap();
    db.sync_provided_repositories(
        id,
        &[tabby_db::VendorRepository {
            vendor_id: "7".into(),
            name: "o/r".into(),
            git_url: "https://github.com/o/r.git".into(),
        }],
    )
    .await
    .unwrap();
    let repo = db
        .list_provided_repositories(&[id], None, None, Pagination::all())
        .await
        .unwrap()
        .remove(0);
    assert!(!repo.active && repo.refs.is_empty() && repo.docs_synced_at.is_none());
    assert!(
        db.list_active_provided_repositories()
            .await
            .unwrap()
            .is_empty()
    );

    // The cursor is only kept while the repository is active.
    let at = chrono::Utc::now();
    db.set_provided_repository_docs_synced(repo.id, at)
        .await
        .unwrap();
    assert!(
        db.get_provided_repository(repo.id)
            .await
            .unwrap()
            .unwrap()
            .0
            .docs_synced_at
            .is_none()
    );

    db.update_provided_repository_active(repo.id, true, Some(&["main".to_string()]))
        .await
        .unwrap();
    db.set_provided_repository_docs_synced(repo.id, at)
        .await
        .unwrap();
    let (stored, integration) = db.get_provided_repository(repo.id).await.unwrap().unwrap();
    assert!(stored.active);
    assert_eq!(stored.refs, ["main"]);
    assert_eq!(
        stored.docs_synced_at.map(|t| t.timestamp()),
        Some(at.timestamp())
    );
    assert_eq!(integration.id, id);
    let active = db.list_active_provided_repositories().await.unwrap();
    assert_eq!(active.len(), 1);
    assert_eq!(active[0].1, "github");

    // A re-sync keeps activation and refs; refs: None keeps them on update.
    db.sync_provided_repositories(
        id,
        &[tabby_db::VendorRepository {
            vendor_id: "7".into(),
            name: "o/renamed".into(),
            git_url: "https://github.com/o/renamed.git".into(),
        }],
    )
    .await
    .unwrap();
    db.update_provided_repository_active(repo.id, true, None)
        .await
        .unwrap();
    let (stored, _) = db.get_provided_repository(repo.id).await.unwrap().unwrap();
    assert!(stored.active && stored.refs == ["main"] && stored.docs_synced_at.is_some());

    db.update_provided_repository_refs(repo.id, &["dev".to_string()])
        .await
        .unwrap();
    db.update_provided_repository_active(repo.id, false, None)
        .await
        .unwrap();
    let (stored, _) = db.get_provided_repository(repo.id).await.unwrap().unwrap();
    assert!(!stored.active && stored.refs == ["dev"] && stored.docs_synced_at.is_none());

    assert!(
        db.update_provided_repository_active(9999, true, None)
            .await
            .is_err()
    );
    assert!(db.get_provided_repository(9999).await.unwrap().is_none());
}
