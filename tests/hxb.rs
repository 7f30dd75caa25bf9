//! hxcomm on a hyper-crossbar (issue 9): ranks on a `hxb:2x2x2` testbed with 2 links per
//! dimension reach every other host over the topology's disjoint paths, most of them relayed by
//! other hosts' kernels. Validated traffic between every pair under every policy; between
//! opposite corners while the relay hosts run no rank of the job, while they run another job's
//! ranks that are stopped (SIGSTOP), and while a relay's link on one path is cut; and line
//! neighbours over their detours through the other dimensions.
//!
//! Needs root and network namespaces: skips visibly without (tests/util/skip.rs), fails under
//! `CI=true`.

mod util;

use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use hx_testbed::{Testbed, TestbedSpec};
use hx_topology::Topology;
use util::{hxcomm, output_text, rank_pids, stress_summaries};

const POLICIES: [&str; 4] = ["bind", "rr", "stripe", "adaptive"];

fn topology() -> Topology {
    Topology::parse("hxb:2x2x2", 2).unwrap()
}

/// A 2x2x2 testbed with 2 links per dimension at `rate`, under the bench lock (these tests
/// time link cuts; two testbeds of 8 hosts at once would distort each other).
fn testbed(tag: &str, rate: &str) -> Option<(Testbed, hx_demo::lock::BenchLock)> {
    testbed_of(tag, rate, &topology())
}

/// [`testbed`] wiring `topo` (e.g. with detours).
fn testbed_of(
    tag: &str,
    rate: &str,
    topo: &Topology,
) -> Option<(Testbed, hx_demo::lock::BenchLock)> {
    if !util::skip::need_netns() {
        return None;
    }
    let lock =
        hx_demo::lock::BenchLock::acquire(Path::new(hx_demo::lock::BENCH_LOCK), &|| false).unwrap();
    let name = format!("x{tag}{}", std::process::id() % 1000);
    let spec = TestbedSpec::hxb(&name, topo).with_rate(Some(rate));
    Some((Testbed::up(&spec).expect("testbed up"), lock))
}

/// 300 random validated messages up to 4 MiB, striped, between two ranks on testbed hosts
/// `hosts` ("A,B"): their stress summaries.
fn striped_stress(tb: &Testbed, hosts: &str, seed: &str) -> Vec<serde_json::Value> {
    let out = run(tb, &["-n", "2", "--net-hosts", hosts, "--policy", "stripe"])
        .args(["bench", "stress", "--messages", "300", "--max-size", "4M"])
        .args(["--seed", seed, "--json"])
        .output()
        .unwrap();
    stress_summaries(&out, 2, 300)
}

/// `hxcomm run --net` on `tb` with launcher options `opts` and `hxcomm` as the rank program
/// (its arguments follow with `.args`).
fn run(tb: &Testbed, opts: &[&str]) -> Command {
    let mut c = Command::new(hxcomm());
    c.args(["run", "--net", "--name", tb.name(), "--timeout", "120"])
        .args(opts)
        .arg("--")
        .arg(hxcomm())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    c
}

/// The dimensions in which hosts `a` and `b` differ.
fn differing(t: &Topology, a: u32, b: u32) -> usize {
    let (ca, cb) = (t.coords(a).unwrap(), t.coords(b).unwrap());
    ca.iter().zip(&cb).filter(|(x, y)| x != y).count()
}

/// Sends SIG`sig` to `pid` (a rank this test started).
fn signal(pid: i32, sig: &str) {
    let ok = Command::new("kill")
        .args([&format!("-{sig}"), &pid.to_string()])
        .status()
        .is_ok_and(|s| s.success());
    assert!(ok, "kill -{sig} {pid}");
}

/// Rail tx bytes per peer of one stress summary.
fn rail_bytes(summary: &serde_json::Value) -> Vec<Vec<u64>> {
    summary["rail_tx_bytes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            p.as_array()
                .unwrap()
                .iter()
                .map(|b| b.as_u64().unwrap())
                .collect()
        })
        .collect()
}

