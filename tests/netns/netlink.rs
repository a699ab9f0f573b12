//! The netlink layer against a real kernel, inside throwaway network namespaces: every operation is
//! checked with `ip`/`bridge` JSON output, the way an operator would look.

use serde_json::Value;
use std::fs::File;
use std::os::fd::AsFd;
use std::time::Duration;
use testkit::netns::Netns;
use testkit::require_root;
use yh_genie::platform::cni::code;
use yh_genie::platform::netlink::{IpFamily, MacAddr, Netlink, OperState, Route, Rule, VethPair};

/// Run `f` with a netlink socket inside `ns`, on a thread that lives in that netns.
fn in_ns<T: Send>(ns: &Netns, f: impl AsyncFnOnce(&Netlink) -> T + Send) -> T {
    yh_genie::platform::netns::run_in(&ns.path(), || {
        yh_genie::platform::async_runtime::block_on(async {
            let nl = Netlink::host().unwrap();
            f(&nl).await
        })
    })
    .unwrap()
}

fn json(ns: &Netns, cmd: &str) -> Value {
    serde_json::from_str(&ns.must(cmd)).unwrap()
}

#[test]
fn links_bridges_veths_with_port_options() {
    require_root();
    let a = Netns::new("nla");
    let b = Netns::new("nlb");
    let b_file = File::open(b.path()).unwrap();
    let mac: MacAddr = "0a:58:0a:00:00:07".parse().unwrap();
    let peer_index = in_ns(&a, async |nl| {
        assert_eq!(nl.link_by_name("nope0").await.unwrap(), None);
        assert_eq!(nl.link_by_index(9999).await.unwrap(), None);

        nl.add_bridge("br0", Some(1400), false, None).await.unwrap();
        let br = nl.link_by_name("br0").await.unwrap().unwrap();
        assert!(br.is_bridge() && br.up && br.mtu == 1400, "{br:?}");
        assert_eq!(nl.link_by_index(br.index).await.unwrap().unwrap().name, "br0");
        assert_eq!(nl.add_bridge("br0", None, false, None).await.unwrap_err().code, code::ALREADY_EXISTS);

        let pair = VethPair {
            name: "host0",
            peer_name: "eth0",
            peer_netns: Some(b_file.as_fd()),
            mtu: Some(1400),
            peer_mac: Some(mac),
            master: Some(br.index),
            ..Default::default()
        };
        nl.add_veth(&pair).await.unwrap();
        assert_eq!(nl.add_veth(&pair).await.unwrap_err().code, code::ALREADY_EXISTS);
        let host = nl.link_by_name("host0").await.unwrap().unwrap();
        assert_eq!((host.kind.as_deref(), host.mtu, host.up), (Some("veth"), 1400, false));
        assert_eq!(nl.link_by_name("eth0").await.unwrap(), None, "the peer is made in the other netns only");

        nl.set_up(host.index).await.unwrap();
        nl.set_hairpin(host.index, true).await.unwrap();

        // A pair created already up and enslaved, in one request.
        let pair =
            VethPair { name: "host1", peer_name: "peer1", master: Some(br.index), up: true, ..Default::default() };
        nl.add_veth(&pair).await.unwrap();
        let host1 = nl.link_by_name("host1").await.unwrap().unwrap();
        assert_eq!((host1.master, host1.up), (Some(br.index), true));
        assert!(!nl.link_by_name("peer1").await.unwrap().unwrap().up);
        nl.del_link(host1.index).await.unwrap();
        let host = nl.link_by_index(host.index).await.unwrap().unwrap();
        assert_eq!((host.master, host.up), (Some(br.index), true));
        let peer_index = host.link.expect("a veth reports its peer's index");
        // The peer is down: no carrier, so the bounded wait gives up with the state in the message.
        let e = nl.wait_oper_up(host.index, Duration::from_millis(30)).await.unwrap_err();
        assert!(e.msg.contains("host0") && e.msg.contains("not operationally up"), "{e}");
        peer_index
    });

    let eth0 = &json(&b, "ip -j link show dev eth0")[0];
    assert_eq!((eth0["mtu"].as_u64(), eth0["address"].as_str()), (Some(1400), Some("0a:58:0a:00:00:07")));
    assert_eq!(eth0["ifindex"].as_u64(), Some(u64::from(peer_index)));
    let port = &json(&a, "ip -j -d link show dev host0")[0];
    assert_eq!(port["master"], "br0");
    assert_eq!(port["linkinfo"]["info_slave_data"]["hairpin"], true);

    in_ns(&b, async |nl| {
        let eth0 = nl.link_by_name("eth0").await.unwrap().unwrap();
        nl.set_up(eth0.index).await.unwrap();
    });
    in_ns(&a, async |nl| {
        let host = nl.link_by_name("host0").await.unwrap().unwrap();
        let up = nl.wait_oper_up(host.index, Duration::from_secs(2)).await.unwrap();
        assert_eq!(up.oper_state, OperState::Up);

        // Attribute changes: mac, promisc.
        nl.set_mac(host.index, mac).await.unwrap();
        nl.set_promisc(host.index, true).await.unwrap();
        let l = nl.link_by_index(host.index).await.unwrap().unwrap();
        assert_eq!((l.mac, l.up, l.promisc, l.master), (Some(mac), true, true, host.master));
        assert!(nl.links().await.unwrap().iter().any(|l| l.name == "lo"));

        // Deleting one end deletes the pair; deleting again is fine.
        nl.del_link(host.index).await.unwrap();
        nl.del_link(host.index).await.unwrap();
        assert!(!nl.del_link_by_name("host0").await.unwrap());
        assert!(nl.del_link_by_name("br0").await.unwrap());
    });
    assert!(!b.exec("ip link show dev eth0").0, "the peer went with its pair");
}

