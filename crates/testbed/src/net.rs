//! Building and tearing down testbeds with `ip` and `tc`.
//!
//! Layout (PREFIX = the testbed name):
//! - host k is namespace `PREFIXk`; rail i is interface `r<i>` there, 10.10.i.(k+1)/24;
//! - 2 hosts: one veth pair per rail, `PREFIX0:r<i>` <-> `PREFIX1:r<i>`;
//! - more hosts: namespace `PREFIXsw` holds bridge `br<i>` per rail, with port `h<k>r<i>` (the peer of
//!   `PREFIXk:r<i>`); the port is shaped like the host side, so a host receives at most the rail
//!   rate, as from a switch port;
//! - a hyper-crossbar of several dimensions (`hxb:2x2x2`, [`TestbedSpec::dims`]) is wired the same
//!   way with one switch per line and link instead of one per rail: bridge `br<s>` in
//!   `PREFIXsw` for line subnet `s` (hx-topology's plan order: dimension, link, line; a rail is
//!   line subnet `i` of the flat layout, so `br<i>` there too), port `h<k><IF>` for host k's NIC
//!   `IF` = `x<d>l<l>`, the address and prefix of the plan on that NIC, and in every host the
//!   sysctls (forwarding, loose reverse-path filtering, ARP) and the routes hx-topology gives,
//!   so that the hosts' kernels relay along the dimension-order paths;
//! - management: bridge `PREFIX-mgmt` (10.200.N.254/24) in the root namespace, veth `PREFIX-m<k>`
//!   to `PREFIXk:mgmt` (10.200.N.(k+1)/24), never shaped;
//! - every rail interface (and switch port) shaped on egress: `tbf` alone, or `netem` (delay) as
//!   root with `tbf` as its child (the order netem's documentation gives), or `netem` alone;
//! - the management bridge, the root veth ends, each host's `mgmt` and the switch's `br0` carry the
//!   alias `hxcomm-testbed:PREFIX`, so leftovers can be recognised even without a state file.

use crate::hosts;
use crate::spec::{parse_rate, tbf_params, TestbedSpec};
use crate::state::{self, mgmt_bridge, TestbedInfo};
use crate::sys::{ip, link_alias, link_exists, netns_exists, tc, Lock, NETNS_DIR};
use crate::{is_root, RailCounters, TestbedError};
use std::collections::BTreeSet;

fn marker(name: &str) -> String {
    format!("hxcomm-testbed:{name}")
}

fn switch_ns(name: &str) -> String {
    format!("{name}sw")
}

fn root_veth(name: &str, k: u32) -> String {
    format!("{name}-m{k}")
}

/// Plans the objects of a testbed (no side effects).
pub fn plan(spec: &TestbedSpec, mgmt_net: u8) -> Result<TestbedInfo, TestbedError> {
    let topology = spec.topology()?;
    let bridged = spec.hosts > 2 || topology.ndims() > 1;
    let mut namespaces: Vec<String> = (0..spec.hosts).map(|k| spec.host_name(k)).collect();
    if bridged {
        namespaces.push(switch_ns(&spec.name));
    }
    let mut root_links = vec![mgmt_bridge(&spec.name)];
    root_links.extend((0..spec.hosts).map(|k| root_veth(&spec.name, k)));
    Ok(TestbedInfo {
        spec: spec.clone(),
        mgmt_net,
        bridged,
        namespaces,
        root_links,
        topology,
    })
}

/// Brings a testbed up, replacing one of the same name. On failure, removes what it made.
pub fn up(spec: &TestbedSpec) -> Result<TestbedInfo, TestbedError> {
    spec.validate()?;
    if !is_root() {
        return Err(TestbedError::NotRoot);
    }
    let _lock = Lock::acquire()?;
    let previous = state::load(&spec.name)?;
    let reuse = previous.as_ref().map(|p| p.mgmt_net);
    match &previous {
        Some(prev) => teardown(prev)?,
        None => {
            teardown_discovered(&spec.name)?;
        }
    }
    let mgmt_net = choose_mgmt_net(&spec.name, reuse)?;
    let info = plan(spec, mgmt_net)?;
    check_conflicts(&info)?;
    // Recorded before anything is made, so an interrupted `up` can still be taken down.
    state::save(&info)?;
    if let Err(e) = build(&info) {
        if let Err(e2) = teardown(&info) {
            tracing::warn!("cleanup after failed up: {e2}");
        }
        return Err(e);
    }
    Ok(info)
}

