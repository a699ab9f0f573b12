use super::*;
use crate::platform::cni::Command;
use crate::platform::cni::testing::invocation;

fn conf(ipam: Value) -> PluginConf {
    PluginConf::parse(
        json!({"cniVersion": "1.0.0", "name": "net", "type": "yh-bridge", "ipam": ipam}).to_string().as_bytes(),
    )
    .unwrap()
}

fn args(raw: &str) -> CniArgs {
    CniArgs::parse(raw).unwrap()
}

fn store(dir: &Path, ipam: Value) -> HostLocal {
    let mut ipam = ipam;
    ipam["type"] = "host-local".into();
    ipam["dataDir"] = dir.display().to_string().into();
    HostLocal::from_conf(&conf(ipam), &args("IgnoreUnknown=1;K8S_POD_NAME=p")).expect("runs in process")
}

fn add(h: &HostLocal, id: &str) -> Result<Value, CniError> {
    let mut inv = invocation(Command::Add, Path::new("/nonexistent"));
    inv.container_id = id.into();
    h.run(Command::Add, &inv).unwrap().map(|out| serde_json::from_slice(&out).unwrap())
}

fn del(h: &HostLocal, id: &str) {
    let mut inv = invocation(Command::Del, Path::new("/nonexistent"));
    inv.container_id = id.into();
    h.run(Command::Del, &inv).unwrap().unwrap();
}

fn address(result: &Value) -> &str {
    result["ips"][0]["address"].as_str().unwrap()
}

#[test]
fn allocates_round_robin_in_host_locals_files() {
    let d = tempfile::tempdir().unwrap();
    let h = store(d.path(), json!({"subnet": "10.1.17.0/24", "routes": [{"dst": "10.1.0.0/16"}]}));
    let first = add(&h, "c1").unwrap();
    assert_eq!(
        first,
        json!({"cniVersion": "1.0.0", "ips": [{"address": "10.1.17.2/24", "gateway": "10.1.17.1"}],
               "routes": [{"dst": "10.1.0.0/16"}], "dns": {}})
    );
    let dir = d.path().join("net");
    assert_eq!(fs::read_to_string(dir.join("10.1.17.2")).unwrap(), "c1\r\neth0");
    assert_eq!(fs::read_to_string(dir.join("last_reserved_ip.0")).unwrap(), "10.1.17.2");
    assert!(dir.join("lock").exists());
    assert_eq!(address(&add(&h, "c2").unwrap()), "10.1.17.3/24");
    // Released, .2 is not handed out again until the range comes round.
    del(&h, "c1");
    assert!(!dir.join("10.1.17.2").exists());
    assert_eq!(address(&add(&h, "c3").unwrap()), "10.1.17.4/24");
    let mut names: Vec<String> =
        fs::read_dir(&dir).unwrap().map(|e| e.unwrap().file_name().into_string().unwrap()).collect();
    names.sort();
    assert_eq!(names, ["10.1.17.3", "10.1.17.4", "last_reserved_ip.0", "lock"], "no temporary file left");
}

/// The hint is overwritten in place: a shorter address over a longer one leaves exactly the new
/// one, as host-local's own write does (the reference plugin may share the directory).
#[test]
fn the_last_reserved_address_is_exactly_the_last_one_whatever_was_there() {
    let d = tempfile::tempdir().unwrap();
    let h = store(d.path(), json!({"subnet": "10.1.17.0/24"}));
    let dir = d.path().join("net");
    fs::create_dir_all(&dir).unwrap();
    fs::write(dir.join("last_reserved_ip.0"), "10.1.17.229").unwrap();
    assert_eq!(address(&add(&h, "c1").unwrap()), "10.1.17.230/24");
    fs::write(dir.join("last_reserved_ip.0"), "10.1.17.254\n").unwrap();
    assert_eq!(address(&add(&h, "c2").unwrap()), "10.1.17.2/24", "round past the end");
    assert_eq!(fs::read_to_string(dir.join("last_reserved_ip.0")).unwrap(), "10.1.17.2");
}

/// A range of two usable addresses, .5 and .6 (.7 is the broadcast).
fn two_address_range(dir: &Path) -> HostLocal {
    store(dir, json!({"ranges": [[{"subnet": "10.9.0.0/29", "rangeStart": "10.9.0.5"}]]}))
}

#[test]
fn a_full_range_is_code_999_naming_the_range() {
    let d = tempfile::tempdir().unwrap();
    let h = two_address_range(d.path());
    assert_eq!(address(&add(&h, "a").unwrap()), "10.9.0.5/29");
    assert_eq!(address(&add(&h, "b").unwrap()), "10.9.0.6/29");
    // .7 is the broadcast: the range ends at .6.
    let e = add(&h, "c").unwrap_err();
    assert_eq!(e.code, 999);
    assert!(e.msg.contains("no IP addresses available in range set: 10.9.0.5-10.9.0.6"), "{}", e.msg);
}

