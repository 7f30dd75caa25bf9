//! Hyper-crossbar testbeds against the kernel (issue 9; needs root, `ip` and `ping`: skipped
//! otherwise through tests/util/skip.rs, and a failure instead when `CI=true`).
//!
//! `hxcomm net up --topology ... --rate none` builds the testbed; then, for every ordered pair of
//! hosts and every address of the destination, the kernel's own route decisions (`ip -n HOST -o
//! route get ADDR`, followed hop by hop from host to host until the host that owns the address
//! says `local`) must be exactly the path hx-topology's `path(src, dst, dim, link)` intends: the
//! outgoing interface and next hop of every hop, and the source address at the first. Then a
//! ping (one packet, one second at most) from two hosts to every address of every other host.
//! `hxcomm topo check` inside every namespace says OK; after a route is deleted, an interface
//! set down and `rp_filter=1` set on another in one namespace, it names exactly those (and the
//! routes the kernel dropped with the downed interface), each with `topo routes`' own command,
//! and those commands make it OK again. A guard runs `hxcomm net down` whatever happens, and the
//! test checks that nothing is left. Each test holds the benchmark lock (/tmp/hxcomm-bench.lock)
//! while its testbed is up, so none runs during a measurement.

mod util;

use std::collections::HashMap;
use std::net::Ipv4Addr;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use hx_topology::Topology;
use util::{hxcomm, output_text};

/// Takes the testbed down when dropped (also after a failed or partial `up`, or a panic).
struct Net {
    name: String,
}

impl Net {
    fn up(name: &str, topology: &str, links: u32, detours: bool) -> Net {
        let net = Net {
            name: name.to_string(),
        };
        let links = links.to_string();
        let out = Command::new(hxcomm())
            .args([
                "net",
                "up",
                "--topology",
                topology,
                "--links-per-dim",
                &links,
            ])
            .args(["--rate", "none", "--name", name])
            .args(detours.then_some("--detours"))
            .output()
            .unwrap();
        assert!(out.status.success(), "net up: {}", output_text(&out));
        net
    }

    fn ns(&self, host: u32) -> String {
        format!("{}{host}", self.name)
    }
}

impl Drop for Net {
    fn drop(&mut self) {
        let _ = Command::new(hxcomm())
            .args(["net", "down", "--name", &self.name])
            .stdout(Stdio::null())
            .status();
    }
}

/// Namespaces named `NAME<digits>` or `NAMEsw` that exist now.
fn namespaces_of(name: &str) -> Vec<String> {
    std::fs::read_dir("/run/netns")
        .map(|d| {
            d.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| {
                    n.strip_prefix(name).is_some_and(|r| {
                        r == "sw" || (!r.is_empty() && r.bytes().all(|b| b.is_ascii_digit()))
                    })
                })
                .collect()
        })
        .unwrap_or_default()
}

/// What the kernel of one host does with a packet to one address.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Decision {
    /// The host owns the address.
    Local,
    /// Out of `dev` to `next` (the gateway, or the address itself when it is on the link),
    /// with `src` as the preferred source.
    Out {
        dev: String,
        next: Ipv4Addr,
        src: Option<Ipv4Addr>,
    },
}