/// Takes testbed `name` down. Returns whether there was anything to remove.
pub fn down(name: &str) -> Result<bool, TestbedError> {
    crate::spec::validate_name(name)?;
    if !is_root() {
        return Err(TestbedError::NotRoot);
    }
    let _lock = Lock::acquire()?;
    match state::load(name)? {
        Some(info) => teardown(&info).map(|_| true),
        None => teardown_discovered(name),
    }
}

/// The management subnet N: 0 for `hx`, the one already recorded when replacing, otherwise a
/// value derived from the name (FNV-1a into 1..=255), probing upwards past values that another
/// recorded testbed or any address in the root namespace already uses.
fn choose_mgmt_net(name: &str, reuse: Option<u8>) -> Result<u8, TestbedError> {
    let mut used: BTreeSet<u8> = state::all()
        .into_iter()
        .filter(|t| t.spec.name != name)
        .map(|t| t.mgmt_net)
        .collect();
    used.extend(root_mgmt_nets()?);
    let fixed = if name == "hx" { Some(0) } else { reuse };
    if let Some(n) = fixed {
        if used.contains(&n) {
            return Err(TestbedError::Conflict(format!(
                "management subnet 10.200.{n}.0/24 is already in use in the root namespace or by \
                 another testbed"
            )));
        }
        return Ok(n);
    }
    let h = name.bytes().fold(0x811c9dc5u32, |h, b| {
        (h ^ b as u32).wrapping_mul(0x01000193)
    });
    let start = (h % 255) as u16;
    for d in 0..255u16 {
        let n = ((start + d) % 255 + 1) as u8;
        if !used.contains(&n) {
            return Ok(n);
        }
    }
    Err(TestbedError::Conflict(
        "no free management subnet in 10.200.1-255.0/24".into(),
    ))
}

/// Values N of every 10.200.N.x address present in the root namespace.
fn root_mgmt_nets() -> Result<BTreeSet<u8>, TestbedError> {
    let out = ip(&["-j", "-4", "addr", "show"])?;
    let v: serde_json::Value = serde_json::from_str(&out).unwrap_or_default();
    let mut nets = BTreeSet::new();
    for link in v.as_array().into_iter().flatten() {
        for a in link["addr_info"].as_array().into_iter().flatten() {
            if let Some(local) = a["local"].as_str() {
                let parts: Vec<&str> = local.split('.').collect();
                if parts.len() == 4 && parts[0] == "10" && parts[1] == "200" {
                    if let Ok(n) = parts[2].parse() {
                        nets.insert(n);
                    }
                }
            }
        }
    }
    Ok(nets)
}

/// Refuses to go on if any object to be made already exists (it is not ours: ours were just
/// removed).
fn check_conflicts(info: &TestbedInfo) -> Result<(), TestbedError> {
    for ns in &info.namespaces {
        if netns_exists(ns) {
            return Err(TestbedError::Conflict(format!(
                "network namespace {ns} exists and was not made by `hxcomm net` for testbed {}; \
                 remove it or pick another --name",
                info.name()
            )));
        }
    }
    for l in &info.root_links {
        if link_exists(None, l) {
            return Err(TestbedError::Conflict(format!(
                "interface {l} exists in the root namespace and was not made by `hxcomm net` for \
                 testbed {}; remove it or pick another --name",
                info.name()
            )));
        }
    }
    Ok(())
}

fn disable_ipv6_in(ns: &str) {
    // Keeps rails quiet (no router solicitations, MLD, DAD); best effort.
    let _ = ip(&[
        "netns",
        "exec",
        ns,
        "sysctl",
        "-q",
        "-w",
        "net.ipv6.conf.all.disable_ipv6=1",
        "-w",
        "net.ipv6.conf.default.disable_ipv6=1",
    ]);
}

