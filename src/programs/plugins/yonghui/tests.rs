use super::*;
use serde_json::{Value, json};
use std::os::unix::fs::PermissionsExt;

/// A node in a temp dir: a subnet.env, a data dir, and a scripted delegate `fake` on the CNI
/// path that logs each command, keeps its stdin, fails a command when told to, and answers ADD
/// with the file `answer` when there is one.
struct Node {
    dir: tempfile::TempDir,
}

impl Node {
    fn new() -> Self {
        let node = Node { dir: tempfile::tempdir().unwrap() };
        let d = node.dir.path().display();
        let script = format!(
            r#"#!/bin/sh
echo "$CNI_COMMAND" >> {d}/calls
cat > {d}/stdin-$CNI_COMMAND
if [ -f {d}/fail-$CNI_COMMAND ]; then echo '{{"code":11,"msg":"injected failure"}}'; exit 1; fi
if [ "$CNI_COMMAND" = ADD ]; then
  cmp -s {d}/stdin-ADD "{d}/data/c1:$CNI_IFNAME" || {{ echo '{{"code":999,"msg":"config not saved before ADD"}}'; exit 1; }}
  if [ -f {d}/answer ]; then cat {d}/answer; exit 0; fi
  echo '{{"cniVersion":"1.0.0","ips":[{{"address":"10.1.17.2/24","gateway":"10.1.17.1"}}]}}'
fi
"#
        );
        let fake = node.path("bin/fake");
        std::fs::create_dir_all(fake.parent().unwrap()).unwrap();
        crate::platform::cni::testing::write_executable(&fake, script);
        std::fs::write(
            node.path("subnet.env"),
            "FLANNEL_NETWORK=10.1.0.0/16\nFLANNEL_SUBNET=10.1.17.1/24\nFLANNEL_MTU=1472\nFLANNEL_IPMASQ=true\n",
        )
        .unwrap();
        node
    }

    fn path(&self, rel: &str) -> PathBuf {
        self.dir.path().join(rel)
    }

    fn saved(&self) -> PathBuf {
        self.path("data/c1:eth0")
    }

    fn calls(&self) -> String {
        std::fs::read_to_string(self.path("calls")).unwrap_or_default()
    }

    fn stdin_of(&self, command: &str) -> Value {
        serde_json::from_slice(&std::fs::read(self.path(&format!("stdin-{command}"))).unwrap()).unwrap()
    }

    fn fail(&self, command: &str, fail: bool) {
        let flag = self.path(&format!("fail-{command}"));
        if fail { std::fs::write(flag, "").unwrap() } else { std::fs::remove_file(flag).unwrap() }
    }

    fn inv(&self, command: Command) -> Invocation {
        self.inv_on(command, "eth0")
    }

    fn inv_on(&self, command: Command, ifname: &str) -> Invocation {
        let path = self.path("bin").display().to_string();
        Invocation::from_env(|k| {
            Some(match k {
                "CNI_COMMAND" => command.as_str().to_string(),
                "CNI_CONTAINERID" => "c1".into(),
                "CNI_NETNS" => "/run/netns/pod".into(),
                "CNI_IFNAME" => ifname.into(),
                "CNI_PATH" => path.clone(),
                _ => return None,
            })
        })
        .unwrap()
    }

    fn conf(&self, extra: Value) -> PluginConf {
        let mut conf = json!({
            "cniVersion": "1.0.0", "name": "mynet", "type": "yonghui",
            "subnetFile": self.path("subnet.env"), "dataDir": self.path("data"),
            "delegate": {"type": "fake"}
        });
        conf.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
        PluginConf::from_value(conf).unwrap()
    }

    fn add(&self) -> Result<CniResult, CniError> {
        Yonghui.add(&self.inv(Command::Add), &self.conf(json!({})), &Operation::default())
    }

    fn del(&self) -> Result<(), CniError> {
        Yonghui.del(&self.inv(Command::Del), &self.conf(json!({})), &Operation::default())
    }
}

