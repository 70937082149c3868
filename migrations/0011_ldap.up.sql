-- LDAP sign-in: a single row. `bind_password` (the service account's) is sealed like the SMTP
-- password and never returned. `user_filter` holds `%s` where the escaped user id goes.
CREATE TABLE ldap_credential (
    id              INTEGER PRIMARY KEY CHECK (id = 1),
    host            TEXT NOT NULL,
    port            INTEGER NOT NULL,
    bind_dn         TEXT NOT NULL,
    bind_password   TEXT,
    base_dn         TEXT NOT NULL,
    user_filter     TEXT NOT NULL,
    encryption      TEXT NOT NULL CHECK (encryption IN ('none', 'starttls', 'ldaps')),
    skip_tls_verify BOOLEAN NOT NULL DEFAULT FALSE,
    email_attribute TEXT NOT NULL,
    name_attribute  TEXT,
    created_at      TIMESTAMP NOT NULL DEFAULT (DATETIME('now')),
    updated_at      TIMESTAMP NOT NULL DEFAULT (DATETIME('now'))
);

-- The last sign-in of a user through a method other than the password (`ldap`), so that
-- password sign-in is only turned off while another method has worked for an admin.
ALTER TABLE users ADD COLUMN external_sign_in_method TEXT;
ALTER TABLE users ADD COLUMN external_sign_in_at TIMESTAMP;
