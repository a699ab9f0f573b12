//! The binary as people meet it: one program, many names; `--help` and `--version` without
//! CNI_COMMAND; the CNI protocol with it.

use std::process::{Command, Stdio};

fn run_as(name: &str, args: &[&str], env: &[(&str, &str)]) -> (i32, String, String) {
    let dir = tempfile::tempdir().unwrap();
    let link = dir.path().join(name);
    std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_yh-genie"), &link).unwrap();
    let out = Command::new(&link)
        .args(args)
        .env_remove("CNI_COMMAND")
        .env(yh_genie::node::paths::LOCK_DIR_VAR, dir.path().join("locks"))
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// The selector's name and every plugin's.
fn every_name() -> impl Iterator<Item = &'static str> {
    std::iter::once(yh_genie::programs::selector::NAME).chain(yh_genie::programs::plugins::NAMES)
}

#[test]
fn every_name_answers_version_as_its_plugin() {
    for name in every_name() {
        let (code, out, _) = run_as(name, &["--version"], &[]);
        assert_eq!(code, 0);
        assert!(out.starts_with(&format!("{name} {}", env!("CARGO_PKG_VERSION"))), "{out}");
        assert!(out.contains("0.1.0, 0.2.0, 0.3.0, 0.3.1, 0.4.0, 1.0.0, 1.1.0"), "{out}");
    }
}

#[test]
fn every_name_answers_help_naming_the_commands() {
    for name in every_name() {
        let (code, out, _) = run_as(name, &["--help"], &[]);
        assert_eq!(code, 0);
        assert!(out.contains("install") && out.contains("explain") && out.contains("CNI_COMMAND"), "{out}");
        assert!(out.contains("agent ") && out.contains("attach-worker"), "{out}");
    }
}

/// `--help` (and `-h`) is an answer, not a usage error, for the program and each of its commands:
/// exit 0, the usage on stdout, nothing on stderr.
#[test]
fn every_command_answers_help_with_status_0() {
    for args in [
        &["--help"][..],
        &["-h"],
        &["help"],
        &["install", "--help"],
        &["install", "-h"],
        &["explain", "--help"],
        &["explain", "-h"],
        &["explain", "help"],
        &["explain", "--pod", "web-0", "--help"],
        &["agent", "--help"],
        &["agent", "-h"],
        &["attach-worker", "--help"],
        &["attach-worker", "help"],
        &["cleanup", "--help"],
        &["help", "install"],
    ] {
        let (code, out, err) = run_as("yh-genie", args, &[]);
        assert_eq!(code, 0, "yh-genie {args:?}: {err}");
        assert!(err.is_empty(), "yh-genie {args:?}: {err}");
        let usage = match args.iter().find(|a| !a.starts_with('-') && **a != "help") {
            Some(&"install") => "Usage: yh-genie install",
            Some(&"explain") => "Usage: yh-genie explain",
            Some(&"attach-worker") => "Usage: yh-genie attach-worker",
            Some(&"agent") => "Usage: yh-genie agent",
            Some(&"cleanup") => "Usage: yh-genie cleanup",
            _ => "Usage: yh-genie [COMMAND]",
        };
        assert!(out.contains(usage), "yh-genie {args:?}: {out}");
    }
    // A usage error is still one: status 2, the usage on stderr.
    let (code, out, err) = run_as("yh-genie", &["explain", "--bogus"], &[]);
    assert_eq!((code, out.as_str()), (2, ""));
    assert!(err.contains("--bogus") && err.contains("Usage: yh-genie explain"), "{err}");
}

#[test]
fn cleanup_refuses_while_yh_genie_is_installed_and_says_when_nothing_is_left() {
    let node = tempfile::tempdir().unwrap();
    let conf_dir = node.path().join("net.d");
    std::fs::create_dir_all(&conf_dir).unwrap();
    std::fs::write(conf_dir.join("00-yh-genie.conflist"), "{}").unwrap();
    let data_dir = node.path().join("yh-genie");
    let (conf, data) = (conf_dir.display().to_string(), data_dir.display().to_string());
    let args = ["cleanup", "--conf-dir", conf.as_str(), "--data-dir", data.as_str()];
    let (code, _, err) = run_as("yh-genie", &args, &[]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("still installed") && err.contains("00-yh-genie.conflist"), "{err}");
    // Uninstalled, and no pod's records: nothing to do, and it says so.
    std::fs::remove_file(conf_dir.join("00-yh-genie.conflist")).unwrap();
    let (code, out, err) = run_as("yh-genie", &args, &[]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("nothing of yh-genie's pods is left"), "{out}");
}

#[test]
fn an_unknown_command_is_a_usage_error() {
    let (code, out, err) = run_as("yh-genie", &["frobnicate"], &[]);
    assert_eq!(code, 2);
    assert!(out.is_empty());
    assert!(err.contains("frobnicate") && err.contains("--help"), "{err}");
}

#[test]
fn with_cni_command_it_speaks_the_protocol_not_the_cli() {
    let (code, out, _) = run_as("yonghui", &["--help"], &[("CNI_COMMAND", "VERSION")]);
    assert_eq!(code, 0);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(
        v["supportedVersions"],
        serde_json::json!(["0.1.0", "0.2.0", "0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0"])
    );
    let (code, out, _) = run_as("yh-genie", &[], &[("CNI_COMMAND", "ADD")]);
    assert_eq!(code, 1);
    let e: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(e["code"], 4);
    assert!(e["msg"].as_str().unwrap().contains("CNI_CONTAINERID"), "{e}");
}