fn mode(path: &Path) -> u32 {
    std::fs::metadata(path).unwrap().permissions().mode() & 0o777
}

#[test]
fn add_saves_the_generated_config_privately_before_delegating() {
    let node = Node::new();
    let result = node.add().unwrap();
    assert_eq!(result.ips[0].address.to_string(), "10.1.17.2/24");
    // The script checked that the saved file held its stdin when its ADD ran.
    let sent = node.stdin_of("ADD");
    assert_eq!(sent["ipam"]["subnet"], "10.1.17.0/24");
    assert_eq!(sent["name"], "mynet");
    assert_eq!(serde_json::from_slice::<Value>(&std::fs::read(node.saved()).unwrap()).unwrap(), sent);
    assert_eq!((mode(&node.saved()), mode(&node.path("data"))), (0o600, 0o700));
    assert_eq!(node.calls(), "ADD\n");
}

#[test]
fn a_failed_delegate_add_is_undone() {
    let node = Node::new();
    node.fail("ADD", true);
    node.add().unwrap_err();
    assert_eq!(node.calls(), "ADD\nDEL\n");
    assert_eq!(node.stdin_of("DEL"), node.stdin_of("ADD"));
    assert!(!node.saved().exists());
}

#[test]
fn a_failed_delegate_adds_error_is_returned() {
    let node = Node::new();
    node.fail("ADD", true);
    let e = node.add().unwrap_err();
    assert_eq!(e.code, 11);
    assert_eq!(e.msg, "delegate fake ADD: injected failure");
}

#[test]
fn an_error_before_delegation_leaves_nothing_behind() {
    let node = Node::new();
    std::fs::remove_file(node.path("subnet.env")).unwrap();
    assert_eq!(node.add().unwrap_err().code, 5);
    let bad =
        Yonghui.add(&node.inv(Command::Add), &node.conf(json!({"delegate": {"name": "x"}})), &Operation::default());
    assert_eq!(bad.unwrap_err().code, 7);
    assert!(!node.path("data").exists());
    assert_eq!(node.calls(), "");
}

#[test]
fn an_unknown_delegate_is_refused_leaving_nothing() {
    let node = Node::new();
    let e = Yonghui.add(
        &node.inv(Command::Add),
        &node.conf(json!({"delegate": {"type": "no-such-plugin"}})),
        &Operation::default(),
    );
    let e = e.unwrap_err();
    assert!(e.msg.contains("delegate no-such-plugin ADD") && e.msg.contains("no-such-plugin"), "{e}");
    assert_eq!(std::fs::read_dir(node.path("data")).unwrap().count(), 0);
}

/// A node whose attachment was ADDed, then DELeted without subnet.env or the delegate section.
fn added_then_deleted() -> Node {
    let node = Node::new();
    node.add().unwrap();
    // DEL does not depend on subnet.env or the delegate section any more.
    std::fs::remove_file(node.path("subnet.env")).unwrap();
    Yonghui
        .del(&node.inv(Command::Del), &node.conf(json!({"delegate": {"type": "other"}})), &Operation::default())
        .unwrap();
    node
}

#[test]
fn del_replays_the_saved_config_then_forgets_it() {
    let node = added_then_deleted();
    assert_eq!(node.stdin_of("DEL"), node.stdin_of("ADD"));
    assert!(!node.saved().exists());
    assert_eq!(node.calls(), "ADD\nDEL\n");
}

#[test]
fn a_second_del_does_nothing() {
    let node = added_then_deleted();
    // Again: nothing saved and no subnet.env, so nothing is known to undo.
    node.del().unwrap();
    assert_eq!(node.calls(), "ADD\nDEL\n");
}

