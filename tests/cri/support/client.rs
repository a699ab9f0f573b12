//! A CRI v1 client, as the kubelet talks to its container runtime: gRPC over the runtime's unix
//! socket, `runtime.v1.RuntimeService`. The messages are written by hand with prost, holding only
//! the fields this client sends or reads, under the field numbers of kubernetes/cri-api
//! `pkg/apis/runtime/v1/api.proto` (fields a message has beyond these are skipped when decoding), so
//! no protoc and no generated code is needed. Every call has a deadline: a runtime that hangs fails
//! the call, never the test run.

use prost::Message;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::Duration;
use tonic::transport::{Channel, Endpoint, Uri};

/// `NamespaceMode` values.
pub const NAMESPACE_POD: i32 = 0;
pub const NAMESPACE_CONTAINER: i32 = 1;
/// `PodSandboxState::SANDBOX_READY`.
pub const SANDBOX_READY: i32 = 0;

#[derive(Clone, PartialEq, Message)]
pub struct StatusRequest {
    #[prost(bool, tag = "1")]
    pub verbose: bool,
}

#[derive(Clone, PartialEq, Message)]
pub struct StatusResponse {
    #[prost(message, optional, tag = "1")]
    pub status: Option<RuntimeStatus>,
}

#[derive(Clone, PartialEq, Message)]
pub struct RuntimeStatus {
    #[prost(message, repeated, tag = "1")]
    pub conditions: Vec<RuntimeCondition>,
}

#[derive(Clone, PartialEq, Message)]
pub struct RuntimeCondition {
    #[prost(string, tag = "1")]
    pub r#type: String,
    #[prost(bool, tag = "2")]
    pub status: bool,
    #[prost(string, tag = "3")]
    pub reason: String,
    #[prost(string, tag = "4")]
    pub message: String,
}

#[derive(Clone, PartialEq, Message)]
pub struct PodSandboxMetadata {
    #[prost(string, tag = "1")]
    pub name: String,
    #[prost(string, tag = "2")]
    pub uid: String,
    #[prost(string, tag = "3")]
    pub namespace: String,
    #[prost(uint32, tag = "4")]
    pub attempt: u32,
}

#[derive(Clone, PartialEq, Message)]
pub struct DnsConfig {
    #[prost(string, repeated, tag = "1")]
    pub servers: Vec<String>,
    #[prost(string, repeated, tag = "2")]
    pub searches: Vec<String>,
    #[prost(string, repeated, tag = "3")]
    pub options: Vec<String>,
}

#[derive(Clone, PartialEq, Message)]
pub struct NamespaceOption {
    #[prost(int32, tag = "1")]
    pub network: i32,
    #[prost(int32, tag = "2")]
    pub pid: i32,
    #[prost(int32, tag = "3")]
    pub ipc: i32,
}

#[derive(Clone, PartialEq, Message)]
pub struct LinuxSandboxSecurityContext {
    #[prost(message, optional, tag = "1")]
    pub namespace_options: Option<NamespaceOption>,
}

#[derive(Clone, PartialEq, Message)]
pub struct LinuxPodSandboxConfig {
    #[prost(string, tag = "1")]
    pub cgroup_parent: String,
    #[prost(message, optional, tag = "2")]
    pub security_context: Option<LinuxSandboxSecurityContext>,
}

/// A pod's hostPort: `protocol` 0 is TCP.
#[derive(Clone, PartialEq, Message)]
pub struct PortMapping {
    #[prost(int32, tag = "1")]
    pub protocol: i32,
    #[prost(int32, tag = "2")]
    pub container_port: i32,
    #[prost(int32, tag = "3")]
    pub host_port: i32,
    #[prost(string, tag = "4")]
    pub host_ip: String,
}

