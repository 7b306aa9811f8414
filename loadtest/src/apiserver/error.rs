//! API errors as the Kubernetes API server reports them: every failure becomes a
//! `metav1.Status` body with the HTTP code, `reason` and `details` clients branch on
//! (kube-rs's `ErrorResponse`, client-go's `IsNotFound`/`IsConflict`/...).

use serde_json::{Value, json};

/// The `reason` field of a failure Status; the HTTP code follows from it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reason {
    /// 400
    BadRequest,
    /// 404
    NotFound,
    /// 409 on create of an existing name.
    AlreadyExists,
    /// 409 on a stale resourceVersion or precondition.
    Conflict,
    /// 410 for a compacted resourceVersion.
    Expired,
    /// 405
    MethodNotAllowed,
    /// 406
    NotAcceptable,
    /// 415
    UnsupportedMediaType,
    /// 422
    Invalid,
    /// 429
    TooManyRequests,
    /// 500
    InternalError,
    /// 403 (namespace being terminated, or RBAC).
    Forbidden,
    /// 401: no known bearer token while RBAC is enforced.
    Unauthorized,
}

impl Reason {
    /// The HTTP status code the API server pairs with this reason.
    pub fn code(self) -> u16 {
        match self {
            Reason::BadRequest => 400,
            Reason::Forbidden => 403,
            Reason::Unauthorized => 401,
            Reason::NotFound => 404,
            Reason::MethodNotAllowed => 405,
            Reason::NotAcceptable => 406,
            Reason::AlreadyExists | Reason::Conflict => 409,
            Reason::Expired => 410,
            Reason::UnsupportedMediaType => 415,
            Reason::Invalid => 422,
            Reason::TooManyRequests => 429,
            Reason::InternalError => 500,
        }
    }

    fn as_str(self) -> &'static str {
        match self {
            Reason::BadRequest => "BadRequest",
            Reason::Forbidden => "Forbidden",
            Reason::Unauthorized => "Unauthorized",
            Reason::NotFound => "NotFound",
            Reason::MethodNotAllowed => "MethodNotAllowed",
            Reason::NotAcceptable => "NotAcceptable",
            Reason::AlreadyExists => "AlreadyExists",
            Reason::Conflict => "Conflict",
            Reason::Expired => "Expired",
            Reason::UnsupportedMediaType => "UnsupportedMediaType",
            Reason::Invalid => "Invalid",
            Reason::TooManyRequests => "TooManyRequests",
            Reason::InternalError => "InternalError",
        }
    }
}

/// A failed API call, rendered as a `Status` object.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{reason:?}: {message}")]
pub struct ApiError {
    /// Machine-readable reason (and HTTP code).
    pub reason: Reason,
    /// Human-readable message, worded like the real API server's.
    pub message: String,
    /// `details` of the Status (name, group, kind, causes), if any.
    pub details: Option<Value>,
    /// Seconds a client should wait before retrying (429/500 with `Retry-After`).
    pub retry_after: Option<u64>,
}

impl ApiError {
    /// An error with a reason and message and no details.
    pub fn new(reason: Reason, message: impl Into<String>) -> Self {
        Self {
            reason,
            message: message.into(),
            details: None,
            retry_after: None,
        }
    }

    /// 400 with `message`.
    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(Reason::BadRequest, message)
    }

    /// 404 for `plural "name" not found`, as the API server words it.
    pub fn not_found(group: &str, plural: &str, name: &str) -> Self {
        let what = qualified(group, plural);
        Self::new(Reason::NotFound, format!("{what} \"{name}\" not found"))
            .with_details(json!({"name": name, "group": group, "kind": plural}))
    }

    /// 409 AlreadyExists for a create of an existing name.
    pub fn already_exists(group: &str, plural: &str, name: &str) -> Self {
        let what = qualified(group, plural);
        Self::new(
            Reason::AlreadyExists,
            format!("{what} \"{name}\" already exists"),
        )
        .with_details(json!({"name": name, "group": group, "kind": plural}))
    }

    /// 409 Conflict for an update carrying a stale resourceVersion.
    pub fn conflict(group: &str, plural: &str, name: &str, why: &str) -> Self {
        let what = qualified(group, plural);
        Self::new(
            Reason::Conflict,
            format!("Operation cannot be fulfilled on {what} \"{name}\": {why}"),
        )
        .with_details(json!({"name": name, "group": group, "kind": plural}))
    }

    /// 410 Expired for a resourceVersion older than the retained history.
    pub fn expired(message: impl Into<String>) -> Self {
        Self::new(Reason::Expired, message)
    }

    /// 422 Invalid naming the offending field.
    pub fn invalid(group: &str, kind: &str, name: &str, field: &str, problem: &str) -> Self {
        Self::new(
            Reason::Invalid,
            format!("{kind}.{group} \"{name}\" is invalid: {field}: {problem}"),
        )
        .with_details(json!({
            "name": name, "group": group, "kind": kind,
            "causes": [{"reason": "FieldValueInvalid", "message": problem, "field": field}],
        }))
    }

    /// 500 with `message`.
    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(Reason::InternalError, message)
    }

    /// Attaches a `details` object.
    pub fn with_details(mut self, details: Value) -> Self {
        self.details = Some(details);
        self
    }

    /// HTTP status code.
    pub fn code(&self) -> u16 {
        self.reason.code()
    }

    /// The `metav1.Status` body.
    pub fn to_status(&self) -> Value {
        let mut status = json!({
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason.as_str(),
            "code": self.code(),
        });
        if let Some(details) = &self.details {
            status["details"] = details.clone();
        }
        if let Some(secs) = self.retry_after {
            status["details"]["retryAfterSeconds"] = json!(secs);
        }
        status
    }
}

/// `plural.group` as error messages name a resource (`pods`, `nodepools.karpenter.sh`).
fn qualified(group: &str, plural: &str) -> String {
    if group.is_empty() {
        plural.to_string()
    } else {
        format!("{plural}.{group}")
    }
}

/// Result alias for emulator operations.
pub type ApiResult<T> = Result<T, ApiError>;

/// A success Status (e.g. the reply to an eviction or an immediate delete).
pub fn success_status(code: u16, details: Option<Value>) -> Value {
    let mut status = json!({
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": code,
    });
    if let Some(details) = details {
        status["details"] = details;
    }
    status
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn not_found_reads_like_the_api_server() {
        let err = ApiError::not_found("", "pods", "web-1");
        let status = err.to_status();
        assert_eq!(status["code"], 404);
        assert_eq!(status["reason"], "NotFound");
        assert_eq!(status["message"], "pods \"web-1\" not found");
        let err = ApiError::not_found("karpenter.sh", "nodepools", "default");
        assert_eq!(err.message, "nodepools.karpenter.sh \"default\" not found");
    }
}