/// A save lost to a power loss (it is not fsync'd): DEL makes the configuration again from
/// subnet.env, and the delegate releases what the ADD took.
#[test]
fn del_without_a_saved_config_runs_the_delegate_with_one_made_again() {
    let node = Node::new();
    node.add().unwrap();
    let added = node.stdin_of("ADD");
    std::fs::remove_file(node.saved()).unwrap();
    node.del().unwrap();
    assert_eq!(node.calls(), "ADD\nDEL\n");
    assert_eq!(node.stdin_of("DEL"), added);
    node.del().unwrap();
    assert_eq!(node.calls(), "ADD\nDEL\nDEL\n", "a DEL repeated is the delegate's DEL repeated");
}

#[test]
fn failed_delegate_del_keeps_the_file_for_the_retry() {
    let node = Node::new();
    node.add().unwrap();
    node.fail("DEL", true);
    let e = node.del().unwrap_err();
    assert_eq!((e.code, e.msg.as_str()), (11, "delegate fake DEL: injected failure"));
    assert!(node.saved().exists());
    node.fail("DEL", false);
    node.del().unwrap();
    assert!(!node.saved().exists());
    assert_eq!(node.calls(), "ADD\nDEL\nDEL\n");
}

#[test]
fn an_unreadable_saved_config_is_dropped_by_a_del_that_succeeds() {
    let node = Node::new();
    std::fs::create_dir_all(node.path("data")).unwrap();
    std::fs::write(node.saved(), "{not json").unwrap();
    node.del().unwrap();
    assert!(!node.saved().exists());
    assert_eq!(node.calls(), "");
}

#[test]
fn del_without_a_saved_config_forgets_a_save_that_was_interrupted() {
    let node = Node::new();
    std::fs::create_dir_all(node.path("data")).unwrap();
    let mut writer = std::process::Command::new("true").spawn().unwrap();
    writer.wait().unwrap();
    // What a save leaves when its process is killed before the rename.
    let temp = node.path(&format!("data/.c1:eth0.tmp-{}-0123456789ab", writer.id()));
    std::fs::write(&temp, "{\"half\":").unwrap();
    node.del().unwrap();
    assert!(!temp.exists());
    assert_eq!(node.calls(), "DEL\n", "the delegate's DEL, with the configuration made again");
}

/// A configuration without a cniVersion, on a node whose fake delegate answers as an old plugin
/// given such a configuration would.
fn versionless_conf_answered_in_0_1_0(node: &Node) -> PluginConf {
    let answer = r#"{"ip4":{"ip":"10.1.17.2/24","gateway":"10.1.17.1","routes":[{"dst":"10.1.0.0/16"}]},"dns":{}}"#;
    std::fs::write(node.path("answer"), answer).unwrap();
    let mut conf = node.conf(json!({})).raw;
    conf.remove("cniVersion");
    PluginConf::from_value(Value::Object(conf)).unwrap()
}

#[test]
fn without_a_version_the_delegate_gets_none() {
    let node = Node::new();
    let conf = versionless_conf_answered_in_0_1_0(&node);
    Yonghui.add(&node.inv(Command::Add), &conf, &Operation::default()).unwrap();
    assert!(node.stdin_of("ADD").get("cniVersion").is_none(), "{}", node.stdin_of("ADD"));
    // DEL replays the saved bytes, version-less as they were.
    Yonghui.del(&node.inv(Command::Del), &conf, &Operation::default()).unwrap();
    assert!(node.stdin_of("DEL").get("cniVersion").is_none());
}

#[test]
fn a_delegates_0_1_0_answer_is_read() {
    let node = Node::new();
    let conf = versionless_conf_answered_in_0_1_0(&node);
    let result = Yonghui.add(&node.inv(Command::Add), &conf, &Operation::default()).unwrap();
    assert_eq!(result.ips[0].address.to_string(), "10.1.17.2/24");
    assert_eq!(result.routes[0].dst.to_string(), "10.1.0.0/16");
}

