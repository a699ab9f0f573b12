//! The server's port: a listener on 127.0.0.1 of the node netns, the task that accepts connections
//! and holds them (so that closing the port cuts them all), and each connection served over TLS
//! and HTTP/1.1 by the router.

use super::{ApiServer, State, router};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;
use tokio::task::JoinSet;

/// A listener on 127.0.0.1:`port` (0: any) in the netns at `netns`. A socket stays in the netns it
/// was made in, so it is made on a thread that joined the netns.
pub(super) fn bind(netns: &Path, port: u16) -> std::net::TcpListener {
    let ns = std::fs::File::open(netns).expect("open node netns");
    std::thread::scope(|s| {
        s.spawn(move || {
            nix::sched::setns(&ns, nix::sched::CloneFlags::CLONE_NEWNET).expect("setns into node netns");
            let l = std::net::TcpListener::bind(("127.0.0.1", port)).expect("bind 127.0.0.1");
            l.set_nonblocking(true).unwrap();
            l
        })
        .join()
        .unwrap()
    })
}

impl ApiServer {
    /// Close the port and every open connection: clients get "connection refused".
    pub fn down(&self) {
        if let Some(accept) = self.accept.lock().unwrap().take() {
            accept.abort();
            // Wait until the listener is really closed, so the next connect is refused.
            let _ = self.runtime.block_on(async { tokio::time::timeout(Duration::from_secs(5), accept).await });
        }
    }

    /// Listen again on the same address.
    pub fn up(&self) {
        if self.accept.lock().unwrap().is_none() {
            self.serve(bind(&self.netns, self.addr.port()));
        }
    }

    pub(super) fn serve(&self, listener: std::net::TcpListener) {
        let state = self.state.clone();
        let tls = self.tls.clone();
        let task = self.runtime.spawn(async move {
            let listener = tokio::net::TcpListener::from_std(listener).unwrap();
            // Connections live in the accept task's set: aborting the task (`down`) closes them all.
            let mut connections = JoinSet::new();
            loop {
                tokio::select! {
                    accepted = listener.accept() => {
                        let Ok((tcp, _)) = accepted else { continue };
                        connections.spawn(serve_connection(tls.clone(), tcp, state.clone()));
                    }
                    Some(_) = connections.join_next() => {}
                }
            }
        });
        *self.accept.lock().unwrap() = Some(task);
    }
}

async fn serve_connection(tls: tokio_rustls::TlsAcceptor, tcp: tokio::net::TcpStream, state: Arc<State>) {
    let Ok(stream) = tls.accept(tcp).await else { return };
    let service = hyper::service::service_fn(move |req| router::handle(req, state.clone()));
    let _ = hyper::server::conn::http1::Builder::new()
        .serve_connection(hyper_util::rt::TokioIo::new(stream), service)
        .await;
}
