//! Turning `RunArgs` into a plan: which program, which ranks on which host, which address the
//! bootstrap service listens on, which environment each rank gets.
//!
//! Why it is separate: everything here is checked before a single process starts, so a typo in a
//! policy name or a missing testbed fails at once with a clear message instead of after half the
//! ranks are running; and the placement arithmetic is pure and unit-tested.

use std::net::{IpAddr, Ipv4Addr};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use crate::hosts::{self, HostSpec, Slot};
use crate::RunArgs;

/// Scheduling policies the engine understands (`HX_POLICY`).
pub const POLICIES: [&str; 4] = ["bind", "rr", "stripe", "adaptive"];

/// Where one rank runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Placement {
    /// Host index (0 without `--net`).
    pub host: u32,
    /// Network namespace to run in (`None`: this namespace).
    pub netns: Option<String>,
    pub local_rank: u32,
    pub local_size: u32,
}

/// Everything needed to start the job.
#[derive(Debug)]
pub struct Plan {
    pub program: PathBuf,
    pub args: Vec<String>,
    pub placements: Vec<Placement>,
    pub bind: IpAddr,
    /// Extra environment for every rank: `--policy` and `--env`.
    pub env: Vec<(String, String)>,
    pub timeout: Option<Duration>,
    /// A job on other hosts (`--hosts` / `--hostfile`); `placements` is then unused.
    pub remote: Option<Remote>,
}

/// Where and how ranks start on other hosts.
#[derive(Debug)]
pub struct Remote {
    /// Every host given, in order (those without ranks too).
    pub hosts: Vec<HostSpec>,
    /// Rank i's host (an index into `hosts`) and local rank.
    pub slots: Vec<Slot>,
    /// The rsh command, word-split; run as `RSH... HOST 'exec AGENT run-agent'`.
    pub rsh: Vec<String>,
    /// hxcomm on the remote hosts.
    pub agent: String,
    /// The program as the remote hosts see it (absolute, or a bare name for their PATH).
    pub program: String,
    /// The launcher's working directory, which the agents enter if their host has it.
    pub cwd: Option<String>,
}

/// A setup error, reported as `hxcomm run: {msg}` with exit code `code`.
#[derive(Debug)]
pub struct PlanError {
    pub msg: String,
    pub code: i32,
}

fn usage(msg: impl Into<String>) -> PlanError {
    PlanError {
        msg: msg.into(),
        code: 2,
    }
}

