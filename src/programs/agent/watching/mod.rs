//! The node agent's access to the API server: one long-lived async client (where `ApiClient` is
//! built for one plugin call and blocks), over one connection (HTTP/2, see `tls`) whatever it
//! watches, with the same certificate checks as the plugin's client.
//!
//! - `list_watch`: one resource's objects, listed then watched for as long as the agent runs
//!   (streaming lists, resumes, relists spread in time, backoff).
//! - `writes`: the network-status writes and `AddedInterface` events the agent makes on the
//!   plugin's behalf.
//!
//! In the DaemonSet it authenticates with the pod's service account: the token file is named, not
//! copied, so kube re-reads it as the kubelet rotates it. Elsewhere (tests) a kubeconfig file.

pub mod list_watch;
mod writes;

pub use writes::{Annotated, EventPod, Reporter, annotate, annotate_at_version, create_event, create_event_of_type};

use crate::platform::kube::tls;
use ::kube::config::{KubeConfigOptions, Kubeconfig};
use ::kube::{Client, Config};
use std::path::PathBuf;
use std::time::Duration;

const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// Where the agent's credentials come from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Access {
    /// A kubeconfig file.
    Kubeconfig(PathBuf),
    /// A service account's mounted `token` and `ca.crt` in `dir`, and the API server's URL.
    ServiceAccount { dir: PathBuf, server: String },
}

impl std::fmt::Display for Access {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Access::Kubeconfig(path) => write!(f, "kubeconfig {}", path.display()),
            Access::ServiceAccount { dir, server } => write!(f, "the service account in {} at {server}", dir.display()),
        }
    }
}

/// The namespace a mounted service account is in (its `namespace` file), else `default`.
fn service_account_namespace(dir: &std::path::Path) -> String {
    std::fs::read_to_string(dir.join("namespace"))
        .ok()
        .map(|ns| ns.trim().to_string())
        .filter(|ns| !ns.is_empty())
        .unwrap_or_else(|| "default".to_string())
}

/// A client for `access`; the error says what is wrong with it.
pub async fn connect(access: &Access) -> Result<Client, String> {
    let kubeconfig = match access {
        Access::Kubeconfig(path) => Kubeconfig::read_from(path).map_err(|e| format!("{access}: {e}"))?,
        Access::ServiceAccount { dir, server } => serde_json::from_value(serde_json::json!({
            "clusters": [{"name": "cluster", "cluster": {
                "server": server, "certificate-authority": dir.join("ca.crt")}}],
            "users": [{"name": "agent", "user": {"tokenFile": dir.join("token")}}],
            // The agent's own namespace, where it keeps its node's yh-ipam lease.
            "contexts": [{"name": "agent", "context": {"cluster": "cluster", "user": "agent",
                "namespace": service_account_namespace(dir)}}],
            "current-context": "agent",
        }))
        .map_err(|e| format!("{access}: {e}"))?,
    };
    let config = Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .map_err(|e| format!("{access}: {e}"))?;
    tls::client(config, CONNECT_TIMEOUT, tls::Protocols::Http2Preferred).map_err(|e| format!("{access}: {e}"))
}
