//! Images for containerd and CRI-O, built here (no registry is reachable): `pack` makes an OCI
//! image layout archive of a directory with umoci, which `ctr images import` takes, naming the
//! image with containerd's `io.containerd.image.name` annotation (the real cluster's yh-genie,
//! busybox and e2e images); the layout itself stays beside it for skopeo, which copies it into
//! CRI-O's storage (`layout_of`); `pause` is the pod sandbox image, `pause.c` compiled with
//! `gcc -static` as the only file of its one layer.

use crate::process::must;
use serde_json::{Value, json};
use std::path::{Path, PathBuf};

const PAUSE_C: &str = include_str!("pause.c");

/// Build the pause image named `name` under `dir`; returns the path of the archive.
pub fn pause(dir: &Path, name: &str) -> PathBuf {
    let rootfs = dir.join("rootfs");
    std::fs::create_dir_all(&rootfs).unwrap();
    let source = dir.join("pause.c");
    std::fs::write(&source, PAUSE_C).unwrap();
    must(&format!("gcc -static -Os -o {}/pause {}", rootfs.display(), source.display()));
    pack(dir, name, &rootfs, json!({"Entrypoint": ["/pause"]}))
}

/// Pack the directory `rootfs` as the one layer of an image named `name` whose runtime config is
/// `config` (Entrypoint, Cmd, Env), with umoci, into an OCI layout archive under `dir`; returns its
/// path. containerd names an imported image by its index entry's `io.containerd.image.name`.
pub fn pack(dir: &Path, name: &str, rootfs: &Path, config: Value) -> PathBuf {
    let layout = dir.join("oci");
    let image = format!("{}:image", layout.display());
    umoci(&["init", "--layout", &layout.display().to_string()]);
    umoci(&["new", "--image", &image]);
    umoci(&["insert", "--image", &image, &rootfs.display().to_string(), "/"]);
    let mut settings = vec!["config".to_string(), "--image".into(), image.clone()];
    for (key, flag) in [("Entrypoint", "--config.entrypoint"), ("Cmd", "--config.cmd"), ("Env", "--config.env")] {
        for value in config[key].as_array().into_iter().flatten().filter_map(Value::as_str) {
            settings.push(format!("{flag}={value}"));
        }
    }
    umoci(&settings.iter().map(String::as_str).collect::<Vec<_>>());
    let index_path = layout.join("index.json");
    let mut index: Value = serde_json::from_str(&std::fs::read_to_string(&index_path).unwrap()).unwrap();
    for entry in index["manifests"].as_array_mut().expect("umoci's index lists the image") {
        entry["annotations"]["io.containerd.image.name"] = json!(name);
    }
    std::fs::write(&index_path, index.to_string()).unwrap();

    let archive = dir.join("image.tar");
    must(&format!("tar -C {} -cf {} .", layout.display(), archive.display()));
    archive
}

/// The OCI layout an archive of `pack` was made of, as skopeo names an image in it
/// (`<dir>:image`), and the image's name.
pub fn layout_of(archive: &Path) -> (String, String) {
    let layout = archive.with_file_name("oci");
    let index: Value = serde_json::from_str(&std::fs::read_to_string(layout.join("index.json")).unwrap()).unwrap();
    let name = index["manifests"][0]["annotations"]["io.containerd.image.name"].as_str().unwrap_or_default();
    assert!(!name.is_empty(), "{}: no image name in its index", layout.display());
    (format!("{}:image", layout.display()), name.to_string())
}

fn umoci(args: &[&str]) {
    let out =
        std::process::Command::new("umoci").args(args).output().expect("umoci runs (scripts/prereqs.sh installs it)");
    assert!(out.status.success(), "umoci {}: {}", args.join(" "), String::from_utf8_lossy(&out.stderr));
}