pub fn plan(args: &RunArgs) -> Result<Plan, PlanError> {
    if args.ranks == 0 {
        return Err(usage("-n must be at least 1"));
    }
    let Some((prog, rest)) = args.program.split_first() else {
        return Err(usage(
            "no program given: hxcomm run -n N -- PROGRAM ARGS...",
        ));
    };
    let mut env = Vec::new();
    if let Some(p) = &args.policy {
        if !POLICIES.contains(&p.as_str()) {
            return Err(usage(format!(
                "unknown policy {p:?}; use one of {}",
                POLICIES.join(", ")
            )));
        }
        env.push(("HX_POLICY".to_owned(), p.clone()));
    }
    for kv in &args.env {
        match kv.split_once('=') {
            Some((k, v)) if !k.is_empty() && !k.contains('\0') && !v.contains('\0') => {
                env.push((k.to_owned(), v.to_owned()))
            }
            _ => return Err(usage(format!("--env {kv:?}: expected KEY=VALUE"))),
        }
    }
    let timeout = match args.timeout {
        None => None,
        Some(t) if t.is_finite() && t > 0.0 && t < 1e9 => Some(Duration::from_secs_f64(t)),
        Some(t) => {
            return Err(usage(format!(
                "--timeout {t}: expected a positive number of seconds"
            )))
        }
    };
    if args.hosts.is_some() || args.hostfile.is_some() {
        let (bind, remote) = plan_remote(args, prog)?;
        return Ok(Plan {
            program: PathBuf::from(&remote.program),
            args: rest.to_vec(),
            placements: Vec::new(),
            bind,
            env,
            timeout,
            remote: Some(remote),
        });
    }
    if args.oversubscribe {
        return Err(usage("--oversubscribe needs --hosts or --hostfile"));
    }
    if args.bootstrap_addr.is_some() {
        return Err(usage("--bootstrap-addr needs --hosts or --hostfile"));
    }
    let program = resolve_program(prog, std::env::var_os("PATH").as_deref())?;

    let (bind, placements) = if args.net {
        let hosts = testbed_hosts(&args.name)?;
        let bind = mgmt_address(&args.name)?;
        if !nix::unistd::geteuid().is_root() {
            return Err(usage(
                "hxcomm run --net needs root (ranks are started with `ip netns exec`)",
            ));
        }
        let p = match &args.net_hosts {
            None => place(args.ranks, hosts, args.ranks_per_host, Some(&args.name))?,
            Some(list) => {
                check_net_hosts(list, hosts, &args.name)?;
                let mut p = place(args.ranks, list.len() as u32, args.ranks_per_host, None)?;
                for pl in &mut p {
                    pl.host = list[pl.host as usize];
                    pl.netns = Some(format!("{}{}", args.name, pl.host));
                }
                p
            }
        };
        env.extend(testbed_topology_env(&args.name, &env));
        (IpAddr::V4(bind), p)
    } else {
        if args.ranks_per_host.is_some() {
            return Err(usage("--ranks-per-host needs --net"));
        }
        if args.net_hosts.is_some() {
            return Err(usage("--net-hosts needs --net"));
        }
        let p = place(args.ranks, 1, None, None)?;
        (IpAddr::V4(Ipv4Addr::LOCALHOST), p)
    };
    Ok(Plan {
        program,
        args: rest.to_vec(),
        placements,
        bind,
        env,
        timeout,
        remote: None,
    })
}

/// The default agent on the remote hosts: this executable's path if it is `hxcomm` (the usual
/// case: the same installation everywhere), else `hxcomm` on the remote PATH.
fn default_agent() -> String {
    match std::env::current_exe() {
        Ok(exe) if exe.file_name().is_some_and(|f| f == "hxcomm") => {
            exe.to_string_lossy().into_owned()
        }
        _ => "hxcomm".into(),
    }
}

fn plan_remote(args: &RunArgs, prog: &str) -> Result<(IpAddr, Remote), PlanError> {
    if args.net {
        return Err(usage(
            "--net and --hosts/--hostfile exclude each other (for the testbed's hosts over its rsh agent: --hostfile with --rsh bench/netns-rsh)",
        ));
    }
    if args.ranks_per_host.is_some() {
        return Err(usage(
            "--ranks-per-host is for --net; give slots with --hosts a:4 or `host slots=4` in the hostfile",
        ));
    }
    if args.net_hosts.is_some() {
        return Err(usage(
            "--net-hosts is for --net; with --hosts/--hostfile list the hosts there",
        ));
    }
    let hosts = match (&args.hosts, &args.hostfile) {
        (Some(_), Some(_)) => return Err(usage("give --hosts or --hostfile, not both")),
        (Some(h), None) => hosts::parse_hosts_arg(h).map_err(usage)?,
        (None, Some(f)) => {
            let text = std::fs::read_to_string(f)
                .map_err(|e| usage(format!("--hostfile {}: cannot read it: {e}", f.display())))?;
            hosts::parse_hostfile(&text, &f.display().to_string()).map_err(usage)?
        }
        (None, None) => unreachable!("plan_remote without hosts"),
    };
    let slots = hosts::fill(args.ranks, &hosts, args.oversubscribe).map_err(usage)?;
    let mut addrs = Vec::with_capacity(hosts.len());
    for h in &hosts {
        addrs.push(hosts::resolve(h).map_err(usage)?);
    }
    let rsh: Vec<String> = args.rsh.split_whitespace().map(str::to_owned).collect();
    if rsh.is_empty() {
        return Err(usage(
            "--rsh is empty; the default is `ssh -o BatchMode=yes`",
        ));
    }
    let bind = match args.bootstrap_addr {
        Some(a) if a.is_unspecified() => {
            return Err(usage(format!(
                "--bootstrap-addr {a}: give one address of this host that the hosts reach, not a wildcard"
            )))
        }
        Some(a) => a,
        None => {
            // The launcher's address on the route to the first host with ranks that is not this
            // one; all hosts on loopback: loopback.
            let target = slots
                .iter()
                .map(|s| addrs[s.host as usize])
                .find(|a| !a.is_loopback());
            match target {
                None => IpAddr::V4(Ipv4Addr::LOCALHOST),
                Some(t) => hosts::source_address_towards(t).map_err(|e| {
                    usage(format!(
                        "no route to {t} to choose the bootstrap address ({e}); give --bootstrap-addr"
                    ))
                })?,
            }
        }
    };
    let cwd = std::env::current_dir()
        .ok()
        .map(|c| c.to_string_lossy().into_owned());
    let program = crate::agent::remote_program(prog, cwd.as_deref().map(Path::new));
    Ok((
        bind,
        Remote {
            hosts,
            slots,
            rsh,
            agent: args.remote_hxcomm.clone().unwrap_or_else(default_agent),
            program,
            cwd,
        },
    ))
}

