//! Answers as the API server makes them: JSON objects, and errors as a `Status` object.

use http_body_util::BodyExt;
use hyper::body::Bytes;
use hyper::{Response, StatusCode};
use serde_json::{Value, json};

pub(super) type Reply = Response<http_body_util::combinators::BoxBody<Bytes, std::io::Error>>;

/// An error as Kubernetes answers it: the HTTP status and a `Status` object saying why.
pub(super) fn status(code: u16, message: &str) -> Reply {
    let reason = match code {
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "NotFound",
        409 => "AlreadyExists",
        422 => "Invalid",
        429 => "TooManyRequests",
        503 => "ServiceUnavailable",
        _ => "InternalError",
    };
    let body = json!({
        "kind": "Status", "apiVersion": "v1", "metadata": {},
        "status": "Failure", "message": message, "reason": reason, "code": code,
    });
    json_reply(StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR), &body)
}

/// `status`, asking the client to wait `seconds` before it tries again: in the body's
/// `details.retryAfterSeconds` and in the `Retry-After` header, as the API server says it.
pub(super) fn status_retry_after(code: u16, message: &str, seconds: u32) -> Reply {
    let mut reply = status(code, message);
    let body = json!({
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "message": message,
        "reason": if code == 429 { "TooManyRequests" } else { "ServiceUnavailable" }, "code": code,
        "details": {"retryAfterSeconds": seconds},
    });
    *reply.body_mut() =
        http_body_util::Full::new(Bytes::from(body.to_string())).map_err(|never| match never {}).boxed();
    reply.headers_mut().insert("retry-after", seconds.into());
    reply
}

/// The 404 for one object that is not there, as the API server answers it: its status names the
/// object (a 404 that names none says the kind itself is not served).
pub(super) fn not_found(resource: &str, name: &str) -> Reply {
    let body = json!({
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": format!("{resource} \"{name}\" not found"), "reason": "NotFound", "code": 404,
        "details": {"name": name, "kind": resource},
    });
    json_reply(StatusCode::NOT_FOUND, &body)
}

pub(super) fn json_reply(code: StatusCode, body: &Value) -> Reply {
    Response::builder()
        .status(code)
        .header("content-type", "application/json")
        .body(http_body_util::Full::new(Bytes::from(body.to_string())).map_err(|never| match never {}).boxed())
        .unwrap()
}
