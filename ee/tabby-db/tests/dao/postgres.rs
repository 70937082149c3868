//! Connecting to PostgreSQL: over TLS, verifying the server's certificate against the CA the
//! URL names (`sslmode=verify-full&sslrootcert=…`). Needs the test server of
//! `scripts/postgres.sh` (TABBY_TEST_POSTGRES_URL, and TABBY_TEST_POSTGRES_CA, the certificate
//! it offers for 127.0.0.1); without them it says so and passes.

use tabby_db::DbConn;

#[tokio::test]
async fn postgres_over_tls_verifies_the_server_certificate() {
    let Ok(ca) = std::env::var("TABBY_TEST_POSTGRES_CA") else {
        eprintln!("TABBY_TEST_POSTGRES_CA is not set: TLS to PostgreSQL is not tested");
        return;
    };
    let shared = crate::shared_db().await;
    let url = shared.location();
    assert!(url.starts_with("postgres://"), "{url}");

    let verified = DbConn::connect_postgres(&format!("{url}?sslmode=verify-full&sslrootcert={ca}"))
        .await
        .unwrap();
    assert!(verified.connection_is_encrypted().await.unwrap());
    let plain = DbConn::connect_postgres(&format!("{url}?sslmode=disable"))
        .await
        .unwrap();
    assert!(!plain.connection_is_encrypted().await.unwrap());

    // Without the test CA, the self-signed certificate is not trusted: no connection.
    let err = DbConn::connect_postgres(&format!("{url}?sslmode=verify-full"))
        .await
        .unwrap_err();
    assert!(
        err.to_string().to_lowercase().contains("certificate"),
        "{err}"
    );
}