#[test]
fn allocation_goes_round_to_an_address_freed() {
    let d = tempfile::tempdir().unwrap();
    let h = two_address_range(d.path());
    add(&h, "a").unwrap();
    add(&h, "b").unwrap();
    add(&h, "c").unwrap_err();
    del(&h, "a");
    // The range ends at .6 and starts again at .5.
    assert_eq!(address(&add(&h, "c").unwrap()), "10.9.0.5/29");
}

/// An IPv4 range set with its gateway and an IPv6 one without.
fn dual_stack_ranges(dir: &Path) -> HostLocal {
    store(dir, json!({"ranges": [[{"subnet": "10.1.0.0/24", "gateway": "10.1.0.254"}], [{"subnet": "fd00:1::/64"}]]}))
}

#[test]
fn an_attachment_gets_one_address_per_range_set() {
    let d = tempfile::tempdir().unwrap();
    let h = dual_stack_ranges(d.path());
    let r = add(&h, "c1").unwrap();
    assert_eq!(r["ips"][0], json!({"address": "10.1.0.1/24", "gateway": "10.1.0.254"}));
    assert_eq!(r["ips"][1], json!({"address": "fd00:1::2/64", "gateway": "fd00:1::1"}));
}

#[test]
fn a_second_address_for_the_same_attachment_is_refused() {
    let d = tempfile::tempdir().unwrap();
    let h = dual_stack_ranges(d.path());
    add(&h, "c1").unwrap();
    let e = add(&h, "c1").unwrap_err();
    assert!(e.msg.contains("10.1.0.1 has been allocated to c1, duplicate allocation is not allowed"), "{}", e.msg);
}

#[test]
fn del_frees_the_address_of_every_range_set() {
    let d = tempfile::tempdir().unwrap();
    let h = dual_stack_ranges(d.path());
    add(&h, "c1").unwrap();
    del(&h, "c1");
    assert_eq!(fs::read_dir(d.path().join("net")).unwrap().count(), 3, "the two last_reserved_ip files and the lock");
}

#[test]
fn del_releases_only_its_attachment_or_an_older_host_locals_file() {
    let d = tempfile::tempdir().unwrap();
    let h = store(d.path(), json!({"subnet": "10.1.0.0/24"}));
    add(&h, "c1").unwrap();
    let dir = d.path().join("net");
    fs::write(dir.join("10.1.0.9"), "c1\r\nnet1").unwrap();
    fs::write(dir.join("10.1.0.10"), "c2").unwrap();
    del(&h, "c1");
    assert!(!dir.join("10.1.0.2").exists());
    assert!(dir.join("10.1.0.9").exists(), "another interface of the container keeps its address");
    // Nothing says c2\r\neth0: the file an older host-local wrote with the container id alone goes.
    del(&h, "c2");
    assert!(!dir.join("10.1.0.10").exists());
    del(&h, "c3");
}

#[test]
fn what_host_local_would_do_otherwise_is_left_to_it() {
    let ok = args("IgnoreUnknown=1;K8S_POD_NAME=p");
    let base = json!({"type": "host-local", "subnet": "10.1.0.0/24"});
    assert!(HostLocal::from_conf(&conf(base.clone()), &ok).is_some());
    assert!(HostLocal::from_conf(&conf(base.clone()), &args("")).is_some());
    for (ipam, args) in [
        (json!({"type": "host-local", "subnet": "10.1.0.0/24", "resolvConf": "/etc/resolv.conf"}), ok.clone()),
        (json!({"type": "host-local", "Subnet": "10.1.0.0/24"}), ok.clone()),
        (json!({"type": "host-local", "subnet": "10.1.0.1/24"}), ok.clone()),
        (json!({"type": "host-local", "subnet": "10.1.0.0/31"}), ok.clone()),
        (json!({"type": "host-local", "subnet": "10.1.0.0/24", "rangeStart": "10.2.0.1"}), ok.clone()),
        (
            json!({"type": "host-local", "ranges": [[{"subnet": "10.1.0.0/24"}], [{"subnet": "10.1.0.0/25"}]]}),
            ok.clone(),
        ),
        (json!({"type": "host-local", "ranges": [[{"subnet": "10.1.0.0/24"}, {"subnet": "fd00::/64"}]]}), ok.clone()),
        (json!({"type": "host-local", "ranges": []}), ok.clone()),
        (json!({"type": "host-local", "subnet": "10.1.0.0/24", "routes": {}}), ok.clone()),
        (base.clone(), args("IgnoreUnknown=1;IP=10.1.0.7")),
        (base.clone(), args("K8S_POD_NAME=p")),
        (base.clone(), args("IgnoreUnknown=maybe;K8S_POD_NAME=p")),
    ] {
        assert!(HostLocal::from_conf(&conf(ipam.clone()), &args).is_none(), "{ipam} with {args:?}");
    }
    let mut requested = conf(base.clone());
    requested.raw.insert("runtimeConfig".into(), json!({"ips": ["10.1.0.7/24"]}));
    assert!(HostLocal::from_conf(&requested, &ok).is_none());
    let mut cni_args = conf(base);
    cni_args.raw.insert("args".into(), json!({"cni": {"ips": ["10.1.0.7"]}}));
    assert!(HostLocal::from_conf(&cni_args, &ok).is_none());
}