fn disable_ipv6_root(dev: &str) {
    let _ = std::fs::write(format!("/proc/sys/net/ipv6/conf/{dev}/disable_ipv6"), "1");
}

fn add_netns(ns: &str) -> Result<(), TestbedError> {
    ip(&["netns", "add", ns])?;
    ip(&["-n", ns, "link", "set", "dev", "lo", "up"])?;
    disable_ipv6_in(ns);
    Ok(())
}

/// Shapes egress of `dev` in `ns`: tbf for the rate, netem for the delay (netem root, tbf child).
fn shape(
    ns: &str,
    dev: &str,
    rate: Option<&str>,
    delay: Option<&str>,
    mtu: u32,
) -> Result<(), TestbedError> {
    let tbf = |parent: &[&str]| -> Result<(), TestbedError> {
        let rate = rate.expect("rate");
        let (burst, limit) = tbf_params(parse_rate(rate)?, mtu);
        let (burst, limit) = (burst.to_string(), limit.to_string());
        let mut args = vec!["-n", ns, "qdisc", "replace", "dev", dev];
        args.extend_from_slice(parent);
        args.extend(["tbf", "rate", rate, "burst", &burst, "limit", &limit]);
        tc(&args).map(|_| ()).map_err(|e| explain_qdisc(e, "tbf"))
    };
    let netem = |d: &str| -> Result<(), TestbedError> {
        tc(&[
            "-n", ns, "qdisc", "replace", "dev", dev, "root", "handle", "1:", "netem", "delay", d,
            "limit", "10000",
        ])
        .map(|_| ())
        .map_err(|e| explain_qdisc(e, "netem"))
    };
    match (rate, delay) {
        (None, None) => Ok(()),
        (Some(_), None) => tbf(&["root", "handle", "1:"]),
        (None, Some(d)) => netem(d),
        (Some(_), Some(d)) => {
            netem(d)?;
            tbf(&["parent", "1:1", "handle", "10:"])
        }
    }
}

/// Names a missing qdisc (this kernel may lack sch_netem) instead of tc's terse message.
fn explain_qdisc(e: TestbedError, kind: &str) -> TestbedError {
    match e {
        TestbedError::Command { command, message } if message.contains("kind is unknown") => {
            TestbedError::Command {
                command,
                message: format!(
                    "{message} (this kernel has no `{kind}` qdisc{})",
                    if kind == "netem" {
                        "; --delay needs CONFIG_NET_SCH_NETEM and cannot be emulated here"
                    } else {
                        ""
                    }
                ),
            }
        }
        e => e,
    }
}

/// One switch: the hosts of one line (all hosts in the flat layout) on one link, and NIC
/// index `nic` of each (the rail).
pub(crate) struct Segment {
    /// Line subnet number in plan order: the bridge is `br<index>`.
    pub index: u32,
    /// NIC index (rail) of every host on it.
    pub nic: u32,
    /// The hosts, by position on the line.
    pub hosts: Vec<u32>,
}

/// Every line and link of the topology, in plan order (dimension, link, line); the flat
/// layout has one per rail.
pub(crate) fn segments(info: &TestbedInfo) -> Vec<Segment> {
    let t = &info.topology;
    let mut v = Vec::new();
    for dim in 0..t.ndims() {
        for link in 0..t.links_per_dim() {
            for line in 0..t.lines(dim) {
                v.push(Segment {
                    index: v.len() as u32,
                    nic: dim as u32 * t.links_per_dim() + link,
                    hosts: (0..t.dims()[dim])
                        .filter_map(|pos| t.line_host(dim, line, pos))
                        .collect(),
                });
            }
        }
    }
    v
}

