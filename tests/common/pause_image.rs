//! The pod sandbox image for containerd, built locally (no registry is reachable): `pause.c`
//! compiled with `gcc -static`, as the only file of one uncompressed layer, packed as an OCI image
//! layout archive (`oci-layout`, `index.json`, content-addressed blobs) that `ctr images import`
//! takes. The index names the image with containerd's `io.containerd.image.name` annotation.
//! `pack` makes such an image of any directory (the test cluster's yh-genie and busybox images).

use super::must;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use std::path::{Path, PathBuf};

const PAUSE_C: &str = include_str!("pause.c");

/// Build the image named `name` under `dir`; returns the path of the archive.
pub fn build(dir: &Path, name: &str) -> PathBuf {
    let rootfs = dir.join("rootfs");
    std::fs::create_dir_all(&rootfs).unwrap();
    let source = dir.join("pause.c");
    std::fs::write(&source, PAUSE_C).unwrap();
    must(&format!("gcc -static -Os -o {}/pause {}", rootfs.display(), source.display()));
    pack(dir, name, &rootfs, json!({"Entrypoint": ["/pause"]}))
}

/// Pack the directory `rootfs` as the one layer of an image named `name` whose runtime config is
/// `config` (Entrypoint, Cmd, ...), in an OCI layout archive under `dir`; returns its path.
pub fn pack(dir: &Path, name: &str, rootfs: &Path, config: Value) -> PathBuf {
    let layout = dir.join("oci");
    let blobs = layout.join("blobs/sha256");
    std::fs::create_dir_all(&blobs).unwrap();
    let layer_tar = dir.join("layer.tar");
    must(&format!("tar --owner=0 --group=0 --numeric-owner -C {} -cf {} .", rootfs.display(), layer_tar.display()));
    let layer = std::fs::read(&layer_tar).unwrap();
    let layer_digest = add_blob(&blobs, &layer);
    let config = json!({
        "architecture": oci_architecture(), "os": "linux",
        "config": config,
        "rootfs": {"type": "layers", "diff_ids": [layer_digest]},
    });
    let manifest = json!({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": descriptor(&blobs, "application/vnd.oci.image.config.v1+json", &config.to_string().into_bytes()),
        "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar", "digest": layer_digest, "size": layer.len()}],
    });
    let mut entry =
        descriptor(&blobs, "application/vnd.oci.image.manifest.v1+json", &manifest.to_string().into_bytes());
    entry["platform"] = json!({"architecture": oci_architecture(), "os": "linux"});
    entry["annotations"] = json!({"io.containerd.image.name": name});
    let index = json!({"schemaVersion": 2, "manifests": [entry]});
    std::fs::write(layout.join("index.json"), index.to_string()).unwrap();
    std::fs::write(layout.join("oci-layout"), json!({"imageLayoutVersion": "1.0.0"}).to_string()).unwrap();

    let archive = dir.join("image.tar");
    must(&format!("tar -C {} -cf {} .", layout.display(), archive.display()));
    archive
}

/// Store `bytes` as a blob; returns its digest (`sha256:...`).
fn add_blob(blobs: &Path, bytes: &[u8]) -> String {
    let hex: String = Sha256::digest(bytes).iter().map(|b| format!("{b:02x}")).collect();
    std::fs::write(blobs.join(&hex), bytes).unwrap();
    format!("sha256:{hex}")
}

/// Store `bytes` as a blob; returns its OCI descriptor.
fn descriptor(blobs: &Path, media_type: &str, bytes: &[u8]) -> Value {
    json!({"mediaType": media_type, "digest": add_blob(blobs, bytes), "size": bytes.len()})
}

/// This machine's architecture as OCI names it.
fn oci_architecture() -> &'static str {
    match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        other => other,
    }
}
