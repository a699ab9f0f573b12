//! A gRPC server on a unix socket, for the fakes of the kubelet's gRPC APIs (its PodResources API,
//! a device plugin's): HTTP/2 with each message framed by hand (a flag byte, a 4-byte length), the
//! messages themselves encoded by the caller, so that no code generator is needed.

use bytes::{Buf, BufMut, Bytes, BytesMut};
use http_body_util::{BodyExt, StreamBody, combinators::BoxBody};
use hyper::body::{Frame, Incoming};
use hyper::{Request, Response};
use std::convert::Infallible;
use std::path::Path;
use std::sync::Arc;

/// What a call is answered with.
pub enum Answer {
    /// One message, and the call ends with status OK.
    Message(Vec<u8>),
    /// One message, and the stream stays open (a watch: its end means the server is gone).
    Open(Vec<u8>),
    /// No message: the call ends with this gRPC status code (12: Unimplemented) and message.
    Status(u32, String),
}

/// Answers a call to `path` (`/package.Service/Method`) whose request message is the bytes given.
pub type Handler = Arc<dyn Fn(&str, Bytes) -> Answer + Send + Sync>;

fn framed(message: Vec<u8>) -> Bytes {
    let mut buf = BytesMut::with_capacity(5 + message.len());
    buf.put_u8(0);
    buf.put_u32(message.len() as u32);
    buf.put_slice(&message);
    buf.freeze()
}

fn unframed(mut body: Bytes) -> Bytes {
    if body.len() < 5 {
        return Bytes::new();
    }
    body.advance(1);
    let len = body.get_u32() as usize;
    body.slice(..len.min(body.len()))
}

fn status(code: u32, message: &str) -> hyper::HeaderMap {
    let mut trailers = hyper::HeaderMap::new();
    trailers.insert("grpc-status", code.to_string().parse().unwrap());
    if let Ok(message) = message.parse() {
        trailers.insert("grpc-message", message);
    }
    trailers
}

type Body = BoxBody<Bytes, Infallible>;

async fn answer(handler: Handler, request: Request<Incoming>) -> Result<Response<Body>, Infallible> {
    let path = request.uri().path().to_string();
    let body = request.into_body().collect().await.map(|b| b.to_bytes()).unwrap_or_default();
    let frames: Vec<Result<Frame<Bytes>, Infallible>> = match handler(&path, unframed(body)) {
        Answer::Message(m) => vec![Ok(Frame::data(framed(m))), Ok(Frame::trailers(status(0, "")))],
        Answer::Status(code, message) => vec![Ok(Frame::trailers(status(code, &message)))],
        Answer::Open(m) => {
            let first = futures::stream::iter([Ok(Frame::data(framed(m)))]);
            let open = futures::StreamExt::chain(first, futures::stream::pending());
            return Ok(grpc(BoxBody::new(StreamBody::new(open))));
        }
    };
    Ok(grpc(BoxBody::new(StreamBody::new(futures::stream::iter(frames)))))
}

fn grpc(body: Body) -> Response<Body> {
    Response::builder().header("content-type", "application/grpc").body(body).unwrap()
}

/// Binds `socket` (replacing a stale one), ready for `serve`: calls are queued from now on.
pub fn bind(socket: &Path) -> std::io::Result<std::os::unix::net::UnixListener> {
    let _ = std::fs::remove_file(socket);
    let listener = std::os::unix::net::UnixListener::bind(socket)?;
    listener.set_nonblocking(true)?;
    Ok(listener)
}

/// Serves `handler` on `listener` (from `bind`) until the runtime ends.
pub async fn serve(listener: std::os::unix::net::UnixListener, handler: Handler) -> std::io::Result<()> {
    let listener = tokio::net::UnixListener::from_std(listener)?;
    loop {
        let (stream, _) = listener.accept().await?;
        let handler = handler.clone();
        tokio::spawn(async move {
            let service = hyper::service::service_fn(move |r| answer(handler.clone(), r));
            let _ = hyper::server::conn::http2::Builder::new(hyper_util::rt::TokioExecutor::new())
                .serve_connection(hyper_util::rt::TokioIo::new(stream), service)
                .await;
        });
    }
}

/// `serve` on `socket`, on a thread of its own, for a test that calls it from blocking code:
/// bound when this returns. The thread ends with the test process.
pub fn serve_in_thread(socket: &Path, handler: Handler) {
    let listener = bind(socket).unwrap_or_else(|e| panic!("binding {}: {e}", socket.display()));
    std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        runtime.block_on(serve(listener, handler)).unwrap();
    });
}
