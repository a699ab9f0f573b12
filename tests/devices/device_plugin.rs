//! TEST SUPPORT ONLY, not shipped: a device plugin for the kubelet's device plugin API v1beta1,
//! standing in for the SR-IOV network device plugin. It advertises the links it is given (in the
//! tests, one end of veth pairs made in the node's network namespace) as devices of one resource,
//! registers with the kubelet, and on Allocate writes the device-info file of each allocated device
//! where the SR-IOV device plugin writes it (`<devinfo>/dp/<resource>-<device>-device.json`).
//!
//! `test-device-plugin <resource> <device,device...> [kubelet device-plugins dir] [devinfo dir]`;
//! it runs until killed. The messages are written with prost's derive and served by
//! `testkit::grpc`, so no code generator is needed.

use bytes::Bytes;
use prost::Message;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use testkit::grpc::Answer;

#[derive(Clone, PartialEq, Message)]
struct Empty {}
#[derive(Clone, PartialEq, Message)]
struct RegisterRequest {
    #[prost(string, tag = "1")]
    version: String,
    #[prost(string, tag = "2")]
    endpoint: String,
    #[prost(string, tag = "3")]
    resource_name: String,
}
#[derive(Clone, PartialEq, Message)]
struct Device {
    #[prost(string, tag = "1")]
    id: String,
    #[prost(string, tag = "2")]
    health: String,
}
#[derive(Clone, PartialEq, Message)]
struct ListAndWatchResponse {
    #[prost(message, repeated, tag = "1")]
    devices: Vec<Device>,
}
#[derive(Clone, PartialEq, Message)]
struct ContainerAllocateRequest {
    #[prost(string, repeated, tag = "1")]
    devices_ids: Vec<String>,
}
#[derive(Clone, PartialEq, Message)]
struct AllocateRequest {
    #[prost(message, repeated, tag = "1")]
    container_requests: Vec<ContainerAllocateRequest>,
}
#[derive(Clone, PartialEq, Message)]
struct ContainerAllocateResponse {
    #[prost(map = "string, string", tag = "1")]
    envs: std::collections::HashMap<String, String>,
}
#[derive(Clone, PartialEq, Message)]
struct AllocateResponse {
    #[prost(message, repeated, tag = "1")]
    container_responses: Vec<ContainerAllocateResponse>,
}

struct Plugin {
    resource: String,
    devices: Vec<String>,
    devinfo: PathBuf,
}

fn device_info(id: &str) -> String {
    serde_json::json!({"type": "pci", "version": "1.1.0", "pci": {"pci-address": id}}).to_string()
}

fn answer(plugin: &Plugin, path: &str, message: Bytes) -> Answer {
    match path {
        "/v1beta1.DevicePlugin/ListAndWatch" => {
            let devices = plugin.devices.iter().map(|id| Device { id: id.clone(), health: "Healthy".into() }).collect();
            Answer::Open(ListAndWatchResponse { devices }.encode_to_vec())
        }
        "/v1beta1.DevicePlugin/Allocate" => {
            let asked = AllocateRequest::decode(message).unwrap_or_default();
            let mut responses = Vec::new();
            for container in asked.container_requests {
                // As the SR-IOV device plugin: each allocated device's info, for the CNI.
                for id in &container.devices_ids {
                    let name = format!("{}-{}-device.json", plugin.resource.replace('/', "-"), id.replace('/', "-"));
                    let file = plugin.devinfo.join("dp").join(name);
                    std::fs::create_dir_all(file.parent().unwrap()).ok();
                    if let Err(e) = std::fs::write(&file, device_info(id)) {
                        eprintln!("test-device-plugin: {}: {e}", file.display());
                    }
                }
                let envs = [("TEST_DEVICES".to_string(), container.devices_ids.join(","))].into();
                responses.push(ContainerAllocateResponse { envs });
            }
            Answer::Message(AllocateResponse { container_responses: responses }.encode_to_vec())
        }
        // GetDevicePluginOptions (none), GetPreferredAllocation and PreStartContainer (not asked
        // for, as the options say): empty answers.
        _ => Answer::Message(Empty {}.encode_to_vec()),
    }
}

async fn register(kubelet: &Path, endpoint: &str, resource: &str) -> Result<(), String> {
    let socket = kubelet.to_path_buf();
    let channel = tonic::transport::Endpoint::from_static("http://kubelet.invalid")
        .connect_with_connector(tower::service_fn(move |_: tonic::transport::Uri| {
            let socket = socket.clone();
            async move {
                let stream = tokio::net::UnixStream::connect(socket).await?;
                Ok::<_, std::io::Error>(hyper_util::rt::TokioIo::new(stream))
            }
        }))
        .await
        .map_err(|e| format!("connecting to {}: {e}", kubelet.display()))?;
    let mut grpc = tonic::client::Grpc::new(channel);
    grpc.ready().await.map_err(|e| e.to_string())?;
    let request =
        RegisterRequest { version: "v1beta1".into(), endpoint: endpoint.into(), resource_name: resource.into() };
    let codec = tonic_prost::ProstCodec::<RegisterRequest, Empty>::default();
    let path = http::uri::PathAndQuery::from_static("/v1beta1.Registration/Register");
    grpc.unary(tonic::Request::new(request), path, codec).await.map_err(|e| format!("Register: {e}"))?;
    Ok(())
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.len() < 3 {
        eprintln!("usage: test-device-plugin <resource> <device,device...> [device-plugins dir] [devinfo dir]");
        std::process::exit(2);
    }
    let dir = PathBuf::from(args.get(3).map_or("/var/lib/kubelet/device-plugins", String::as_str));
    let plugin = Arc::new(Plugin {
        resource: args[1].clone(),
        devices: args[2].split(',').filter(|d| !d.is_empty()).map(String::from).collect(),
        devinfo: PathBuf::from(args.get(4).map_or("/var/run/k8s.cni.cncf.io/devinfo", String::as_str)),
    });
    let endpoint = format!("yh-test-{}.sock", plugin.resource.replace(['/', '.'], "-"));
    let socket = dir.join(&endpoint);
    let _ = std::fs::remove_file(&socket);
    let listener = testkit::grpc::bind(&socket).expect("binding the plugin's socket");
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    runtime.block_on(async move {
        let handler: testkit::grpc::Handler = {
            let plugin = plugin.clone();
            Arc::new(move |path: &str, message: Bytes| answer(&plugin, path, message))
        };
        let serving = tokio::spawn(testkit::grpc::serve(listener, handler));
        if let Err(e) = register(&dir.join("kubelet.sock"), &endpoint, &plugin.resource).await {
            eprintln!("test-device-plugin: {e}");
            std::process::exit(1);
        }
        eprintln!("test-device-plugin: {} registered with {} devices", plugin.resource, plugin.devices.len());
        if let Ok(Err(e)) = serving.await {
            eprintln!("test-device-plugin: serving: {e}");
            std::process::exit(1);
        }
    });
}
