//! The one error type of the service layer and how it reaches GraphQL clients.
//!
//! Every error becomes a GraphQL `FieldError`. Authorization failures carry
//! `extensions.code` (`UNAUTHORIZED`, `FORBIDDEN`, `NOT_FOUND`) as upstream Tabby does; invalid
//! arguments carry the message "Invalid input parameters" and
//! `extensions["validation-errors"].errors = [{path, message}]` so that a form can show each
//! message next to its field. Internal failures are logged and answered with a generic message
//! (SQL text never reaches a client).

use juniper::{FieldError, IntoFieldError, ScalarValue, graphql_value};
use tabby_db::DbError;

pub type Result<T, E = CoreError> = std::result::Result<T, E>;

/// One invalid argument: the input field's path (e.g. `email`, `password1`) and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ValidationError {
    pub path: String,
    pub message: String,
}

#[derive(Debug, thiserror::Error)]
pub enum CoreError {
    /// No valid credentials, or credentials that may not be used here.
    #[error("{0}")]
    Unauthorized(&'static str),
    /// Authenticated, but not allowed.
    #[error("{0}")]
    Forbidden(&'static str),
    #[error("{0}")]
    NotFound(&'static str),
    /// Arguments that fail validation, with the path of each offending field.
    #[error("Invalid input parameters")]
    InvalidInput(Vec<ValidationError>),
    /// A request that cannot be carried out, with a message meant for the user
    /// (e.g. "Invalid email address or password").
    #[error("{0}")]
    Rejected(String),
    /// Too many attempts; try again later.
    #[error("{0}")]
    TooManyRequests(String),
    #[error("internal error: {0:#}")]
    Other(#[from] anyhow::Error),
}

/// The field paths of a validation error (empty for `Ok`), for tests.
#[cfg(test)]
pub(crate) fn invalid_paths(result: Result<()>) -> Vec<String> {
    match result {
        Ok(()) => vec![],
        Err(CoreError::InvalidInput(errors)) => errors.into_iter().map(|e| e.path).collect(),
        Err(e) => panic!("not a validation error: {e}"),
    }
}

impl CoreError {
    /// A validation error on one field.
    pub fn invalid(path: &str, message: impl Into<String>) -> Self {
        CoreError::InvalidInput(vec![ValidationError {
            path: path.to_string(),
            message: message.into(),
        }])
    }

    /// `Ok` when no validation failed, else `InvalidInput` with every failure.
    pub fn check(errors: Vec<ValidationError>) -> Result<()> {
        if errors.is_empty() {
            Ok(())
        } else {
            Err(CoreError::InvalidInput(errors))
        }
    }

    /// Maps a storage error, turning "row not found" into NOT_FOUND with this message.
    pub fn not_found_as(message: &'static str) -> impl Fn(DbError) -> CoreError {
        move |e| match e {
            DbError::NotFound { .. } => CoreError::NotFound(message),
            other => other.into(),
        }
    }

    fn code(&self) -> Option<&'static str> {
        match self {
            CoreError::Unauthorized(_) => Some("UNAUTHORIZED"),
            CoreError::Forbidden(_) => Some("FORBIDDEN"),
            CoreError::NotFound(_) => Some("NOT_FOUND"),
            CoreError::TooManyRequests(_) => Some("TOO_MANY_REQUESTS"),
            _ => None,
        }
    }
}

impl From<DbError> for CoreError {
    fn from(err: DbError) -> Self {
        match err {
            DbError::AlreadyExists { what } => {
                CoreError::Rejected(format!("{what} already exists"))
            }
            DbError::NotFound { what } => CoreError::Rejected(format!("{what} not found")),
            DbError::InvalidPagination(message) => CoreError::Rejected(message.to_string()),
            other => CoreError::Other(other.into()),
        }
    }
}

impl<S: ScalarValue> IntoFieldError<S> for CoreError {
    fn into_field_error(self) -> FieldError<S> {
        if let Some(code) = self.code() {
            return FieldError::new(self, graphql_value!({ "code": code }));
        }
        match self {
            CoreError::InvalidInput(errors) => {
                let errors: Vec<juniper::Value<S>> = errors
                    .into_iter()
                    .map(|e| {
                        let mut object = juniper::Object::with_capacity(2);
                        object.add_field("path", juniper::Value::scalar(e.path));
                        object.add_field("message", juniper::Value::scalar(e.message));
                        juniper::Value::Object(object)
                    })
                    .collect();
                let mut inner = juniper::Object::with_capacity(1);
                inner.add_field("errors", juniper::Value::List(errors));
                let mut extensions = juniper::Object::with_capacity(1);
                extensions.add_field("validation-errors", juniper::Value::Object(inner));
                FieldError::new(
                    "Invalid input parameters",
                    juniper::Value::Object(extensions),
                )
            }
            CoreError::Other(err) => {
                tracing::error!("request failed: {err:#}");
                FieldError::new("Internal server error", juniper::Value::null())
            }
            other => FieldError::new(other, juniper::Value::null()),
        }
    }
}
