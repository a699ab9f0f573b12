//! Giving back the `yh-ipam` addresses of a pod gone without its DEL (docs/ipam.md): a pod
//! deleted while its node's runtime was down, a sandbox the runtime lost. Only the node's own agent
//! does it, from its own watch, for one pod (uid) at a time:
//!
//! - the pod watch saw the pod deleted (`when_gone`), or a list of the node's pods lacks a pod that
//!   holds addresses (`absent_pods`: deleted while no agent watched);
//! - after `--ipam-reclaim-after`, the addresses are given back only if no pod the agent holds has
//!   that uid, the API server itself (asked then, not the watch) has no pod under its name with
//!   that uid, and they were not handed out (an ADD, a retry) within `--ipam-reclaim-after`, its
//!   ADD perhaps still in flight. Uids are never reused: a pod found gone stays gone.
//!
//! Until all three hold, the check runs again after the wait; an API server that does not answer
//! delays the release, never hastens it.

use super::Shared;
use crate::programs::selector::agent_face::is_sandbox_pod;
use ::kube::Api;
use k8s_openapi::api::core::v1::Pod;
use std::sync::Arc;
use std::time::Duration;
use tracing::{debug, info};

/// How long the API server may take to answer whether a pod is still there.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

/// Give back pod `uid`'s addresses once it is gone for good (see the module's comment).
pub(super) fn when_gone(shared: &Arc<Shared>, uid: String) {
    let shared = shared.clone();
    drop(tokio::spawn(async move {
        let mut wait = shared.reclaim_after;
        loop {
            tokio::time::sleep(wait).await;
            wait = shared.reclaim_after;
            let Some(pod) = shared.addresses.holders().await.remove(&uid) else { return };
            if shared.store.lock().unwrap_or_else(|e| e.into_inner()).holds_uid(&uid) {
                return;
            }
            match still_there(&shared.client, &pod, &uid).await {
                Ok(true) => {
                    info!("pod {pod} (uid {uid}) is still there: its addresses stay its own");
                    return;
                }
                Ok(false) => {}
                Err(why) => {
                    debug!("whether pod {pod} (uid {uid}) is gone, asked again later: {why}");
                    continue;
                }
            }
            match shared.addresses.release_pod(&uid, shared.reclaim_after).await {
                Ok(()) => return,
                Err(again_in) => wait = again_in,
            }
        }
    }));
}

/// After a list of the node's pods: the addresses of pods not among them (deleted while the agent
/// did not watch) are given back as those of a pod just deleted.
pub(super) async fn absent_pods(shared: Arc<Shared>) {
    for uid in shared.addresses.holders().await.into_keys() {
        if !shared.store.lock().unwrap_or_else(|e| e.into_inner()).holds_uid(&uid) {
            when_gone(&shared, uid);
        }
    }
}

/// Whether the API server has pod `namespace/name` (as the ADD told it) with `uid`, or the mirror
/// of the static pod that runs under it. A pod whose name the ADD did not tell is taken as there.
async fn still_there(client: &::kube::Client, pod: &str, uid: &str) -> Result<bool, String> {
    let Some((namespace, name)) = pod.split_once('/').filter(|(ns, name)| !ns.is_empty() && !name.is_empty()) else {
        return Ok(true);
    };
    let api: Api<Pod> = Api::namespaced(client.clone(), namespace);
    match tokio::time::timeout(REQUEST_TIMEOUT, api.get_opt(name)).await {
        Err(_) => Err(format!("no answer within {}s", REQUEST_TIMEOUT.as_secs())),
        Ok(Err(e)) => Err(e.to_string()),
        Ok(Ok(found)) => Ok(found.is_some_and(|found| is_sandbox_pod(&found, uid))),
    }
}