fn build(info: &TestbedInfo) -> Result<(), TestbedError> {
    let spec = &info.spec;
    let name = spec.name.as_str();
    let mark = marker(name);
    let mtu = spec.mtu.to_string();
    let delay = spec.delay.as_deref();
    let hosts = info.host_names();
    for ns in &hosts {
        add_netns(ns)?;
    }
    let sw = switch_ns(name);
    if info.bridged {
        add_netns(&sw)?;
    }
    let prefix = info.topology.subnet_prefix();
    for seg in segments(info) {
        let i = seg.nic;
        let r = info.iface(i);
        let rate = spec.rates[i as usize].as_deref();
        let members: Vec<&String> = seg.hosts.iter().map(|&k| &hosts[k as usize]).collect();
        if info.bridged {
            let br = format!("br{}", seg.index);
            ip(&[
                "-n", &sw, "link", "add", "name", &br, "mtu", &mtu, "type", "bridge",
            ])?;
            if seg.index == 0 {
                ip(&["-n", &sw, "link", "set", "dev", &br, "alias", &mark])?;
            }
            ip(&["-n", &sw, "link", "set", "dev", &br, "up"])?;
            for (&k, host) in seg.hosts.iter().zip(&members) {
                let port = format!("h{k}{r}");
                ip(&[
                    "link", "add", "name", &r, "netns", host, "mtu", &mtu, "type", "veth", "peer",
                    "name", &port, "netns", &sw, "mtu", &mtu,
                ])?;
                ip(&["-n", &sw, "link", "set", "dev", &port, "master", &br])?;
                shape(&sw, &port, rate, delay, spec.mtu)?;
                ip(&["-n", &sw, "link", "set", "dev", &port, "up"])?;
            }
        } else {
            ip(&[
                "link", "add", "name", &r, "netns", members[0], "mtu", &mtu, "type", "veth",
                "peer", "name", &r, "netns", members[1], "mtu", &mtu,
            ])?;
        }
        for (&k, host) in seg.hosts.iter().zip(&members) {
            let addr = format!("{}/{prefix}", info.rail_addr(k, i));
            ip(&["-n", host, "addr", "add", &addr, "dev", &r])?;
            shape(host, &r, rate, delay, spec.mtu)?;
            ip(&["-n", host, "link", "set", "dev", &r, "up"])?;
        }
    }
    for (k, host) in hosts.iter().enumerate() {
        configure_relaying(info, k as u32, host)?;
    }
    // Management network.
    let br = mgmt_bridge(name);
    ip(&["link", "add", "name", &br, "type", "bridge"])?;
    ip(&["link", "set", "dev", &br, "alias", &mark])?;
    disable_ipv6_root(&br);
    let root_addr = format!("{}/24", info.mgmt_addr());
    ip(&["addr", "add", &root_addr, "dev", &br])?;
    ip(&["link", "set", "dev", &br, "up"])?;
    for (k, host) in hosts.iter().enumerate() {
        let v = root_veth(name, k as u32);
        ip(&[
            "link", "add", "name", &v, "type", "veth", "peer", "name", "mgmt", "netns", host,
        ])?;
        disable_ipv6_root(&v);
        ip(&[
            "link", "set", "dev", &v, "alias", &mark, "master", &br, "up",
        ])?;
        let addr = format!("{}/24", info.host_mgmt_addr(k as u32));
        ip(&["-n", host, "link", "set", "dev", "mgmt", "alias", &mark])?;
        ip(&["-n", host, "addr", "add", &addr, "dev", "mgmt"])?;
        ip(&["-n", host, "link", "set", "dev", "mgmt", "up"])?;
    }
    let entries: Vec<_> = (0..spec.hosts)
        .map(|k| (info.host_mgmt_addr(k), spec.host_name(k)))
        .collect();
    hosts::update(name, Some(&entries))?;
    Ok(())
}