/// `ip -n NS -o route get ADDR`, parsed: the decision for a packet the host sends itself; with
/// `arrived` = (source address, incoming interface), for one it forwards (`from SRC iif DEV`:
/// forwarded packets do not see the detour rule, which matches `iif lo` only).
fn route_get(
    ns: &str,
    addr: Ipv4Addr,
    arrived: Option<(Ipv4Addr, &str)>,
) -> Result<Decision, String> {
    let mut args = vec![
        "-n".to_string(),
        ns.to_string(),
        "-o".into(),
        "route".into(),
        "get".into(),
        addr.to_string(),
    ];
    if let Some((src, iif)) = arrived {
        args.extend([
            "from".into(),
            src.to_string(),
            "iif".into(),
            iif.to_string(),
        ]);
    }
    let out = Command::new("ip")
        .args(&args)
        .output()
        .map_err(|e| format!("ip: {e}"))?;
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    if !out.status.success() {
        return Err(format!("{ns}: route get {addr}: {}", output_text(&out)));
    }
    let words: Vec<&str> = text.split_whitespace().collect();
    if words.first() == Some(&"local") {
        return Ok(Decision::Local);
    }
    let after = |key: &str| {
        words
            .windows(2)
            .find(|w| w[0] == key)
            .map(|w| w[1].to_string())
    };
    let dev = after("dev").ok_or_else(|| format!("{ns}: no dev in {text:?}"))?;
    let next = match after("via") {
        Some(v) => v.parse().map_err(|_| format!("{ns}: via in {text:?}"))?,
        None => addr,
    };
    let src = after("src").and_then(|s| s.parse().ok());
    Ok(Decision::Out { dev, next, src })
}

/// Follows the kernels' decisions from every host to every address of every other host and
/// compares each hop with the intended path. Returns the number of `route get`s asked and
/// every mismatch.
fn check_routes(net: &Net, t: &Topology) -> (usize, Vec<String>) {
    type Key = (u32, Ipv4Addr, Option<(Ipv4Addr, String)>);
    let mut cache: HashMap<Key, Result<Decision, String>> = HashMap::new();
    let mut asked = 0;
    let mut errors = Vec::new();
    let mut decide = |host: u32, addr: Ipv4Addr, arrived: Option<(Ipv4Addr, &str)>| {
        cache
            .entry((host, addr, arrived.map(|(a, i)| (a, i.to_string()))))
            .or_insert_with(|| {
                asked += 1;
                route_get(&net.ns(host), addr, arrived)
            })
            .clone()
    };
    for src in 0..t.hosts() {
        for dst in (0..t.hosts()).filter(|&d| d != src) {
            for path in t.paths(src, dst).unwrap() {
                let what = format!(
                    "{src} -> {dst} {} (dim {}, link {})",
                    path.dst_addr, path.dst_dim, path.link
                );
                let mut at = src;
                let mut ok = true;
                for (i, hop) in path.hops.iter().enumerate() {
                    let arrived = i
                        .checked_sub(1)
                        .map(|p| (path.src_addr, path.hops[p].iface.as_str()));
                    match decide(at, path.dst_addr, arrived) {
                        Ok(Decision::Out { dev, next, src: s }) => {
                            let owner = t.locate(next).map(|(h, _, _)| h);
                            if dev != hop.iface || next != hop.next_hop || owner != Some(hop.to) {
                                errors.push(format!(
                                    "{what}: hop {i} at host {at}: kernel says dev {dev} next \
                                     {next} (host {owner:?}), intended dev {} next {} (host {})",
                                    hop.iface, hop.next_hop, hop.to
                                ));
                                ok = false;
                                break;
                            }
                            if i == 0 && s != Some(path.src_addr) {
                                errors.push(format!(
                                    "{what}: source {s:?}, intended {}",
                                    path.src_addr
                                ));
                            }
                        }
                        other => {
                            errors.push(format!(
                                "{what}: hop {i} at host {at}: kernel says {other:?}, intended \
                                 dev {} next {}",
                                hop.iface, hop.next_hop
                            ));
                            ok = false;
                            break;
                        }
                    }
                    at = hop.to;
                }
                if ok {
                    let last = path.hops.last().map(|h| (path.src_addr, h.iface.as_str()));
                    match decide(at, path.dst_addr, last) {
                        Ok(Decision::Local) if at == dst => {}
                        other => errors.push(format!(
                            "{what}: at the end of the path (host {at}) the kernel says \
                             {other:?}, not local"
                        )),
                    }
                }
            }
        }
    }
    (asked, errors)
}

