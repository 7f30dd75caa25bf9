//! Real testbeds (needs root, `ip` and `ping`; skipped otherwise, through tests/util/skip.rs, and
//! a failure instead when `CI=true`). Each test uses its own name, so they run in parallel with
//! each other and with a testbed a person has up.

use hx_testbed::{Testbed, TestbedSpec};
use std::path::Path;
use std::process::{Command, Stdio};

#[path = "../../../tests/util/skip.rs"]
mod skip_helper;

/// True if the running test must skip (said and logged by tests/util/skip.rs).
fn skip() -> bool {
    !(skip_helper::need_netns() && skip_helper::need_tool("ping", &["-V"], "iputils-ping"))
}

/// A name unique to this process and test: `t<pid%1000><tag>`.
fn name(tag: &str) -> String {
    format!("t{}{tag}", std::process::id() % 1000)
}

fn ping(ns: &str, addr: impl std::fmt::Display) -> bool {
    Command::new("ip")
        .args([
            "netns",
            "exec",
            ns,
            "ping",
            "-c1",
            "-W1",
            "-q",
            &addr.to_string(),
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .map(|s| s.success())
        .unwrap_or(false)
}

fn ping_from_root(addr: impl std::fmt::Display) -> bool {
    Command::new("ping")
        .args(["-c1", "-W1", "-q", &addr.to_string()])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .map(|s| s.success())
        .unwrap_or(false)
}

fn link_present(dev: &str) -> bool {
    Command::new("ip")
        .args(["link", "show", "dev", dev])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .map(|s| s.success())
        .unwrap_or(false)
}

fn hosts_has(name: &str) -> bool {
    std::fs::read_to_string("/etc/hosts")
        .unwrap()
        .contains(&format!("# hxcomm testbed {name} begin"))
}

fn assert_gone(name: &str, namespaces: &[String]) {
    for ns in namespaces {
        assert!(
            !Path::new("/run/netns").join(ns).exists(),
            "namespace {ns} left behind"
        );
    }
    assert!(
        !link_present(&format!("{name}-mgmt")),
        "{name}-mgmt left behind"
    );
    assert!(
        !link_present(&format!("{name}-m0")),
        "{name}-m0 left behind"
    );
    assert!(!hosts_has(name), "/etc/hosts block of {name} left behind");
    assert!(
        hx_testbed::info(name).unwrap().is_none(),
        "state of {name} left behind"
    );
    assert!(hx_testbed::mgmt_addr_of(name).is_none());
}

#[test]
fn two_hosts_two_rails() {
    if skip() {
        return;
    }
    let name = name("a");
    let tb = Testbed::up(&TestbedSpec::new(&name, 2, 2)).expect("up");
    let hosts = tb.host_names();
    assert_eq!(hosts, vec![format!("{name}0"), format!("{name}1")]);
    assert_eq!(hx_testbed::mgmt_addr_of(&name), Some(tb.mgmt_addr()));
    assert!(hosts_has(&name));
    let before = tb.counters().unwrap();
    for i in 0..2 {
        assert!(ping(&hosts[0], format!("10.10.{i}.2")), "rail {i}");
        assert!(ping(&hosts[1], format!("10.10.{i}.1")), "rail {i} back");
    }
    // Management: host to host, root to host, host to root.
    assert!(ping(&hosts[0], tb.host_mgmt_addr(1)));
    assert!(ping_from_root(tb.host_mgmt_addr(0)));
    assert!(ping(&hosts[1], tb.mgmt_addr()));
    let after = tb.counters().unwrap();
    for k in 0..2 {
        for i in 0..2 {
            assert!(
                after[k][i].tx_bytes > before[k][i].tx_bytes,
                "host {k} rail {i} tx"
            );
            assert!(
                after[k][i].rx_bytes > before[k][i].rx_bytes,
                "host {k} rail {i} rx"
            );
        }
    }
    // Rails are shaped with tbf.
    let q = Command::new("tc")
        .args(["-n", &hosts[0], "qdisc", "show", "dev", "r1"])
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&q.stdout).contains("tbf"));
    // Cutting rail 1 of host 1 breaks rail 1 only; restoring it heals it.
    tb.link(1, 1, false).unwrap();
    assert!(!ping(&hosts[0], "10.10.1.2"));
    assert!(ping(&hosts[0], "10.10.0.2"));
    assert!(!tb.counters().unwrap()[1][1].up);
    tb.link(1, 1, true).unwrap();
    assert!(tb.counters().unwrap()[1][1].up);
    let mut healed = false;
    for _ in 0..5 {
        if ping(&hosts[0], "10.10.1.2") {
            healed = true;
            break;
        }
    }
    assert!(healed, "rail 1 did not come back");
    assert!(tb.link(2, 0, false).is_err());
    let made = tb.info().namespaces.clone();
    tb.down().unwrap();
    assert_gone(&name, &made);
}