/// Both ranks of a 2-rank stress run had `rails` rails to each other, and each carried bytes.
fn assert_every_rail_carried(lines: &[serde_json::Value], rails: usize) {
    for s in lines {
        let me = s["rank"].as_u64().unwrap() as usize;
        let r = &rail_bytes(s)[1 - me];
        assert_eq!(r.len(), rails, "rank {me}: {r:?}");
        assert!(
            r.iter().all(|&b| b > 0),
            "rank {me}: a rail (path) carried nothing: {r:?}"
        );
    }
}

/// `bench bw --validate` from 64 KiB to 4 MiB between two ranks on testbed hosts `hosts`
/// ("A,B"); it must succeed. Its output (the header names the rails).
fn validated_bw(tb: &Testbed, hosts: &str) -> String {
    let bw = run(tb, &["-n", "2", "--net-hosts", hosts])
        .args(["bench", "bw", "--validate", "--sizes", "64k:4M"])
        .args(["--iterations", "5"])
        .output()
        .unwrap();
    let text = output_text(&bw);
    assert!(bw.status.success(), "{text}");
    text
}

/// Eight ranks, one per host: random validated traffic between all of them under every
/// policy. Each pair has one rail per disjoint path (2 per dimension in which the hosts
/// differ: 2, 4 or 6), every pair exchanged bytes, and under rr every path carried some.
#[test]
fn every_pair_under_every_policy() {
    let Some((tb, _lock)) = testbed("p", "1gbit") else {
        return;
    };
    let t = topology();
    for (i, policy) in POLICIES.iter().enumerate() {
        let seed = format!("{}", 40 + i);
        let out = run(&tb, &["-n", "8", "--policy", policy])
            .args([
                "bench",
                "stress",
                "--messages",
                "1500",
                "--max-size",
                "512k",
            ])
            .args(["--seed", &seed, "--json"])
            .output()
            .unwrap();
        let lines = stress_summaries(&out, 8, 1500);
        for s in &lines {
            let me = s["rank"].as_u64().unwrap() as u32;
            for (peer, rails) in rail_bytes(s).iter().enumerate() {
                let peer = peer as u32;
                if peer == me {
                    continue;
                }
                let want = 2 * differing(&t, me, peer);
                assert_eq!(
                    rails.len(),
                    want,
                    "{policy}: rank {me} to {peer}: {rails:?}"
                );
                assert!(
                    rails.iter().sum::<u64>() > 0,
                    "{policy}: rank {me} sent nothing to {peer}"
                );
                if *policy == "rr" {
                    assert!(
                        rails.iter().all(|&b| b > 0),
                        "rr: rank {me} to {peer}: a path carried nothing: {rails:?}"
                    );
                }
            }
        }
        println!("{policy}: 1500 messages between 8 hosts verified");
    }
}

/// Two ranks on opposite corners (hosts 0 and 7), nothing of the job on the six relay hosts:
/// six 3-hop paths, every one carrying part of the striped traffic, every byte checked.
#[test]
fn opposite_corners_with_no_rank_on_the_relays() {
    let Some((tb, _lock)) = testbed("c", "1gbit") else {
        return;
    };
    let lines = striped_stress(&tb, "0,7", "7");
    assert_every_rail_carried(&lines, 6);
    let text = validated_bw(&tb, "0,7");
    assert!(text.contains("6 rails to rank 1"), "{text}");
    assert_eq!(
        text.matches(":3h").count(),
        6,
        "six paths of 3 hops: {text}"
    );
}