#[derive(Clone, PartialEq, Message)]
pub struct PodSandboxConfig {
    #[prost(message, optional, tag = "1")]
    pub metadata: Option<PodSandboxMetadata>,
    #[prost(string, tag = "2")]
    pub hostname: String,
    #[prost(string, tag = "3")]
    pub log_directory: String,
    #[prost(message, optional, tag = "4")]
    pub dns_config: Option<DnsConfig>,
    #[prost(message, repeated, tag = "5")]
    pub port_mappings: Vec<PortMapping>,
    #[prost(map = "string, string", tag = "6")]
    pub labels: HashMap<String, String>,
    #[prost(map = "string, string", tag = "7")]
    pub annotations: HashMap<String, String>,
    #[prost(message, optional, tag = "8")]
    pub linux: Option<LinuxPodSandboxConfig>,
}

#[derive(Clone, PartialEq, Message)]
pub struct RunPodSandboxRequest {
    #[prost(message, optional, tag = "1")]
    pub config: Option<PodSandboxConfig>,
    #[prost(string, tag = "2")]
    pub runtime_handler: String,
}

#[derive(Clone, PartialEq, Message)]
pub struct RunPodSandboxResponse {
    #[prost(string, tag = "1")]
    pub pod_sandbox_id: String,
}

/// The request of StopPodSandbox and RemovePodSandbox.
#[derive(Clone, PartialEq, Message)]
pub struct PodSandboxIdRequest {
    #[prost(string, tag = "1")]
    pub pod_sandbox_id: String,
}

/// The (empty) response of StopPodSandbox and RemovePodSandbox.
#[derive(Clone, PartialEq, Message)]
pub struct Empty {}

#[derive(Clone, PartialEq, Message)]
pub struct PodSandboxStatusRequest {
    #[prost(string, tag = "1")]
    pub pod_sandbox_id: String,
    #[prost(bool, tag = "2")]
    pub verbose: bool,
}

#[derive(Clone, PartialEq, Message)]
pub struct PodSandboxStatusResponse {
    #[prost(message, optional, tag = "1")]
    pub status: Option<PodSandboxStatus>,
    /// With `verbose`: runtime-specific JSON; containerd's `info` key holds the sandbox's pid.
    #[prost(map = "string, string", tag = "2")]
    pub info: HashMap<String, String>,
}

#[derive(Clone, PartialEq, Message)]
pub struct PodSandboxStatus {
    #[prost(string, tag = "1")]
    pub id: String,
    #[prost(message, optional, tag = "2")]
    pub metadata: Option<PodSandboxMetadata>,
    #[prost(int32, tag = "3")]
    pub state: i32,
    #[prost(message, optional, tag = "5")]
    pub network: Option<PodSandboxNetworkStatus>,
}

#[derive(Clone, PartialEq, Message)]
pub struct PodSandboxNetworkStatus {
    #[prost(string, tag = "1")]
    pub ip: String,
    #[prost(message, repeated, tag = "2")]
    pub additional_ips: Vec<PodIp>,
}

#[derive(Clone, PartialEq, Message)]
pub struct PodIp {
    #[prost(string, tag = "1")]
    pub ip: String,
}

/// ListPodSandbox without a filter: every sandbox.
#[derive(Clone, PartialEq, Message)]
pub struct ListPodSandboxRequest {}

#[derive(Clone, PartialEq, Message)]
pub struct ListPodSandboxResponse {
    #[prost(message, repeated, tag = "1")]
    pub items: Vec<PodSandbox>,
}

#[derive(Clone, PartialEq, Message)]
pub struct PodSandbox {
    #[prost(string, tag = "1")]
    pub id: String,
    #[prost(message, optional, tag = "2")]
    pub metadata: Option<PodSandboxMetadata>,
    #[prost(int32, tag = "3")]
    pub state: i32,
}

/// A CRI client on the runtime's socket, with blocking calls (the tests are synchronous). One
/// current-thread runtime drives the gRPC channel; `run_pod_sandboxes` sends several RunPodSandbox
/// at once over it, as the kubelet's pod workers do.
pub struct RuntimeService {
    runtime: tokio::runtime::Runtime,
    channel: Channel,
}

/// How long one call may take before it fails (the kubelet's default runtime request timeout is 2 min).
pub const CALL_TIMEOUT: Duration = Duration::from_secs(90);