/// One ping (one packet, one second at most) from `src` to every address of every other host;
/// the addresses that did not answer.
fn ping_all(net: &Net, t: &Topology, src: u32) -> Vec<String> {
    let mut failed = Vec::new();
    for dst in (0..t.hosts()).filter(|&d| d != src) {
        for a in t.addresses(dst).unwrap() {
            let ok = Command::new("ip")
                .args(["netns", "exec", &net.ns(src), "ping", "-c1", "-W1", "-q"])
                .arg(a.ip.to_string())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()
                .is_ok_and(|s| s.success());
            if !ok {
                failed.push(format!("{src} -> {dst} {} ({})", a.ip, a.iface));
            }
        }
    }
    failed
}

/// Brings up `topology` with `links` links per dimension, checks the status, the route
/// decisions of every pair and the pings from `pingers`, takes it down and checks that nothing
/// is left.
fn check(tag: &str, topology: &str, links: u32, detours: bool, pingers: &[u32]) {
    if !(util::skip::need_netns() && util::skip::need_tool("ping", &["-V"], "iputils-ping")) {
        return;
    }
    let _lock =
        hx_demo::lock::BenchLock::acquire(Path::new(hx_demo::lock::BENCH_LOCK), &|| false).unwrap();
    let t = Topology::parse(topology, links)
        .unwrap()
        .with_detours(detours);
    let name = format!("hxt{}{tag}", std::process::id() % 1000);
    let started = Instant::now();
    {
        let net = Net::up(&name, topology, links, detours);
        let up = started.elapsed();

        // net status --json: the topology, each host's coordinates and NICs.
        let out = Command::new(hxcomm())
            .args(["net", "status", "--json", "--name", &name])
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", output_text(&out));
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(v["topology"], topology);
        assert_eq!(v["links_per_dim"], links);
        assert_eq!(v["detours"], detours);
        let hosts = v["hosts"].as_array().unwrap();
        assert_eq!(hosts.len() as u32, t.hosts());
        for (k, h) in hosts.iter().enumerate() {
            let k = k as u32;
            assert_eq!(h["name"], net.ns(k));
            assert_eq!(h["coords"], serde_json::json!(t.coords(k).unwrap()));
            let nics: Vec<(String, String)> = h["rails"]
                .as_array()
                .unwrap()
                .iter()
                .map(|r| {
                    assert_eq!(r["carrier"], true, "{r}");
                    (
                        r["if"].as_str().unwrap().to_string(),
                        r["addr"].as_str().unwrap().to_string(),
                    )
                })
                .collect();
            let want: Vec<(String, String)> = t
                .addresses(k)
                .unwrap()
                .into_iter()
                .map(|a| (a.iface, a.ip.to_string()))
                .collect();
            assert_eq!(nics, want, "host {k}");
        }

        let t0 = Instant::now();
        let (asked, errors) = check_routes(&net, &t);
        let routes_took = t0.elapsed();
        assert!(
            errors.is_empty(),
            "{} of the kernel's route decisions differ from the intended paths, e.g.:\n{}",
            errors.len(),
            errors[..errors.len().min(20)].join("\n")
        );

        // Every namespace as `topo check` sees it (with detours: the rule and table too).
        for k in 0..t.hosts() {
            let out = Command::new("ip")
                .args(["netns", "exec", &net.ns(k), hxcomm(), "topo", "check"])
                .args([
                    "--topology",
                    topology,
                    "--links-per-dim",
                    &links.to_string(),
                ])
                .args(detours.then_some("--detours"))
                .output()
                .unwrap();
            assert!(out.status.success(), "host {k}: {}", output_text(&out));
        }

        let t0 = Instant::now();
        let mut failed = Vec::new();
        for &p in pingers {
            failed.extend(ping_all(&net, &t, p));
        }
        let pings_took = t0.elapsed();
        assert!(failed.is_empty(), "no answer: {}", failed.join(", "));
        println!(
            "{topology} x {links}: up {up:.1?}; {asked} route lookups for {} pairs x {} \
             addresses in {routes_took:.1?}; {} pings in {pings_took:.1?}",
            t.hosts() * (t.hosts() - 1),
            t.nics_per_host(),
            pingers.len() * (t.hosts() as usize - 1) * t.nics_per_host(),
        );
        assert!(
            pings_took < Duration::from_secs(60),
            "pings took {pings_took:?}"
        );
    }
    let left = namespaces_of(&name);
    assert!(left.is_empty(), "left behind after net down: {left:?}");
    assert!(
        hx_testbed::info(&name).unwrap().is_none(),
        "record of {name} left"
    );
}