#[test]
fn three_hosts_bridge() {
    if skip() {
        return;
    }
    let name = name("b");
    let mut spec = TestbedSpec::new(&name, 3, 2);
    spec.rates[1] = None;
    spec.mtu = 9000;
    let tb = Testbed::up(&spec).expect("up");
    let hosts = tb.host_names();
    assert!(tb.info().bridged);
    assert!(Path::new("/run/netns").join(format!("{name}sw")).exists());
    for i in 0..2 {
        for (from, to) in [(0, 2), (1, 2), (2, 0), (0, 1)] {
            assert!(
                ping(&hosts[from], tb.rail_addr(to, i)),
                "{from}->{to} rail {i}"
            );
        }
    }
    assert!(ping(&hosts[2], tb.host_mgmt_addr(0)));
    // MTU 9000 end to end: a 8000-byte ping that must not fragment.
    let big = Command::new("ip")
        .args([
            "netns", "exec", &hosts[0], "ping", "-c1", "-W1", "-q", "-M", "do", "-s", "8000",
        ])
        .arg(tb.rail_addr(2, 0).to_string())
        .stdout(Stdio::null())
        .status()
        .unwrap();
    assert!(big.success(), "jumbo ping");
    let q0 = Command::new("tc")
        .args(["-n", &hosts[0], "qdisc", "show", "dev", "r0"])
        .output()
        .unwrap();
    let q0 = String::from_utf8_lossy(&q0.stdout).to_string();
    assert!(q0.contains("tbf"), "{q0}");
    let q1 = Command::new("tc")
        .args(["-n", &hosts[0], "qdisc", "show", "dev", "r1"])
        .output()
        .unwrap();
    let q1 = String::from_utf8_lossy(&q1.stdout).to_string();
    assert!(!q1.contains("tbf"), "{q1}");
    // Cutting host 2's rail 0 isolates host 2 on that rail only.
    tb.link(2, 0, false).unwrap();
    assert!(!ping(&hosts[0], tb.rail_addr(2, 0)));
    assert!(ping(&hosts[0], tb.rail_addr(1, 0)));
    tb.link(2, 0, true).unwrap();
    let made = tb.info().namespaces.clone();
    tb.down().unwrap();
    assert_gone(&name, &made);
}

#[test]
fn down_leaves_others_and_up_replaces() {
    if skip() {
        return;
    }
    let (na, nb) = (name("c"), name("d"));
    let a = Testbed::up(&TestbedSpec::new(&na, 2, 1)).expect("up a");
    let b = Testbed::up(&TestbedSpec::new(&nb, 2, 1)).expect("up b");
    assert_ne!(
        a.mgmt_addr(),
        b.mgmt_addr(),
        "each testbed has its own management subnet"
    );
    // Replacing a keeps its management subnet and still works.
    let a_net = a.mgmt_addr();
    let a = {
        let _old = a.keep();
        Testbed::up(&TestbedSpec::new(&na, 2, 2)).expect("up a again")
    };
    assert_eq!(a.mgmt_addr(), a_net);
    assert!(ping(&a.host_names()[0], "10.10.1.2"));
    let made = a.info().namespaces.clone();
    hx_testbed::down(&na).unwrap();
    std::mem::forget(a); // already down
    assert_gone(&na, &made);
    // b is intact.
    assert!(hosts_has(&nb));
    assert!(ping(&b.host_names()[0], "10.10.0.2"));
    assert!(ping(&b.host_names()[1], b.mgmt_addr()));
    // Down again is harmless.
    hx_testbed::down(&na).unwrap();
    let made = b.info().namespaces.clone();
    drop(b); // the guard takes it down
    assert_gone(&nb, &made);
}

#[test]
fn refuses_foreign_namespace() {
    if skip() {
        return;
    }
    let name = name("e");
    let foreign = format!("{name}1");
    let ok = Command::new("ip")
        .args(["netns", "add", &foreign])
        .status()
        .unwrap()
        .success();
    assert!(ok);
    let r = Testbed::up(&TestbedSpec::new(&name, 2, 1));
    let still = Path::new("/run/netns").join(&foreign).exists();
    let _ = Command::new("ip").args(["netns", "del", &foreign]).status();
    let err = r.expect_err("must refuse a namespace it did not make");
    assert!(err.to_string().contains(&foreign), "{err}");
    assert!(still, "the foreign namespace was touched");
    assert!(!Path::new("/run/netns").join(format!("{name}0")).exists());
    assert!(hx_testbed::info(&name).unwrap().is_none());
}

#[test]
fn delay_with_netem_or_clear_error() {
    if skip() {
        return;
    }
    let name = name("f");
    let mut spec = TestbedSpec::new(&name, 2, 2);
    spec.delay = Some("20us".into());
    spec.rates[1] = None;
    match Testbed::up(&spec) {
        Ok(tb) => {
            let h = tb.host_names();
            let q = Command::new("tc")
                .args(["-n", &h[0], "qdisc", "show", "dev", "r0"])
                .output()
                .unwrap();
            let q = String::from_utf8_lossy(&q.stdout).to_string();
            assert!(q.contains("netem") && q.contains("tbf"), "{q}");
            let q = Command::new("tc")
                .args(["-n", &h[0], "qdisc", "show", "dev", "r1"])
                .output()
                .unwrap();
            let q = String::from_utf8_lossy(&q.stdout).to_string();
            assert!(q.contains("netem") && !q.contains("tbf"), "{q}");
            assert!(ping(&h[0], "10.10.0.2"));
            let made = tb.info().namespaces.clone();
            tb.down().unwrap();
            assert_gone(&name, &made);
        }
        Err(e) => {
            // Kernels without sch_netem (like this project's VM): a clear error, nothing left.
            let msg = e.to_string();
            assert!(msg.contains("netem") && msg.contains("tc -n"), "{msg}");
            println!("netem unavailable: {msg}");
            assert_gone(&name, &[format!("{name}0"), format!("{name}1")]);
        }
    }
}

#[test]
fn down_without_state_uses_markers() {
    if skip() {
        return;
    }
    let name = name("g");
    let tb = Testbed::up(&TestbedSpec::new(&name, 3, 1)).expect("up");
    let made = tb.info().namespaces.clone();
    let info = tb.keep();
    std::fs::remove_file(format!("/run/hxcomm/net-{}.json", info.name())).unwrap();
    hx_testbed::down(&name).unwrap();
    assert_gone(&name, &made);
}