/// hx-topology's sysctls and routes for host `k` (nothing in the flat layout): the host's
/// kernel forwards along the dimension-order paths.
fn configure_relaying(info: &TestbedInfo, k: u32, ns: &str) -> Result<(), TestbedError> {
    let topo_err = |e: hx_topology::Error| TestbedError::InvalidSpec(format!("topology: {e}"));
    let sysctls: Vec<String> = info
        .topology
        .sysctls()
        .iter()
        .map(|s| format!("{}={}", s.key, s.value))
        .collect();
    if !sysctls.is_empty() {
        let mut args = vec!["netns", "exec", ns, "sysctl", "-q"];
        for s in &sysctls {
            args.extend(["-w", s.as_str()]);
        }
        ip(&args)?;
    }
    for r in info.topology.routes(k).map_err(topo_err)? {
        route_replace(ns, None, &r)?;
    }
    let detours = info.topology.detour_routes(k).map_err(topo_err)?;
    if !detours.is_empty() {
        let table = hx_topology::DETOUR_TABLE.to_string();
        // Replace the rule: a second `net link ... up` must not add it twice.
        let _ = ip(&["-n", ns, "rule", "del", "pref", &table]);
        let rule = hx_topology::detour_rule();
        let mut args = vec!["-n", ns, "rule", "add"];
        args.extend(rule.split(' '));
        ip(&args)?;
        for r in detours {
            route_replace(ns, Some(&table), &r)?;
        }
    }
    Ok(())
}

/// `ip -n NS route replace [table T] DEST via VIA dev DEV [src SRC]`.
fn route_replace(
    ns: &str,
    table: Option<&str>,
    r: &hx_topology::Route,
) -> Result<(), TestbedError> {
    let (dest, via) = (r.dest.to_string(), r.via.to_string());
    let mut args = vec!["-n", ns, "route", "replace"];
    if let Some(t) = table {
        args.extend(["table", t]);
    }
    args.extend([dest.as_str(), "via", &via, "dev", &r.dev]);
    let src = r.src.map(|s| s.to_string());
    if let Some(s) = &src {
        args.extend(["src", s.as_str()]);
    }
    ip(&args)?;
    Ok(())
}

/// Removes every object recorded in `info` that still exists, the hosts block and the record.
/// Tries everything; returns the first error.
fn teardown(info: &TestbedInfo) -> Result<(), TestbedError> {
    let mut first: Option<TestbedError> = None;
    let mut keep = |r: Result<(), TestbedError>| {
        if let Err(e) = r {
            tracing::warn!("{e}");
            first.get_or_insert(e);
        }
    };
    for l in info.root_links.iter().rev() {
        if link_exists(None, l) {
            keep(del_link(l));
        }
    }
    for ns in &info.namespaces {
        if netns_exists(ns) {
            warn_processes(ns);
            keep(ip(&["netns", "del", ns]).map(|_| ()));
        }
    }
    keep(hosts::update(info.name(), None));
    match first {
        None => state::remove(info.name()),
        Some(e) => Err(e),
    }
}

/// Deletes a root-namespace link; one that vanished meanwhile (its peer's namespace went) is fine.
fn del_link(dev: &str) -> Result<(), TestbedError> {
    match ip(&["link", "del", "dev", dev]) {
        Err(_) if !link_exists(None, dev) => Ok(()),
        r => r.map(|_| ()),
    }
}

fn warn_processes(ns: &str) {
    if let Ok(pids) = ip(&["netns", "pids", ns]) {
        let pids: Vec<&str> = pids.split_whitespace().collect();
        if !pids.is_empty() {
            tracing::warn!(
                "processes {} still run in namespace {ns}; it lives on, unnamed, until they exit",
                pids.join(" ")
            );
        }
    }
}