#[test]
fn address_route_neighbour_rule_operations() {
    require_root();
    let ns = Netns::new("nlr");
    ns.must("ip link add r0 type veth peer name r1 && ip link set r0 up && ip link set r1 up");
    ns.must("sysctl -qw net.ipv6.conf.r0.accept_dad=0");
    let mac: MacAddr = "02:00:00:00:00:99".parse().unwrap();
    in_ns(&ns, async |nl| {
        let r0 = nl.link_by_name("r0").await.unwrap().unwrap().index;
        let v4 = "10.9.0.2/24".parse().unwrap();
        let v6 = "fd09::2/64".parse().unwrap();
        nl.add_address(r0, v4).await.unwrap();
        nl.add_address(r0, v6).await.unwrap();
        assert_eq!(nl.add_address(r0, v4).await.unwrap_err().code, code::ALREADY_EXISTS);
        let v4s = nl.addresses(Some(r0), Some(IpFamily::V4)).await.unwrap();
        assert_eq!(v4s.iter().map(|a| a.net).collect::<Vec<_>>(), vec![v4]);
        let v6s = nl.addresses(Some(r0), Some(IpFamily::V6)).await.unwrap();
        assert!(v6s.iter().any(|a| a.net == v6 && !a.is_link_local()), "{v6s:?}");
        assert!(v6s.iter().all(|a| a.net.is_ipv6()));

        // Routes: v4 via a gateway in a table with a metric, v6 default, listed and deleted twice.
        let r4 =
            Route::new("10.50.0.0/16".parse().unwrap()).via("10.9.0.1".parse().unwrap()).dev(r0).table(200).metric(7);
        let r6 = Route::new("::/0".parse().unwrap()).via("fd09::1".parse().unwrap()).dev(r0);
        nl.add_route(&r4).await.unwrap();
        nl.add_route(&r6).await.unwrap();
        assert_eq!(nl.add_route(&r4).await.unwrap_err().code, code::ALREADY_EXISTS);
        assert_eq!(nl.routes(IpFamily::V4, Some(200)).await.unwrap(), vec![r4.clone()]);
        let main6 = nl.routes(IpFamily::V6, Some(Route::MAIN_TABLE)).await.unwrap();
        assert!(main6.iter().any(|r| r.is_default() && r.gateway == r6.gateway && r.metric == Some(1024)), "{main6:?}");

        // Neighbours.
        let gw = "10.9.0.1".parse().unwrap();
        nl.add_neighbour(r0, gw, mac).await.unwrap();
        nl.add_neighbour(r0, gw, mac).await.unwrap();
        let n = nl.neighbours(Some(r0)).await.unwrap();
        assert!(n.iter().any(|n| n.ip == gw && n.mac == Some(mac) && n.permanent), "{n:?}");

        // Rules.
        let rule4 = Rule::from("10.9.0.2/32".parse().unwrap(), 200).priority(1000);
        let rule6 = Rule::to("fd09::/64".parse().unwrap(), 300).priority(1001);
        nl.add_rule(&rule4).await.unwrap();
        nl.add_rule(&rule6).await.unwrap();
        assert!(nl.rules(IpFamily::V4).await.unwrap().contains(&rule4));
        assert!(nl.rules(IpFamily::V6).await.unwrap().contains(&rule6));
    });

    let routes = json(&ns, "ip -j route show table 200");
    assert_eq!(routes[0]["dst"], "10.50.0.0/16");
    assert_eq!((routes[0]["gateway"].as_str(), routes[0]["metric"].as_u64()), (Some("10.9.0.1"), Some(7)));
    assert!(routes[0].get("protocol").is_none(), "proto boot, as `ip route add` makes: {routes}");
    assert_eq!(json(&ns, "ip -j neigh show dev r0 10.9.0.1")[0]["state"][0], "PERMANENT");
    let rules = json(&ns, "ip -j rule show priority 1000");
    assert_eq!((rules[0]["src"].as_str(), rules[0]["table"].as_str()), (Some("10.9.0.2"), Some("200")));
    assert_eq!(json(&ns, "ip -j -6 rule show priority 1001")[0]["dst"], "fd09::");

    in_ns(&ns, async |nl| {
        let r0 = nl.link_by_name("r0").await.unwrap().unwrap().index;
        for _ in 0..2 {
            nl.del_address(r0, "10.9.0.2/24".parse().unwrap()).await.unwrap();
            nl.del_address(r0, "fd09::2/64".parse().unwrap()).await.unwrap();
            nl.del_route(&Route::new("10.50.0.0/16".parse().unwrap()).table(200)).await.unwrap();
            nl.del_route(&Route::new("::/0".parse().unwrap()).dev(r0)).await.unwrap();
            nl.del_neighbour(r0, "10.9.0.1".parse().unwrap()).await.unwrap();
            nl.del_rule(&Rule::from("10.9.0.2/32".parse().unwrap(), 200)).await.unwrap();
            nl.del_rule(&Rule::to("fd09::/64".parse().unwrap(), 300)).await.unwrap();
        }
        assert!(nl.addresses(Some(r0), Some(IpFamily::V4)).await.unwrap().is_empty());
        assert!(nl.routes(IpFamily::V4, Some(200)).await.unwrap().is_empty());
        assert!(!nl.routes(IpFamily::V6, None).await.unwrap().iter().any(|r| r.is_default()));
    });
    assert_eq!(ns.must("ip rule show priority 1000").trim(), "");
    assert_eq!(ns.must("ip -6 rule show priority 1001").trim(), "");
    assert!(!ns.must("ip neigh show dev r0").contains("10.9.0.1"));
}
