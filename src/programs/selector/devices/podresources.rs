//! The kubelet's PodResources API (`v1.PodResourcesLister`, gRPC on the kubelet's unix socket
//! `/var/lib/kubelet/pod-resources/kubelet.sock`): the devices the device plugins allocated to a
//! pod's containers. `Get` asks for the one pod (the kubelet answers it when its
//! `KubeletPodResourcesGet` feature is on); a kubelet without it answers `Unimplemented`, and the
//! pod is then found in `List`. The socket is the kubelet's on this node: no API-server request.
//!
//! The messages are written by hand with prost under the field numbers of k8s.io/kubelet
//! `pkg/apis/podresources/v1/api.proto`, holding only what is read here (the rest is skipped when
//! decoding), so no protoc is needed to build.

use super::{DeviceError, PodDevices};
use prost::Message;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Where the kubelet serves the PodResources API.
pub const DEFAULT_SOCKET: &str = "/var/lib/kubelet/pod-resources/kubelet.sock";

/// How long the kubelet has to answer, connection included.
const TIMEOUT: Duration = Duration::from_secs(10);
/// The largest answer read (a node's `List`), as Multus allows.
const MAX_MESSAGE: usize = 16 * 1024 * 1024;

const LIST: &str = "/v1.PodResourcesLister/List";
const GET: &str = "/v1.PodResourcesLister/Get";

#[derive(Clone, PartialEq, Message)]
pub struct ListPodResourcesRequest {}

#[derive(Clone, PartialEq, Message)]
pub struct ListPodResourcesResponse {
    #[prost(message, repeated, tag = "1")]
    pub pod_resources: Vec<PodResources>,
}

#[derive(Clone, PartialEq, Message)]
pub struct GetPodResourcesRequest {
    #[prost(string, tag = "1")]
    pub pod_name: String,
    #[prost(string, tag = "2")]
    pub pod_namespace: String,
}

#[derive(Clone, PartialEq, Message)]
pub struct GetPodResourcesResponse {
    #[prost(message, optional, tag = "1")]
    pub pod_resources: Option<PodResources>,
}

#[derive(Clone, PartialEq, Message)]
pub struct PodResources {
    #[prost(string, tag = "1")]
    pub name: String,
    #[prost(string, tag = "2")]
    pub namespace: String,
    #[prost(message, repeated, tag = "3")]
    pub containers: Vec<ContainerResources>,
}

#[derive(Clone, PartialEq, Message)]
pub struct ContainerResources {
    #[prost(string, tag = "1")]
    pub name: String,
    #[prost(message, repeated, tag = "2")]
    pub devices: Vec<ContainerDevices>,
}

#[derive(Clone, PartialEq, Message)]
pub struct ContainerDevices {
    #[prost(string, tag = "1")]
    pub resource_name: String,
    #[prost(string, repeated, tag = "2")]
    pub device_ids: Vec<String>,
}

impl PodResources {
    /// The devices of every container of the pod, by resource.
    pub fn devices(&self) -> PodDevices {
        let mut devices = PodDevices::default();
        for container in &self.containers {
            for allocated in &container.devices {
                devices.add(&allocated.resource_name, allocated.device_ids.iter().cloned());
            }
        }
        devices
    }
}

/// The devices the kubelet at `socket` allocated to the pod `namespace/name`: `Get`, else `List`.
/// A pod the kubelet does not know has none.
pub fn pod_devices(socket: &Path, namespace: &str, name: &str) -> Result<PodDevices, DeviceError> {
    if !socket.exists() {
        return Err(DeviceError::SocketAbsent { socket: socket.to_path_buf() });
    }
    let unanswered = |reason: String| DeviceError::Unanswered { socket: socket.to_path_buf(), reason };
    crate::platform::async_runtime::block_on(async {
        let channel = connect(socket).await.map_err(|e| unanswered(format!("cannot connect: {e}")))?;
        let get = GetPodResourcesRequest { pod_name: name.to_string(), pod_namespace: namespace.to_string() };
        match call::<_, GetPodResourcesResponse>(channel.clone(), GET, get).await {
            Ok(answer) => return Ok(answer.pod_resources.map(|p| p.devices()).unwrap_or_default()),
            // Without KubeletPodResourcesGet the kubelet has no Get, and some answer NotFound for a
            // pod that has no resources; List tells either way.
            Err(status) if matches!(status.code(), tonic::Code::Unimplemented | tonic::Code::NotFound) => {}
            Err(status) => return Err(unanswered(describe(&status))),
        }
        let list = call::<_, ListPodResourcesResponse>(channel, LIST, ListPodResourcesRequest {})
            .await
            .map_err(|status| unanswered(describe(&status)))?;
        Ok(list
            .pod_resources
            .iter()
            .find(|p| p.namespace == namespace && p.name == name)
            .map(PodResources::devices)
            .unwrap_or_default())
    })
}

fn describe(status: &tonic::Status) -> String {
    format!("{:?}: {}", status.code(), status.message())
}

async fn connect(socket: &Path) -> Result<tonic::transport::Channel, tonic::transport::Error> {
    let socket: PathBuf = socket.to_path_buf();
    // The URI is required by the API but unused: the connector dials the unix socket.
    tonic::transport::Endpoint::from_static("http://kubelet.invalid")
        .connect_timeout(TIMEOUT)
        .timeout(TIMEOUT)
        .connect_with_connector(tower::service_fn(move |_: tonic::transport::Uri| {
            let socket = socket.clone();
            async move {
                let stream = tokio::net::UnixStream::connect(socket).await?;
                Ok::<_, std::io::Error>(hyper_util::rt::TokioIo::new(stream))
            }
        }))
        .await
}