impl RuntimeService {
    /// A client on `socket`. Connects lazily: the first call connects (and fails if nothing listens).
    pub fn new(socket: &Path) -> Self {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let socket: PathBuf = socket.to_path_buf();
        let channel = runtime.block_on(async move {
            // The URI is required by the API but unused: the connector dials the unix socket.
            Endpoint::from_static("http://cri.invalid")
                .connect_timeout(Duration::from_secs(5))
                .timeout(CALL_TIMEOUT)
                .connect_with_connector_lazy(tower::service_fn(move |_: Uri| {
                    let socket = socket.clone();
                    async move {
                        let stream = tokio::net::UnixStream::connect(socket).await?;
                        Ok::<_, std::io::Error>(hyper_util::rt::TokioIo::new(stream))
                    }
                }))
        });
        RuntimeService { runtime, channel }
    }

    async fn call<Req, Resp>(channel: Channel, method: &'static str, request: Req) -> Result<Resp, tonic::Status>
    where
        Req: Message + Send + Sync + 'static,
        Resp: Message + Default + Send + Sync + 'static,
    {
        let mut grpc = tonic::client::Grpc::new(channel);
        grpc.ready().await.map_err(|e| tonic::Status::unavailable(format!("CRI socket not ready: {e}")))?;
        let path = http::uri::PathAndQuery::from_static(method);
        let codec = tonic_prost::ProstCodec::<Req, Resp>::default();
        grpc.unary(tonic::Request::new(request), path, codec).await.map(tonic::Response::into_inner)
    }

    fn block<Req, Resp>(&self, method: &'static str, request: Req) -> Result<Resp, tonic::Status>
    where
        Req: Message + Send + Sync + 'static,
        Resp: Message + Default + Send + Sync + 'static,
    {
        self.runtime.block_on(Self::call(self.channel.clone(), method, request))
    }

    pub fn status(&self) -> Result<StatusResponse, tonic::Status> {
        self.block("/runtime.v1.RuntimeService/Status", StatusRequest { verbose: false })
    }

    pub fn run_pod_sandbox(&self, config: PodSandboxConfig) -> Result<String, tonic::Status> {
        let request = RunPodSandboxRequest { config: Some(config), runtime_handler: String::new() };
        let response: RunPodSandboxResponse = self.block("/runtime.v1.RuntimeService/RunPodSandbox", request)?;
        Ok(response.pod_sandbox_id)
    }

    /// RunPodSandbox for every config at once; the results in the same order.
    pub fn run_pod_sandboxes(&self, configs: Vec<PodSandboxConfig>) -> Vec<Result<String, tonic::Status>> {
        let calls = configs.into_iter().map(|config| {
            let request = RunPodSandboxRequest { config: Some(config), runtime_handler: String::new() };
            let call = Self::call::<_, RunPodSandboxResponse>(
                self.channel.clone(),
                "/runtime.v1.RuntimeService/RunPodSandbox",
                request,
            );
            async move { call.await.map(|r| r.pod_sandbox_id) }
        });
        self.runtime.block_on(futures::future::join_all(calls))
    }

    pub fn pod_sandbox_status(&self, id: &str) -> Result<PodSandboxStatusResponse, tonic::Status> {
        let request = PodSandboxStatusRequest { pod_sandbox_id: id.to_string(), verbose: true };
        self.block("/runtime.v1.RuntimeService/PodSandboxStatus", request)
    }

    pub fn stop_pod_sandbox(&self, id: &str) -> Result<(), tonic::Status> {
        let request = PodSandboxIdRequest { pod_sandbox_id: id.to_string() };
        self.block::<_, Empty>("/runtime.v1.RuntimeService/StopPodSandbox", request).map(drop)
    }

    pub fn remove_pod_sandbox(&self, id: &str) -> Result<(), tonic::Status> {
        let request = PodSandboxIdRequest { pod_sandbox_id: id.to_string() };
        self.block::<_, Empty>("/runtime.v1.RuntimeService/RemovePodSandbox", request).map(drop)
    }

    pub fn list_pod_sandbox(&self) -> Result<Vec<PodSandbox>, tonic::Status> {
        let response: ListPodSandboxResponse =
            self.block("/runtime.v1.RuntimeService/ListPodSandbox", ListPodSandboxRequest {})?;
        Ok(response.items)
    }
}
