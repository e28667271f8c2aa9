//! Errors of the server, typed and classified: each maps to a stable API code and HTTP status,
//! and says what to do. Messages never carry secrets (they are scrubbed by [`crate::mask`]
//! before they leave the process).

use axum::http::StatusCode;

#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    #[error("configuration: {0}")]
    Config(String),
    #[error("{0}")]
    BadRequest(String),
    #[error("changefeed {0} does not exist; list changefeeds with `sluice cli changefeed list`")]
    ChangefeedNotFound(String),
    #[error("changefeed {0} already exists; pick another id or remove it first")]
    ChangefeedExists(String),
    #[error("capture {0} does not exist; list captures with `sluice cli capture list`")]
    CaptureNotFound(String),
    /// The sink URI is malformed or the sink it names cannot be used; the text says which (the
    /// sink's own message, which already names the URI).
    #[error("{0}")]
    InvalidSinkUri(String),
    #[error("invalid start point: {0}")]
    InvalidStartPoint(String),
    /// The upstream failed or is not ready; the text names the upstream (capture's errors do).
    #[error("{0}")]
    Upstream(String),
    #[error("{0}")]
    Conflict(String),
    /// The node does not allow this (e.g. debug holds without `--enable-debug-holds`).
    #[error("{0}")]
    Forbidden(String),
    #[error("not ready: {0}; retry in a few seconds")]
    NotReady(String),
    #[error("meta store: {0}")]
    Meta(String),
    #[error("internal: {0}")]
    Internal(String),
    #[error("io: {0}")]
    Io(#[from] std::io::Error),
}

impl ServerError {
    /// The stable code the API returns (`"error_code"`).
    pub fn code(&self) -> &'static str {
        match self {
            ServerError::Config(_) => "CDC:ErrInvalidConfig",
            ServerError::BadRequest(_) => "CDC:ErrAPIInvalidParam",
            ServerError::ChangefeedNotFound(_) => "CDC:ErrChangeFeedNotExists",
            ServerError::ChangefeedExists(_) => "CDC:ErrChangeFeedAlreadyExists",
            ServerError::CaptureNotFound(_) => "CDC:ErrCaptureNotExist",
            ServerError::InvalidSinkUri(_) => "CDC:ErrSinkURIInvalid",
            ServerError::InvalidStartPoint(_) => "CDC:ErrStartTsBeforeGC",
            ServerError::Upstream(_) => "CDC:ErrUpstreamNotReady",
            ServerError::Conflict(_) => "CDC:ErrChangefeedUpdateRefused",
            ServerError::Forbidden(_) => "CDC:ErrForbidden",
            ServerError::NotReady(_) => "CDC:ErrClusterNotReady",
            ServerError::Meta(_) => "CDC:ErrMetaStore",
            ServerError::Internal(_) | ServerError::Io(_) => "CDC:ErrInternalServerError",
        }
    }

    pub fn status(&self) -> StatusCode {
        match self {
            ServerError::Config(_)
            | ServerError::BadRequest(_)
            | ServerError::InvalidSinkUri(_)
            | ServerError::InvalidStartPoint(_)
            | ServerError::Upstream(_) => StatusCode::BAD_REQUEST,
            ServerError::ChangefeedNotFound(_) | ServerError::CaptureNotFound(_) => {
                StatusCode::NOT_FOUND
            }
            ServerError::ChangefeedExists(_) | ServerError::Conflict(_) => StatusCode::CONFLICT,
            ServerError::Forbidden(_) => StatusCode::FORBIDDEN,
            ServerError::NotReady(_) | ServerError::Meta(_) => StatusCode::SERVICE_UNAVAILABLE,
            ServerError::Internal(_) | ServerError::Io(_) => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    /// Whether retrying the same call later may succeed.
    pub fn is_retryable(&self) -> bool {
        matches!(
            self,
            ServerError::NotReady(_) | ServerError::Meta(_) | ServerError::Io(_)
        )
    }
}
