//! The agent's local HTTP port: `/readyz` (200 once the watch of the node's pods has listed and is
//! current and the default network is ready, else 503 saying why: the DaemonSet's readinessProbe;
//! either way, a line for each other watch that fails, and why), `/healthz` (200 while the agent
//! runs) and `/metrics` (Prometheus text). A few plain GETs from the kubelet and a scraper need no HTTP library: one request per
//! connection, answered and closed.

use super::Shared;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tracing::warn;

/// A request head longer than this is not one of ours.
const MAX_HEAD: usize = 8 << 10;
const READ_TIMEOUT: Duration = Duration::from_secs(5);
/// While the port is taken, try again this often: the socket serves the plugin meanwhile.
const RETRY_BIND: Duration = Duration::from_secs(10);

/// Serve `address` for as long as the agent runs.
pub(super) async fn serve(shared: Arc<Shared>, address: SocketAddr) -> String {
    let listener = loop {
        match TcpListener::bind(address).await {
            Ok(listener) => break listener,
            Err(e) => {
                warn!("cannot listen on {address} for readiness and metrics ({e}); trying again");
                tokio::time::sleep(RETRY_BIND).await;
            }
        }
    };
    loop {
        match listener.accept().await {
            Ok((stream, _)) => drop(tokio::spawn(request(shared.clone(), stream))),
            Err(e) => {
                warn!("accepting on {address}: {e}");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
}

async fn request(shared: Arc<Shared>, mut stream: TcpStream) {
    let mut head = Vec::new();
    let mut chunk = [0u8; 1024];
    let complete = tokio::time::timeout(READ_TIMEOUT, async {
        while !head.windows(4).any(|w| w == b"\r\n\r\n") && head.len() < MAX_HEAD {
            match stream.read(&mut chunk).await {
                Ok(0) | Err(_) => return false,
                Ok(n) => head.extend_from_slice(&chunk[..n]),
            }
        }
        true
    })
    .await
    .unwrap_or(false);
    if !complete {
        return;
    }
    let line = String::from_utf8_lossy(&head);
    let mut words = line.split_whitespace();
    let (method, path) = (words.next().unwrap_or_default(), words.next().unwrap_or_default());
    let (status, body) = match (method, path) {
        ("GET", "/readyz") => {
            let (status, mut body) = match shared.readiness() {
                Ok(()) => ("200 OK", "ready\n".to_string()),
                Err(why) => ("503 Service Unavailable", format!("not ready: {why}\n")),
            };
            for failing in shared.failing_watches() {
                body.push_str(&failing);
                body.push('\n');
            }
            (status, body)
        }
        ("GET", "/healthz") => ("200 OK", "ok\n".to_string()),
        ("GET", "/metrics") => ("200 OK", shared.render_metrics()),
        ("GET", _) => ("404 Not Found", "not found: /readyz, /healthz, /metrics\n".to_string()),
        _ => ("405 Method Not Allowed", "only GET\n".to_string()),
    };
    let reply = format!(
        "HTTP/1.1 {status}\r\ncontent-type: text/plain; version=0.0.4\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    );
    let _ = stream.write_all(reply.as_bytes()).await;
    let _ = stream.shutdown().await;
}