/// Without a record: removes only objects named for `name` that carry its alias marker, and its
/// /etc/hosts block. Returns whether anything was found.
fn teardown_discovered(name: &str) -> Result<bool, TestbedError> {
    let mark = marker(name);
    let mut found = false;
    // Namespaces first: deleting the root veth ends would take the marked `mgmt` with them.
    // Namespaces: PREFIX<digits> with `mgmt` marked, PREFIXsw with `br0` marked.
    let sw = switch_ns(name);
    if let Ok(dir) = std::fs::read_dir(NETNS_DIR) {
        for e in dir.flatten() {
            let ns = e.file_name().to_string_lossy().into_owned();
            let is_host = ns
                .strip_prefix(name)
                .is_some_and(|d| !d.is_empty() && d.bytes().all(|b| b.is_ascii_digit()));
            let probe = if is_host {
                "mgmt"
            } else if ns == sw {
                "br0"
            } else {
                continue;
            };
            if link_alias(Some(&ns), probe).as_deref() == Some(mark.as_str()) {
                found = true;
                warn_processes(&ns);
                ip(&["netns", "del", &ns])?;
            }
        }
    }
    // Root links: PREFIX-m<digits> and PREFIX-mgmt.
    let out = ip(&["-j", "link", "show"])?;
    let v: serde_json::Value = serde_json::from_str(&out).unwrap_or_default();
    let veth_prefix = format!("{name}-m");
    let bridge = mgmt_bridge(name);
    let mut links: Vec<String> = Vec::new();
    for l in v.as_array().into_iter().flatten() {
        let ifname = l["ifname"].as_str().unwrap_or_default();
        let ours_by_name = ifname == bridge
            || ifname
                .strip_prefix(&veth_prefix)
                .is_some_and(|d| !d.is_empty() && d.bytes().all(|b| b.is_ascii_digit()));
        if ours_by_name && l["ifalias"].as_str() == Some(mark.as_str()) {
            links.push(ifname.to_string());
        }
    }
    links.sort_by_key(|l| l == &bridge); // veths first, bridge last
    for l in &links {
        found = true;
        del_link(l)?;
    }
    let had_block = std::fs::read_to_string(hosts::HOSTS_FILE)
        .map(|c| hosts::has_block(&c, name))
        .unwrap_or(false);
    if had_block {
        found = true;
        hosts::update(name, None)?;
    }
    Ok(found)
}

/// Sets rail `rail` of host `host` down or up. Setting a NIC down removes the relay routes
/// through it; setting it up puts them back (on a hyper-crossbar).
pub fn link(info: &TestbedInfo, host: u32, rail: u32, up: bool) -> Result<(), TestbedError> {
    if host >= info.spec.hosts || rail >= info.spec.rails {
        return Err(TestbedError::InvalidSpec(format!(
            "testbed {} has hosts 0..{} and rails 0..{}; got host {host}, rail {rail}",
            info.name(),
            info.spec.hosts,
            info.spec.rails
        )));
    }
    if !is_root() {
        return Err(TestbedError::NotRoot);
    }
    let ns = info.spec.host_name(host);
    let dev = info.iface(rail);
    ip(&[
        "-n",
        &ns,
        "link",
        "set",
        "dev",
        &dev,
        if up { "up" } else { "down" },
    ])?;
    if up {
        configure_relaying(info, host, &ns)?;
    }
    Ok(())
}

/// Byte counters of every rail interface: `[host][rail]`.
pub fn counters(info: &TestbedInfo) -> Result<Vec<Vec<RailCounters>>, TestbedError> {
    let mut all = Vec::new();
    for host in info.host_names() {
        let out = ip(&["-n", &host, "-s", "-j", "link", "show"])?;
        let v: serde_json::Value =
            serde_json::from_str(&out).map_err(|e| TestbedError::Command {
                command: format!("ip -n {host} -s -j link show"),
                message: format!("unexpected output: {e}"),
            })?;
        let mut rails = Vec::new();
        for i in 0..info.spec.rails {
            let dev = info.iface(i);
            let l = v
                .as_array()
                .and_then(|a| {
                    a.iter()
                        .find(|l| l["ifname"].as_str() == Some(dev.as_str()))
                })
                .ok_or_else(|| {
                    TestbedError::NotFound(format!("interface {dev} in namespace {host}"))
                })?;
            let s = &l["stats64"];
            let n = |dir: &str, what: &str| s[dir][what].as_u64().unwrap_or(0);
            let flags: Vec<&str> = l["flags"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|f| f.as_str())
                .collect();
            rails.push(RailCounters {
                tx_bytes: n("tx", "bytes"),
                rx_bytes: n("rx", "bytes"),
                tx_packets: n("tx", "packets"),
                rx_packets: n("rx", "packets"),
                up: flags.contains(&"UP"),
                carrier: flags.contains(&"LOWER_UP"),
            });
        }
        all.push(rails);
    }
    Ok(all)
}