#[test]
fn hxb_2x2x2_two_links_kernel_routes_follow_intended_paths() {
    check("a", "hxb:2x2x2", 2, false, &[0, 7]);
}

#[test]
fn hxb_3x3x2_one_link_kernel_routes_follow_intended_paths() {
    check("b", "hxb:3x3x2", 1, false, &[0, 17]);
}

/// With detours, a line neighbour's addresses of the other dimensions are reached over 3-hop
/// detours (the source's detour table), every other path as without them (relays forward by
/// the main table), and `topo check --detours` is OK in every namespace.
#[test]
fn hxb_3x3x2_with_detours_kernel_routes_follow_intended_paths() {
    check("c", "hxb:3x3x2", 1, true, &[0, 17]);
}

/// Runs `cmd` (a shell command line) in namespace `ns`; panics with its output if it fails.
fn in_ns(ns: &str, cmd: &str) {
    let out = Command::new("ip")
        .args(["netns", "exec", ns, "sh", "-c", cmd])
        .output()
        .unwrap();
    assert!(out.status.success(), "{ns}: {cmd}: {}", output_text(&out));
}

/// `hxcomm topo check --topology hxb:2x2x2 --links-per-dim 2 ARGS` in host `k`'s namespace:
/// the exit code and standard output.
fn topo_check(net: &Net, k: u32, args: &[&str]) -> (i32, String) {
    let out = Command::new("ip")
        .args(["netns", "exec", &net.ns(k), hxcomm(), "topo", "check"])
        .args(["--topology", "hxb:2x2x2", "--links-per-dim", "2"])
        .args(args)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    (out.status.code().unwrap_or(-1), text)
}

/// The problems of a `--json` report as (kind, fix).
fn problems(json: &str) -> Vec<(String, String)> {
    let v: serde_json::Value = serde_json::from_str(json).unwrap_or_else(|e| panic!("{e}: {json}"));
    v["problems"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            (
                p["kind"].as_str().unwrap().to_string(),
                p["fix"].as_str().unwrap_or("").to_string(),
            )
        })
        .collect()
}

