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
        404 => "NotFound",
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

pub(super) fn json_reply(code: StatusCode, body: &Value) -> Reply {
    Response::builder()
        .status(code)
        .header("content-type", "application/json")
        .body(http_body_util::Full::new(Bytes::from(body.to_string())).map_err(|never| match never {}).boxed())
        .unwrap()
}
