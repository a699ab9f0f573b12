//! `--sa-dir` and `--api-server`: how the installer's kubeconfig and the node agent reach the API
//! server, flags that `install` and `agent` share.

use super::environment::Lookup;
use std::path::PathBuf;

#[derive(clap::Args, Debug)]
pub struct ApiAccessArgs {
    /// service-account dir holding `token` and `ca.crt` for the kubeconfig and the agent
    #[arg(
        long,
        value_name = "DIR",
        env = "YH_GENIE_SA_DIR",
        default_value = "/var/run/secrets/kubernetes.io/serviceaccount"
    )]
    pub sa_dir: PathBuf,
    /// API server URL for the kubeconfig and the agent (without it, the pod's
    /// https://$KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT)
    #[arg(long, value_name = "URL", env = "YH_GENIE_API_SERVER")]
    pub api_server: Option<String>,
}

impl ApiAccessArgs {
    /// The API server's URL: `--api-server`, or the in-cluster service address the kubelet puts
    /// into every pod's environment (read through `env`). An IPv6 host is bracketed, as URLs require.
    /// `outside_a_pod` says what to do when that address is not there.
    pub fn url(&self, env: Lookup, outside_a_pod: &str) -> Result<String, String> {
        if let Some(url) = &self.api_server {
            return if url.starts_with("https://") || url.starts_with("http://") {
                Ok(url.trim_end_matches('/').to_owned())
            } else {
                Err(format!("--api-server must be an http(s):// URL, not {url:?}"))
            };
        }
        let host = env("KUBERNETES_SERVICE_HOST")
            .filter(|h| !h.is_empty())
            .ok_or_else(|| format!("KUBERNETES_SERVICE_HOST is not set: {outside_a_pod}"))?;
        let port = env("KUBERNETES_SERVICE_PORT").unwrap_or_default();
        let port: u16 =
            port.parse().map_err(|_| format!("KUBERNETES_SERVICE_PORT must be a port number, not {port:?}"))?;
        let host = if host.contains(':') && !host.starts_with('[') { format!("[{host}]") } else { host };
        Ok(format!("https://{host}:{port}"))
    }
}