#[test]
fn two_interfaces_of_one_container_keep_a_file_each() {
    let node = Node::new();
    node.add().unwrap();
    let other = node.conf(json!({"name": "second"}));
    Yonghui.add(&node.inv_on(Command::Add, "net1"), &other, &Operation::default()).unwrap();
    assert!(node.saved().exists() && node.path("data/c1:net1").exists());
    node.del().unwrap();
    assert!(!node.saved().exists());
    assert!(node.path("data/c1:net1").exists(), "net1's file is not eth0's");
    Yonghui.del(&node.inv_on(Command::Del, "net1"), &other, &Operation::default()).unwrap();
    assert!(!node.path("data/c1:net1").exists());
    assert_eq!(node.calls(), "ADD\nADD\nDEL\nDEL\n");
}

/// What the release before several networks left: `<dataDir>/<containerID>`.
fn saved_by_the_earlier_release(node: &Node) -> PathBuf {
    node.add().unwrap();
    let legacy = node.path("data/c1");
    std::fs::rename(node.saved(), &legacy).unwrap();
    std::fs::remove_file(node.path("calls")).unwrap();
    legacy
}

#[test]
fn a_file_saved_by_the_earlier_release_is_checked_by_its_own_network() {
    let node = Node::new();
    saved_by_the_earlier_release(&node);
    Yonghui.check(&node.inv(Command::Check), &node.conf(json!({})), &Operation::default()).unwrap();
    assert_eq!(node.calls(), "CHECK\n");
}

#[test]
fn a_file_saved_by_the_earlier_release_is_deleted_by_its_own_network() {
    let node = Node::new();
    let legacy = saved_by_the_earlier_release(&node);
    node.del().unwrap();
    assert_eq!(node.calls(), "DEL\n");
    assert_eq!(node.stdin_of("DEL"), node.stdin_of("ADD"), "its own configuration, replayed");
    assert!(!legacy.exists());
}

#[test]
fn a_file_saved_by_the_earlier_release_is_left_to_the_network_it_belongs_to() {
    let node = Node::new();
    let legacy = saved_by_the_earlier_release(&node);
    // The same pod's other yonghui network, in the same data dir, on net1.
    let other = node.conf(json!({"name": "second"}));
    Yonghui.del(&node.inv_on(Command::Del, "net1"), &other, &Operation::default()).unwrap();
    let e = Yonghui.check(&node.inv_on(Command::Check, "net1"), &other, &Operation::default()).unwrap_err();
    assert_eq!(e.code, 3);
    assert!(legacy.exists(), "not second's");
    // second saved nothing of its own: its delegate's DEL, configured again from subnet.env.
    assert_eq!(node.calls(), "DEL\n");
    assert_eq!(node.stdin_of("DEL")["name"], "second");
    node.del().unwrap();
    assert!(!legacy.exists());
    assert_eq!(node.calls(), "DEL\nDEL\n");
}

#[test]
fn check_forwards_the_saved_config_with_the_runtime_prev_result() {
    let node = Node::new();
    let e = Yonghui.check(&node.inv(Command::Check), &node.conf(json!({})), &Operation::default()).unwrap_err();
    assert_eq!(e.code, 3);
    assert!(e.msg.contains("c1") && e.msg.contains(&node.path("data").display().to_string()), "{e}");

    node.add().unwrap();
    let prev = json!({"cniVersion": "1.0.0", "ips": [{"address": "10.1.17.2/24", "gateway": "10.1.17.1"}]});
    Yonghui.check(&node.inv(Command::Check), &node.conf(json!({"prevResult": prev})), &Operation::default()).unwrap();
    let mut want = node.stdin_of("ADD");
    want["prevResult"] =
        json!({"cniVersion": "1.0.0", "ips": [{"address": "10.1.17.2/24", "gateway": "10.1.17.1"}], "dns": {}});
    assert_eq!(node.stdin_of("CHECK"), want);

    node.fail("CHECK", true);
    let e = Yonghui.check(&node.inv(Command::Check), &node.conf(json!({})), &Operation::default()).unwrap_err();
    assert_eq!((e.code, e.msg.as_str()), (11, "delegate fake CHECK: injected failure"));
}

