//! The one error type of the storage layer.
//!
//! Constraint failures that a user can cause (a duplicate e-mail, a repository name that is
//! taken, a group that no longer exists) become typed variants with a short human name of the
//! thing involved, so that the API layer can turn them into validation messages without
//! parsing SQLite's text. Everything else stays an opaque database error.

use std::path::PathBuf;

/// Result of every storage operation.
pub type DbResult<T> = Result<T, DbError>;

#[derive(Debug, thiserror::Error)]
pub enum DbError {
    /// A UNIQUE constraint rejected the write. `what` names the thing, e.g.
    /// "a user with this email".
    #[error("{what} already exists")]
    AlreadyExists { what: &'static str },

    /// The row to read or change does not exist (or a referenced row is missing).
    #[error("{what} not found")]
    NotFound { what: &'static str },

    /// A single-use secret presented again after it was redeemed.
    #[error("{what} was already used")]
    Reused { what: &'static str },

    /// Pagination arguments that cannot be satisfied (e.g. `first` and `last` together).
    #[error("invalid pagination: {0}")]
    InvalidPagination(&'static str),

    /// The database file or its directory could not be prepared.
    #[error("cannot prepare the database at {}: {source}", path.display())]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },

    /// Applying or validating migrations failed.
    #[error("database migration failed: {0}")]
    Migrate(#[from] sqlx::migrate::MigrateError),

    #[error("cannot copy the database: {0}")]
    Copy(String),

    #[error("database error: {0}")]
    Sqlx(sqlx::Error),
}

impl From<sqlx::Error> for DbError {
    fn from(err: sqlx::Error) -> Self {
        if let sqlx::Error::Database(db) = &err {
            if db.is_unique_violation() {
                // SQLite names the columns in its message; PostgreSQL names the constraint.
                let columns = db
                    .constraint()
                    .and_then(postgres_constraint_columns)
                    .unwrap_or_else(|| db.message());
                return DbError::AlreadyExists {
                    what: unique_constraint_subject(columns),
                };
            }
            if db.is_foreign_key_violation() {
                return DbError::NotFound {
                    what: "referenced record",
                };
            }
        }
        DbError::Sqlx(err)
    }
}

impl DbError {
    /// Names the missing row of a foreign-key failure, for DAOs that know which reference
    /// they wrote (SQLite's message does not say).
    pub(crate) fn missing_reference(self, what: &'static str) -> Self {
        match self {
            DbError::NotFound {
                what: "referenced record",
            } => DbError::NotFound { what },
            other => other,
        }
    }
}

/// Maps SQLite's "UNIQUE constraint failed: table.column[, table.column]" to a readable
/// subject. Unknown constraints fall back to a generic name rather than leaking SQL.
/// The columns of a PostgreSQL unique constraint, in SQLite's words (`table.column, …`), for
/// the constraints a user can run into.
fn postgres_constraint_columns(constraint: &str) -> Option<&'static str> {
    Some(match constraint {
        "users_email_unique" => "users.email",
        "users_auth_token_unique" => "users.auth_token",
        "invitations_email_unique" => "invitations.email",
        "invitations_code_unique" => "invitations.code",
        "refresh_tokens_token_unique" => "refresh_tokens.token",
        "password_reset_code_unique" => "password_reset.code",
        "registration_token_token_unique" => "registration_token.token",
        "repositories_name_unique" => "repositories.name",
        "repositories_git_url_unique" => "repositories.git_url",
        "user_groups_name_unique" => "user_groups.name",
        "user_group_memberships_unique" => {
            "user_group_memberships.user_id, user_group_memberships.user_group_id"
        }
        "source_id_read_access_policies_unique" => {
            "source_id_read_access_policies.source_id, source_id_read_access_policies.user_group_id"
        }
        _ => return None,
    })
}

fn unique_constraint_subject(message: &str) -> &'static str {
    let columns = message
        .strip_prefix("UNIQUE constraint failed: ")
        .unwrap_or(message);
    match columns {
        "users.email" => "a user with this email",
        "users.auth_token" => "a user with this auth token",
        "invitations.email" => "an invitation for this email",
        "invitations.code" => "an invitation with this code",
        "refresh_tokens.token" => "a refresh token with this value",
        "password_reset.code" => "a password reset with this code",
        "registration_token.token" => "a registration token with this value",
        "repositories.name" => "a repository with this name",
        "repositories.git_url" => "a repository with this git URL",
        "user_groups.name" => "a user group with this name",
        "user_group_memberships.user_id, user_group_memberships.user_group_id" => {
            "a membership of this user in this group"
        }
        "source_id_read_access_policies.source_id, source_id_read_access_policies.user_group_id" => {
            "a read access policy for this source and group"
        }
        _ => "a record with these values",
    }
}

/// Turns "no row changed" into `NotFound`.
pub(crate) fn expect_one(rows_affected: u64, what: &'static str) -> DbResult<()> {
    if rows_affected == 0 {
        Err(DbError::NotFound { what })
    } else {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::{postgres_constraint_columns, unique_constraint_subject};

    #[test]
    fn unique_messages_name_the_subject() {
        assert_eq!(
            unique_constraint_subject("UNIQUE constraint failed: users.email"),
            "a user with this email"
        );
        assert_eq!(
            unique_constraint_subject("UNIQUE constraint failed: something.else"),
            "a record with these values"
        );
        assert_eq!(
            postgres_constraint_columns("user_groups_name_unique").map(unique_constraint_subject),
            Some("a user group with this name")
        );
        assert_eq!(postgres_constraint_columns("something_else_unique"), None);
    }
}