/// Rank i goes to host `i mod hosts`, or `i / per_host` with `--ranks-per-host`.
pub fn place(
    ranks: u32,
    hosts: u32,
    per_host: Option<u32>,
    prefix: Option<&str>,
) -> Result<Vec<Placement>, PlanError> {
    let host_of: Box<dyn Fn(u32) -> u32> = match per_host {
        Some(0) => return Err(usage("--ranks-per-host must be at least 1")),
        Some(k) => {
            let need = ranks.div_ceil(k);
            if need > hosts {
                return Err(usage(format!(
                    "{ranks} ranks at {k} per host need {need} hosts, but only {hosts} exist"
                )));
            }
            Box::new(move |i| i / k)
        }
        None => Box::new(move |i| i % hosts),
    };
    let mut count = vec![0u32; hosts as usize];
    let mut out = Vec::with_capacity(ranks as usize);
    for i in 0..ranks {
        let h = host_of(i);
        out.push(Placement {
            host: h,
            netns: prefix.map(|p| format!("{p}{h}")),
            local_rank: count[h as usize],
            local_size: 0,
        });
        count[h as usize] += 1;
    }
    for p in &mut out {
        p.local_size = count[p.host as usize];
    }
    Ok(out)
}

/// Finds PROGRAM: a name with a '/' is taken as is; `hxcomm` is this executable; anything else is
/// looked up on PATH.
pub fn resolve_program(name: &str, path: Option<&std::ffi::OsStr>) -> Result<PathBuf, PlanError> {
    let not_found = |msg: String| PlanError { msg, code: 127 };
    if name.contains('/') {
        let p = Path::new(name);
        if !p.exists() {
            return Err(not_found(format!("program {name} does not exist")));
        }
        // An absolute path keeps working after `ip netns exec` and from any directory.
        return Ok(std::fs::canonicalize(p).unwrap_or_else(|_| p.to_path_buf()));
    }
    if name == "hxcomm" {
        if let Ok(exe) = std::env::current_exe() {
            if exe.file_name().is_some_and(|f| f == "hxcomm") {
                return Ok(exe);
            }
        }
    }
    if let Some(path) = path {
        for dir in std::env::split_paths(path) {
            let cand = dir.join(name);
            if is_executable(&cand) {
                return Ok(cand);
            }
        }
    }
    Err(not_found(format!(
        "program {name:?} not found on PATH (give a path like ./{name} for a program in this directory)"
    )))
}