#[test]
fn status_is_not_available_until_subnet_env_is_usable_then_asks_the_delegate() {
    let node = Node::new();
    let conf = node.conf(json!({"cniVersion": "1.1.0"}));
    std::fs::write(node.path("subnet.env"), "FLANNEL_MTU=1472\n").unwrap();
    let e = Yonghui.status(&node.inv(Command::Status), &conf, &Operation::default()).unwrap_err();
    assert_eq!(e.code, 50);
    assert!(e.msg.contains("subnet.env is missing FLANNEL_NETWORK"), "{e}");
    std::fs::remove_file(node.path("subnet.env")).unwrap();
    assert_eq!(Yonghui.status(&node.inv(Command::Status), &conf, &Operation::default()).unwrap_err().code, 50);
    assert_eq!(node.calls(), "");

    let node = Node::new();
    let conf = node.conf(json!({"cniVersion": "1.1.0"}));
    Yonghui.status(&node.inv(Command::Status), &conf, &Operation::default()).unwrap();
    assert_eq!(node.calls(), "STATUS\n");
    node.fail("STATUS", true);
    let e = Yonghui.status(&node.inv(Command::Status), &conf, &Operation::default()).unwrap_err();
    assert_eq!((e.code, e.msg.as_str()), (11, "delegate fake STATUS: injected failure"));
}

/// A node with one attachment ADDed, after a GC that names another as the only valid one.
fn gc_naming_another_attachment() -> (Node, Value) {
    let node = Node::new();
    node.add().unwrap();
    let valid = json!([{"containerID": "other", "ifname": "eth0"}]);
    let conf = node.conf(json!({"cniVersion": "1.1.0", VALID_ATTACHMENTS: valid}));
    Yonghui.gc(&node.inv(Command::Gc), &conf, &Operation::default()).unwrap();
    (node, valid)
}

#[test]
fn gc_is_forwarded_with_the_valid_attachments() {
    let (node, valid) = gc_naming_another_attachment();
    let sent = node.stdin_of("GC");
    assert_eq!(sent[VALID_ATTACHMENTS], valid);
    assert_eq!(sent["ipam"]["subnet"], "10.1.17.0/24");
}

#[test]
fn gc_keeps_the_saved_configurations() {
    let (node, _) = gc_naming_another_attachment();
    assert!(node.saved().exists());
}

/// Without `dataDir`, DEL and CHECK look in the default (tmpfs) and where 0.1.0 saved
/// by default: a pod ADDed before the upgrade is torn down with its own saved configuration, once.
#[test]
fn a_configuration_saved_where_0_1_0_saved_it_is_still_found() {
    let node = Node::new();
    node.add().unwrap();
    let earlier = node.path("earlier");
    std::fs::create_dir_all(&earlier).unwrap();
    std::fs::rename(node.saved(), earlier.join("c1:eth0")).unwrap();
    std::fs::remove_file(node.path("calls")).unwrap();
    let dirs = [node.path("data"), earlier.clone()];
    let (conf, inv) = (node.conf(json!({})), node.inv(Command::Del));
    check_from(&crate::programs::plugins::Registry, &dirs, &node.inv(Command::Check), &conf).unwrap();
    del_from(&crate::programs::plugins::Registry, &dirs, &inv, &conf).unwrap();
    assert_eq!(node.calls(), "CHECK\nDEL\n", "one DEL, with the configuration saved at ADD");
    assert_eq!(node.stdin_of("DEL"), node.stdin_of("ADD"));
    assert!(!earlier.join("c1:eth0").exists());
    // Saved nowhere any more: one DEL made again from subnet.env, and CHECK knows no container.
    del_from(&crate::programs::plugins::Registry, &dirs, &inv, &conf).unwrap();
    assert_eq!(node.calls(), "CHECK\nDEL\nDEL\n");
    let e = check_from(&crate::programs::plugins::Registry, &dirs, &node.inv(Command::Check), &conf).unwrap_err();
    assert!(e.code == 3 && e.msg.contains(&earlier.display().to_string()), "{e}");
}