async fn call<Req, Resp>(
    channel: tonic::transport::Channel,
    method: &'static str,
    request: Req,
) -> Result<Resp, tonic::Status>
where
    Req: Message + Send + Sync + 'static,
    Resp: Message + Default + Send + Sync + 'static,
{
    let mut grpc = tonic::client::Grpc::new(channel).max_decoding_message_size(MAX_MESSAGE);
    grpc.ready().await.map_err(|e| tonic::Status::unavailable(format!("not ready: {e}")))?;
    let path = http::uri::PathAndQuery::from_static(method);
    let codec = tonic_prost::ProstCodec::<Req, Resp>::default();
    grpc.unary(tonic::Request::new(request), path, codec).await.map(tonic::Response::into_inner)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pods_devices_are_those_of_all_its_containers_sorted() {
        let pod = PodResources {
            name: "p".into(),
            namespace: "ns".into(),
            containers: vec![
                ContainerResources {
                    name: "a".into(),
                    devices: vec![ContainerDevices {
                        resource_name: "x/vf".into(),
                        device_ids: vec!["vf3".into(), "vf1".into()],
                    }],
                },
                ContainerResources {
                    name: "b".into(),
                    devices: vec![
                        ContainerDevices { resource_name: "x/vf".into(), device_ids: vec!["vf2".into()] },
                        ContainerDevices { resource_name: "y/gpu".into(), device_ids: vec!["g0".into()] },
                    ],
                },
            ],
        };
        // Through the wire format, as the kubelet sends it.
        let decoded = PodResources::decode(pod.encode_to_vec().as_slice()).unwrap();
        let devices = decoded.devices();
        assert_eq!(devices.of("x/vf"), ["vf1", "vf2", "vf3"]);
        assert_eq!(devices.of("y/gpu"), ["g0"]);
        assert!(devices.of("z").is_empty());
    }

    /// A kubelet's PodResources API on a unix socket: `Get` as the kubelet without
    /// `KubeletPodResourcesGet` answers it (Unimplemented) or answering for the pod, `List` always.
    fn fake_kubelet(socket: &Path, pods: Vec<PodResources>, with_get: bool) {
        use testkit::grpc::Answer;
        let handler = move |path: &str, message: bytes::Bytes| match path {
            LIST => Answer::Message(ListPodResourcesResponse { pod_resources: pods.clone() }.encode_to_vec()),
            GET if with_get => {
                let asked = GetPodResourcesRequest::decode(message).unwrap();
                let pod = pods.iter().find(|p| p.name == asked.pod_name && p.namespace == asked.pod_namespace);
                match pod {
                    Some(pod) => {
                        Answer::Message(GetPodResourcesResponse { pod_resources: Some(pod.clone()) }.encode_to_vec())
                    }
                    None => Answer::Status(5, format!("pod {} not found", asked.pod_name)),
                }
            }
            _ => Answer::Status(12, format!("unknown method {path}")),
        };
        testkit::grpc::serve_in_thread(socket, std::sync::Arc::new(handler));
    }

    fn pod(namespace: &str, name: &str, devices: &[(&str, &[&str])]) -> PodResources {
        let devices = devices
            .iter()
            .map(|(r, ids)| ContainerDevices {
                resource_name: r.to_string(),
                device_ids: ids.iter().map(|s| s.to_string()).collect(),
            })
            .collect();
        PodResources {
            name: name.into(),
            namespace: namespace.into(),
            containers: vec![ContainerResources { name: "c".into(), devices }],
        }
    }

    #[test]
    fn the_pods_devices_come_from_get_or_else_from_list() {
        let dir = tempfile::tempdir().unwrap();
        let pods = vec![pod("ns", "other", &[("x/vf", &["vf9"])]), pod("ns", "p", &[("x/vf", &["vf2", "vf1"])])];
        for with_get in [true, false] {
            let socket = dir.path().join(format!("kubelet-{with_get}.sock"));
            fake_kubelet(&socket, pods.clone(), with_get);
            let devices = pod_devices(&socket, "ns", "p").unwrap();
            assert_eq!(devices.of("x/vf"), ["vf1", "vf2"], "with Get: {with_get}");
            // A pod the kubelet does not know has none.
            assert_eq!(pod_devices(&socket, "ns", "gone").unwrap(), PodDevices::default(), "with Get: {with_get}");
        }
        // Something that does not speak gRPC there is named.
        let socket = dir.path().join("not-grpc.sock");
        let _listener = std::os::unix::net::UnixListener::bind(&socket).unwrap();
        drop(_listener);
        let err = pod_devices(&socket, "ns", "p").unwrap_err();
        assert!(matches!(err, DeviceError::Unanswered { .. }), "{err}");
    }

    #[test]
    fn an_absent_socket_is_named() {
        let err = pod_devices(Path::new("/nonexistent/kubelet.sock"), "ns", "p").unwrap_err();
        assert!(matches!(err, DeviceError::SocketAbsent { .. }), "{err}");
        assert!(err.to_string().contains("/nonexistent/kubelet.sock is absent"), "{err}");
    }
}