fn is_executable(p: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// `--net-hosts`: each a host of the testbed, none twice.
fn check_net_hosts(list: &[u32], hosts: u32, prefix: &str) -> Result<(), PlanError> {
    if list.is_empty() {
        return Err(usage("--net-hosts: no host given"));
    }
    for (i, &h) in list.iter().enumerate() {
        if h >= hosts {
            return Err(usage(format!(
                "--net-hosts: testbed {prefix} has hosts 0 to {} ({prefix}0..{prefix}{}), not {h}",
                hosts - 1,
                hosts - 1
            )));
        }
        if list[..i].contains(&h) {
            return Err(usage(format!("--net-hosts: host {h} given twice")));
        }
    }
    Ok(())
}

/// HX_TOPOLOGY, HX_LINKS_PER_DIM (and HX_DETOURS=1 if it has detours) for the ranks of a
/// hyper-crossbar testbed, from its record, unless the user set HX_TOPOLOGY or HX_RAILS (here
/// or with --env). A flat testbed needs them only beyond the rails an address names (the plan
/// gives the others).
fn testbed_topology_env(prefix: &str, env: &[(String, String)]) -> Vec<(String, String)> {
    let user_set = |k: &str| std::env::var_os(k).is_some() || env.iter().any(|(n, _)| n == k);
    if user_set("HX_TOPOLOGY") || user_set("HX_RAILS") {
        return Vec::new();
    }
    match hx_testbed::info(prefix) {
        Ok(Some(info))
            if info.topology.ndims() > 1
                || info.topology.nics_per_host() > hx_wire::ADDRESS_MAX_RAILS =>
        {
            let mut v = vec![
                ("HX_TOPOLOGY".to_owned(), info.topology.spec()),
                (
                    "HX_LINKS_PER_DIM".to_owned(),
                    info.topology.links_per_dim().to_string(),
                ),
            ];
            if info.topology.detours() && !user_set("HX_DETOURS") {
                v.push(("HX_DETOURS".to_owned(), "1".to_owned()));
            }
            v
        }
        _ => Vec::new(),
    }
}

fn no_testbed(prefix: &str) -> PlanError {
    usage(format!(
        "hxcomm run --net: no testbed namespaces named {prefix}0, {prefix}1, ...; bring one up with `hxcomm net up --hosts 2 --rails 4` (needs root)"
    ))
}

/// Number of namespaces PREFIX0, PREFIX1, ... that exist, counting from 0 without gaps.
fn testbed_hosts(prefix: &str) -> Result<u32, PlanError> {
    let out = Command::new("ip")
        .args(["netns", "list"])
        .output()
        .map_err(|e| usage(format!("hxcomm run --net: cannot run `ip netns list`: {e}")))?;
    let names = parse_netns_list(&String::from_utf8_lossy(&out.stdout));
    let hosts = count_hosts(&names, prefix);
    if hosts == 0 {
        return Err(no_testbed(prefix));
    }
    Ok(hosts)
}

pub fn parse_netns_list(s: &str) -> Vec<String> {
    s.lines()
        .filter_map(|l| l.split_whitespace().next())
        .map(str::to_owned)
        .collect()
}

pub fn count_hosts(names: &[String], prefix: &str) -> u32 {
    let mut h = 0u32;
    while names.iter().any(|n| *n == format!("{prefix}{h}")) {
        h += 1;
    }
    h
}

/// The root namespace's management address: 10.200.x.254 on interface PREFIX-mgmt.
fn mgmt_address(prefix: &str) -> Result<Ipv4Addr, PlanError> {
    let dev = format!("{prefix}-mgmt");
    let out = Command::new("ip")
        .args(["-4", "-o", "addr", "show", "dev", &dev])
        .output()
        .map_err(|e| usage(format!("hxcomm run --net: cannot run `ip addr`: {e}")))?;
    parse_mgmt(&String::from_utf8_lossy(&out.stdout)).ok_or_else(|| {
        usage(format!(
            "hxcomm run --net: interface {dev} has no address 10.200.x.254 (the testbed's management network); is the testbed {prefix} up? (`hxcomm net up`)"
        ))
    })
}

pub fn parse_mgmt(s: &str) -> Option<Ipv4Addr> {
    let mut words = s.split_whitespace();
    while let Some(w) = words.next() {
        if w != "inet" {
            continue;
        }
        let a = words.next()?;
        let ip: Ipv4Addr = a.split('/').next()?.parse().ok()?;
        let o = ip.octets();
        if o[0] == 10 && o[1] == 200 && o[3] == 254 {
            return Some(ip);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn placement_round_robin() {
        let p = place(5, 2, None, Some("hx")).unwrap();
        let hosts: Vec<u32> = p.iter().map(|x| x.host).collect();
        assert_eq!(hosts, [0, 1, 0, 1, 0]);
        let local: Vec<(u32, u32)> = p.iter().map(|x| (x.local_rank, x.local_size)).collect();
        assert_eq!(local, [(0, 3), (0, 2), (1, 3), (1, 2), (2, 3)]);
        assert_eq!(p[3].netns.as_deref(), Some("hx1"));
    }

    #[test]
    fn placement_blocked() {
        let p = place(5, 3, Some(2), None).unwrap();
        let v: Vec<(u32, u32, u32)> = p
            .iter()
            .map(|x| (x.host, x.local_rank, x.local_size))
            .collect();
        assert_eq!(v, [(0, 0, 2), (0, 1, 2), (1, 0, 2), (1, 1, 2), (2, 0, 1)]);
        assert!(place(5, 2, Some(2), None).is_err());
        assert!(place(5, 2, Some(0), None).is_err());
    }

    #[test]
    fn netns_and_mgmt_parsing() {
        let names = parse_netns_list("hx1 (id: 1)\nhx0 (id: 0)\nhx3\nother\n");
        assert_eq!(count_hosts(&names, "hx"), 2);
        assert_eq!(count_hosts(&names, "zz"), 0);
        let line = "7: hx-mgmt    inet 10.200.0.254/24 brd 10.200.0.255 scope global hx-mgmt\\       valid_lft forever preferred_lft forever\n";
        assert_eq!(parse_mgmt(line), Some(Ipv4Addr::new(10, 200, 0, 254)));
        assert_eq!(parse_mgmt("7: x inet 10.200.0.1/24 brd"), None);
        assert_eq!(parse_mgmt(""), None);
    }

    #[test]
    fn program_resolution() {
        let path = std::ffi::OsString::from("/nonexistent:/bin:/usr/bin");
        let sh = resolve_program("sh", Some(&path)).unwrap();
        assert!(sh.ends_with("sh"), "{sh:?}");
        let e = resolve_program("no-such-program-hx", Some(&path)).unwrap_err();
        assert_eq!(e.code, 127);
        assert!(e.msg.contains("no-such-program-hx"));
        assert!(resolve_program("./no/such/file", None).is_err());
    }

    #[test]
    fn argument_checks() {
        let mut a = RunArgs::new(2, ["sh", "-c", "true"]);
        a.policy = Some("fastest".into());
        assert!(plan(&a).unwrap_err().msg.contains("unknown policy"));
        let mut a = RunArgs::new(2, ["sh"]);
        a.env = vec!["NOEQUALS".into()];
        assert!(plan(&a).unwrap_err().msg.contains("KEY=VALUE"));
        let a = RunArgs::new(0, ["sh"]);
        assert!(plan(&a).is_err());
        let mut a = RunArgs::new(2, ["sh"]);
        a.ranks_per_host = Some(1);
        assert!(plan(&a).is_err());
        let mut a = RunArgs::new(2, ["sh"]);
        a.net_hosts = Some(vec![0, 7]);
        assert!(plan(&a)
            .unwrap_err()
            .msg
            .contains("--net-hosts needs --net"));
        assert!(check_net_hosts(&[0, 7], 8, "hq").is_ok());
        let e = check_net_hosts(&[0, 8], 8, "hq").unwrap_err().msg;
        assert!(e.contains("hosts 0 to 7") && e.contains("not 8"), "{e}");
        assert!(check_net_hosts(&[3, 3], 8, "hq")
            .unwrap_err()
            .msg
            .contains("host 3 given twice"));
        assert!(check_net_hosts(&[], 8, "hq").is_err());
        let mut a = RunArgs::new(2, ["sh"]);
        a.policy = Some("stripe".into());
        a.env = vec!["A=b=c".into()];
        let p = plan(&a).unwrap();
        assert_eq!(
            p.env,
            [
                ("HX_POLICY".to_owned(), "stripe".to_owned()),
                ("A".to_owned(), "b=c".to_owned())
            ]
        );
    }
}