/// With detours (`net up --detours`, HX_DETOURS=1 from `hxcomm run --net`), line neighbours
/// (hosts 0 and 1 differ in dimension 2) have six paths: their two direct links and four 3-hop
/// detours through dimensions 0 and 1, every one carrying part of the striped traffic, every
/// byte checked; the detours' relays (hosts 2 and 4, 3 and 5) forwarded it over their links of
/// dimension 2.
#[test]
fn line_neighbours_take_detours() {
    let Some((tb, _lock)) = testbed_of("d", "1gbit", &topology().with_detours(true)) else {
        return;
    };
    let tx = || -> Vec<u64> {
        let out = Command::new(hxcomm())
            .args(["net", "status", "--json", "--name", tb.name()])
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", output_text(&out));
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(v["detours"], true);
        let hosts = v["hosts"].as_array().unwrap();
        [2, 3, 4, 5]
            .iter()
            .flat_map(|&k| hosts[k]["rails"].as_array().unwrap().clone())
            .filter(|r| r["dim"] == 2)
            .map(|r| r["tx_bytes"].as_u64().unwrap())
            .collect()
    };
    let before = tx();
    let lines = striped_stress(&tb, "0,1", "11");
    assert_every_rail_carried(&lines, 6);
    let after = tx();
    assert_eq!(after.len(), 8);
    for (i, (a, b)) in after.iter().zip(&before).enumerate() {
        assert!(
            a - b > 1_000_000,
            "relay NIC {i} (hosts 2..5, dimension 2) forwarded only {} bytes",
            a - b
        );
    }
    let text = validated_bw(&tb, "0,1");
    assert!(text.contains("6 rails to rank 1"), "{text}");
    assert_eq!(text.matches(":3h").count(), 4, "four detours: {text}");
    assert_eq!(text.matches(":1h").count(), 2, "two direct links: {text}");
}

/// HX_DETOURS=1 on hosts without the detour rule and routes: the detour rails would connect
/// straight over the line's links and share them, so every rank refuses to start, naming the
/// route it expected and the command that adds it.
#[test]
fn detours_without_their_routes_are_refused() {
    let Some((tb, _lock)) = testbed("n", "1gbit") else {
        return;
    };
    let out = run(
        &tb,
        &["-n", "2", "--net-hosts", "0,1", "--env", "HX_DETOURS=1"],
    )
    .args(["bench", "bw", "--sizes", "64k:64k", "--iterations", "2"])
    .output()
    .unwrap();
    let text = output_text(&out);
    assert!(!out.status.success(), "{text}");
    // Every rank refuses; the launcher reports whichever exits first (host 0 or host 1).
    assert!(
        text.contains("not via the detour's relay")
            && (text.contains("--detours --host 0 | sh")
                || text.contains("--detours --host 1 | sh")),
        "{text}"
    );
}

/// Another job's ranks run on the six relay hosts and are stopped (SIGSTOP) while the corners
/// exchange validated traffic: forwarding is the relays' kernels' work, not their processes'.
#[test]
fn relays_whose_processes_are_stopped_still_forward() {
    let Some((tb, _lock)) = testbed("s", "1gbit") else {
        return;
    };
    let marker = format!("--seed {} ", 90_000 + std::process::id());
    let seed = marker.split_whitespace().nth(1).unwrap().to_string();
    let mut other = run(&tb, &["-n", "6", "--net-hosts", "1,2,3,4,5,6"])
        .args(["bench", "stress", "--seconds", "100", "--max-size", "64k"])
        .args(["--seed", &seed])
        .spawn()
        .unwrap();
    let ranks = rank_pids(&marker, 6, Duration::from_secs(20));
    assert_eq!(ranks.len(), 6, "the other job's ranks did not start");
    std::thread::sleep(Duration::from_millis(300));
    for (pid, _) in &ranks {
        signal(*pid, "STOP");
    }
    let out = run(&tb, &["-n", "2", "--net-hosts", "0,7"])
        .args(["bench", "stress", "--messages", "400", "--max-size", "1M"])
        .args(["--seed", "8", "--json"])
        .output()
        .unwrap();
    // Let the other job go: continue its ranks and stop its launcher (which stops them).
    for (pid, _) in &ranks {
        signal(*pid, "CONT");
    }
    let _ = other.kill();
    let _ = other.wait();
    let lines = stress_summaries(&out, 2, 400);
    assert_every_rail_carried(&lines, 6);
    assert!(
        util::no_process_with(&marker, Duration::from_secs(10)),
        "the other job's ranks were left behind"
    );
}

