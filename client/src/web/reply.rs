//! The web view's API answers: JSON bodies, and errors as a status code
//! with a one-line `{"error": …}` the page shows.

use axum::Json;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::json;

/// A failed API call: the HTTP status and what the page shows.
#[derive(Debug)]
pub struct ApiError {
    pub status: StatusCode,
    pub message: String,
}

pub type ApiResult = Result<Response, ApiError>;

impl ApiError {
    pub fn bad(message: impl Into<String>) -> Self {
        Self {
            status: StatusCode::BAD_REQUEST,
            message: message.into(),
        }
    }

    /// agentd could not be reached or started.
    pub fn unavailable(message: impl Into<String>) -> Self {
        Self {
            status: StatusCode::SERVICE_UNAVAILABLE,
            message: message.into(),
        }
    }

    /// An RPC failure, mapped to the nearest HTTP status.
    pub fn rpc(what: &str, status: &tonic::Status) -> Self {
        use tonic::Code;
        let http = match status.code() {
            Code::InvalidArgument | Code::OutOfRange => StatusCode::BAD_REQUEST,
            Code::NotFound => StatusCode::NOT_FOUND,
            Code::FailedPrecondition | Code::Aborted | Code::AlreadyExists => StatusCode::CONFLICT,
            Code::ResourceExhausted => StatusCode::TOO_MANY_REQUESTS,
            _ => StatusCode::BAD_GATEWAY,
        };
        Self {
            status: http,
            message: crate::error::CliError::from_status(what, status).message,
        }
    }
}

impl From<crate::rpc::Failed> for ApiError {
    fn from(failed: crate::rpc::Failed) -> Self {
        match failed {
            crate::rpc::Failed::Status { doing, status } => Self::rpc(doing, &status),
            crate::rpc::Failed::Garbled(what) => Self::bad(what),
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        (self.status, Json(json!({ "error": self.message }))).into_response()
    }
}

/// A JSON answer.
pub fn ok(value: serde_json::Value) -> ApiResult {
    Ok(Json(value).into_response())
}

pub async fn not_found() -> ApiError {
    ApiError {
        status: StatusCode::NOT_FOUND,
        message: "no such page".into(),
    }
}