/// `hxcomm topo check` on a hxb:2x2x2 testbed with 2 links per dimension: OK in every
/// namespace, with or without --host; a --host that disagrees is one problem. Then, in host 5:
/// one route deleted, another NIC set down, a third NIC's rp_filter strict; check names exactly
/// those and the routes the kernel dropped with the downed NIC (exit code 1), each fix is a line
/// of `topo routes`, and running the fixes in the order given makes the host OK again.
#[test]
fn hxb_2x2x2_topo_check_finds_what_was_broken() {
    if !util::skip::need_netns() {
        return;
    }
    let _lock =
        hx_demo::lock::BenchLock::acquire(Path::new(hx_demo::lock::BENCH_LOCK), &|| false).unwrap();
    let t = Topology::parse("hxb:2x2x2", 2).unwrap();
    let name = format!("hxt{}c", std::process::id() % 1000);
    {
        let net = Net::up(&name, "hxb:2x2x2", 2, false);
        for k in 0..t.hosts() {
            let c: Vec<String> = t.coords(k).unwrap().iter().map(|c| c.to_string()).collect();
            let (code, out) = topo_check(&net, k, &[]);
            assert_eq!(
                (code, out.as_str()),
                (
                    0,
                    format!(
                        "OK: host {k} ({}) of hxb:2x2x2 x 2: 6 NICs, 12 routes, 11 sysctls\n",
                        c.join(",")
                    )
                    .as_str()
                )
            );
            let (code, out) = topo_check(&net, k, &["--host", &k.to_string(), "--json"]);
            let v: serde_json::Value = serde_json::from_str(&out).unwrap();
            assert_eq!(
                (code, &v["ok"], &v["host"]),
                (0, &serde_json::json!(true), &serde_json::json!(k))
            );
            assert_eq!(v["problems"], serde_json::json!([]));
        }
        let (code, out) = topo_check(&net, 0, &["--host", "7", "--json"]);
        assert_eq!(code, 1);
        let p = problems(&out);
        assert_eq!(p.len(), 1, "{out}");
        assert_eq!(p[0].0, "wrong-host");

        // Break host 5: delete its first route, set down a NIC that route does not use, make a
        // third NIC's reverse-path filter strict.
        let h = 5;
        let ns = net.ns(h);
        let routes = t.routes(h).unwrap();
        let cut = routes[0].clone();
        let nics: Vec<String> = t
            .addresses(h)
            .unwrap()
            .into_iter()
            .map(|a| a.iface)
            .collect();
        let down = nics.iter().find(|n| **n != cut.dev).unwrap().clone();
        let strict = nics
            .iter()
            .find(|n| **n != cut.dev && **n != down)
            .unwrap()
            .clone();
        in_ns(&ns, &format!("ip route del {}", cut.dest));
        in_ns(&ns, &format!("ip link set dev {down} down"));
        in_ns(
            &ns,
            &format!("sysctl -qw net.ipv4.conf.{strict}.rp_filter=1"),
        );

        let mut want = vec![
            ("down".to_string(), format!("ip link set dev {down} up")),
            (
                "sysctl".to_string(),
                format!("sysctl -w net.ipv4.conf.{strict}.rp_filter=2"),
            ),
        ];
        let dropped = routes.iter().filter(|r| r.dev == down).count();
        assert!(dropped > 0, "no route of host {h} goes through {down}");
        for r in routes.iter().filter(|r| **r == cut || r.dev == down) {
            want.push(("missing-route".to_string(), format!("ip route replace {r}")));
        }
        let (code, out) = topo_check(&net, h, &["--json"]);
        assert_eq!(code, 1, "{out}");
        let got = problems(&out);
        assert_eq!(got, want, "{out}");
        // Every fix is `topo routes`' own text.
        let plan = Command::new(hxcomm())
            .args([
                "topo",
                "routes",
                "--topology",
                "hxb:2x2x2",
                "--links-per-dim",
                "2",
            ])
            .args(["--host", &h.to_string()])
            .output()
            .unwrap();
        let plan = String::from_utf8_lossy(&plan.stdout).into_owned();
        for (_, fix) in &got {
            assert!(
                plan.lines().any(|l| l == fix),
                "{fix:?} is not a line of topo routes"
            );
        }
        // The text: a header and one line per problem, each with its fix.
        let (code, text) = topo_check(&net, h, &[]);
        assert_eq!(code, 1);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(
            lines[0],
            format!("host 5 (1,0,1) of hxb:2x2x2 x 2: {} problems", want.len())
        );
        assert_eq!(lines.len(), 1 + want.len(), "{text}");
        for (line, (_, fix)) in lines[1..].iter().zip(&want) {
            assert!(line.ends_with(&format!("; fix: {fix}")), "{line}");
        }
        println!("topo check on host {h} after breaking it:\n{text}");

        // The fixes, in the order given, make it whole again.
        for (_, fix) in &got {
            in_ns(&ns, fix);
        }
        let (code, out) = topo_check(&net, h, &[]);
        assert_eq!(code, 0, "{out}");
    }
    let left = namespaces_of(&name);
    assert!(left.is_empty(), "left behind after net down: {left:?}");
}
