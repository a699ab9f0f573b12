//! A certificate problem is not an outage: when the API server's certificate is not trusted, the
//! selector's ADD fails at once with code 103 and says what is wrong with which certificate and
//! what to change, instead of retrying for its whole budget and reporting "unreachable" (code 11).
//! The self-signed CA:TRUE serving certificate kubectl accepts is accepted too (src/platform/kube/tls/).
//! A node netns with the HTTPS fake API server presenting each kind of certificate; as root.

use crate::support::node::{NetnsNode, pod_addresses};
use serde_json::json;
use std::time::{Duration, Instant};
use testkit::apiserver::{Serving, literal};

/// The API budget of these ADDs: a retried failure would take all of it.
const BUDGET_SECONDS: u64 = 30;
/// What an ADD that gives up at the first answer takes at most, on a loaded 2-core VM: a behaviour
/// bound (no retries), far under the budget, not a benchmark.
const AT_ONCE: Duration = Duration::from_secs(2);

/// A node whose API server serves `serving`, with a pod choosing a bridge network by literal value.
fn node(serving: Serving) -> NetnsNode {
    let n = NetnsNode::serving(serving);
    n.add_yonghui_network("fabric", 9, json!({}));
    n.api.put_pod("default", "web-0", literal("fabric"));
    n
}

#[test]
fn an_untrusted_certificate_fails_the_add_at_once_with_code_103_saying_how_to_fix() {
    for (serving, problem, fix) in [
        (Serving::UnknownCa, "is not issued by the certificate authority of kubeconfig", "certificate-authority-data"),
        (Serving::Expired, "has expired at 2020-01-01T00:00:00Z", "renew it"),
        (Serving::WrongName, "is not valid for 127.0.0.1 (it names kubernetes.invalid)", "tls-server-name"),
    ] {
        let n = node(serving);
        let conf = n.selector_conf("1.0.0", json!({"apiTimeoutSeconds": BUDGET_SECONDS}));
        let pod = n.pod("web-0");
        let started = Instant::now();
        let reply = n.call("ADD", &pod, &conf);
        let took = started.elapsed();
        let e = reply.err();
        let msg = e["msg"].as_str().unwrap();
        assert_eq!(e["code"], 103, "{serving:?}: {msg}");
        assert!(took < AT_ONCE, "{serving:?}: the ADD took {took:?}; a certificate problem must not be retried");
        let kubeconfig = n.api.kubeconfig().display().to_string();
        for part in [&format!("serving certificate of API server {}", n.api.url()), problem, fix, "pod default/web-0"] {
            assert!(msg.contains(part), "{serving:?}: {part:?} is not in: {msg}");
        }
        if serving == Serving::UnknownCa {
            assert!(msg.contains(&kubeconfig), "{msg}");
        }
        assert_eq!(n.api.requests(), 0, "{serving:?}: no request is made over an untrusted connection");
        n.assert_failed_add_left_nothing(&pod, &format!("{serving:?}"));
        n.call("DEL", &pod, &conf).ok();
        n.assert_nothing_left(&pod, &format!("{serving:?}"));
    }
}

#[test]
fn a_self_signed_ca_serving_certificate_in_the_kubeconfig_is_accepted_as_kubectl_accepts_it() {
    let n = node(Serving::SelfSignedCa);
    let conf = n.selector_conf("1.0.0", json!({"apiTimeoutSeconds": BUDGET_SECONDS}));
    let pod = n.pod("web-0");
    let result = n.call("ADD", &pod, &conf).ok();
    let addresses = pod_addresses(&pod);
    assert_eq!(addresses.len(), 1, "{addresses:?}");
    assert!(addresses[0].starts_with("10.77.9."), "the pod is on the network it chose: {addresses:?}");
    assert_eq!(result["ips"][0]["address"], addresses[0].as_str());
    assert_eq!(n.api.request_log(), ["GET /api/v1/namespaces/default/pods/web-0"]);
    n.call("CHECK", &pod, &conf).ok();
    n.call("DEL", &pod, &conf).ok();
    n.assert_nothing_left(&pod, "self-signed CA:TRUE");
}