/// A relay's NIC on one of the six corner-to-corner paths goes down mid-transfer (host 2's
/// dimension 2, link 0: on the path from host 0 to host 7's address of dimension 0, link 0).
/// The transfer completes over the other five paths, every byte checked, and the failed path is
/// named in the log.
#[test]
fn a_relay_link_cut_mid_transfer() {
    let Some((tb, _lock)) = testbed("l", "100mbit") else {
        return;
    };
    let t = topology();
    let p = t.path(0, 7, 0, 0).unwrap();
    assert_eq!(p.hops[1].from, 2, "{p:?}");
    assert_eq!((p.hops[1].dim, p.hops[1].link), (2, 0));
    // NIC index in plan order: dimension x links + link.
    let nic = 2 * t.links_per_dim();
    for policy in ["adaptive", "stripe"] {
        let opts = [
            "-n",
            "2",
            "--net-hosts",
            "0,7",
            "--policy",
            policy,
            "--env",
            "HX_LOG=info",
        ];
        let child = run(&tb, &opts)
            .args([
                "bench",
                "bw",
                "--validate",
                "--sizes",
                "1M:1M",
                "--window",
                "4",
            ])
            .args(["--iterations", "60"])
            .spawn()
            .unwrap();
        std::thread::sleep(Duration::from_millis(1200));
        tb.link(2, nic, false).unwrap();
        let out: Output = child.wait_with_output().unwrap();
        tb.link(2, nic, true).unwrap();
        let text = output_text(&out);
        assert!(out.status.success(), "{policy}: {text}");
        assert!(text.contains("1048576"), "{policy}: {text}");
        assert!(
            text.contains("x1l0:3h to rank 1") || text.contains("x0l0:3h to rank 0"),
            "{policy}: the cut path is not named: {text}"
        );
    }
    // Down before the job starts: that path never connects, which the ranks say (at once if
    // the relay answers with ICMP, else after three rail timeouts: the job lasts longer), and
    // the others carry everything.
    tb.link(2, nic, false).unwrap();
    let out = run(&tb, &["-n", "2", "--net-hosts", "0,7"])
        .args([
            "bench",
            "bw",
            "--validate",
            "--sizes",
            "256k:256k",
            "--iterations",
            "20",
        ])
        .output()
        .unwrap();
    tb.link(2, nic, true).unwrap();
    let text = output_text(&out);
    assert!(out.status.success(), "{text}");
    assert!(
        text.contains("x1l0:3h to rank 1 cannot be connected"),
        "the unreachable path is not named: {text}"
    );
    // Restored (the testbed puts the relay routes back): all six paths carry traffic again.
    let out = run(&tb, &["-n", "2", "--net-hosts", "0,7", "--policy", "rr"])
        .args(["bench", "stress", "--messages", "200", "--max-size", "256k"])
        .args(["--seed", "9", "--json"])
        .output()
        .unwrap();
    let lines = stress_summaries(&out, 2, 200);
    assert_every_rail_carried(&lines, 6);
}

/// A flat testbed with more rails than an address names (eight, as PM/Ethernet-HXB striped
/// over up to nine): the launcher passes the flat plan (`hxb:2`, 8 links) and the ranks use
/// every rail, the plan giving the peer's addresses beyond the sixth.
#[test]
fn a_flat_testbed_with_eight_rails_uses_them_all() {
    if !util::skip::need_netns() {
        return;
    }
    let _lock =
        hx_demo::lock::BenchLock::acquire(Path::new(hx_demo::lock::BENCH_LOCK), &|| false).unwrap();
    let name = format!("xf{}", std::process::id() % 1000);
    let tb = Testbed::up(&TestbedSpec::new(&name, 2, 8).with_rate(Some("1gbit"))).unwrap();
    let out = run(&tb, &["-n", "2", "--policy", "rr"])
        .args(["bench", "stress", "--messages", "300", "--max-size", "256k"])
        .args(["--seed", "11", "--json"])
        .output()
        .unwrap();
    let lines = stress_summaries(&out, 2, 300);
    assert_every_rail_carried(&lines, 8);
}
