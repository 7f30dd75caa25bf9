//! Settings, read from the environment (the launcher passes `--policy` as HX_POLICY). Every
//! variable is documented in the README's settings table; a malformed value is an error naming the
//! variable, never silently ignored.

use std::time::Duration;

use hx_protocol::{Config, Policy};

use crate::Error;

#[derive(Debug, Clone)]
pub struct Settings {
    pub protocol: Config,
    /// HX_RAILS: use only these interfaces (by name).
    pub rails: Option<Vec<String>>,
    /// HX_TOPOLOGY, HX_LINKS_PER_DIM and HX_DETOURS: the hyper-crossbar this host is part of;
    /// peers are reached over the topology's disjoint paths, relayed by other hosts' kernels.
    pub topology: Option<hx_topology::Topology>,
    /// HX_LOOPBACK_RAILS: connections per peer between ranks on the same host.
    pub loopback_rails: usize,
    /// HX_SPIN_US: how long to poll before sleeping in epoll.
    pub spin: Duration,
    /// HX_YIELD: yield the CPU while spinning (default: when ranks here outnumber the host's
    /// online cores).
    pub yield_while_spinning: bool,
    /// HX_BULK_WAIT_US: how long a polling caller ([`Engine::progress_polled`](crate::Engine::progress_polled)) that finds
    /// nothing to do waits in epoll while bulk data is in flight over sockets (0: never).
    pub bulk_wait: Duration,
    /// HX_NOTSENT_LOWAT: unsent bytes a rail socket may hold.
    pub notsent_lowat: u32,
    /// HX_SNDBUF: each TCP rail socket's send buffer (SO_SNDBUF; 0: the kernel sizes it). A
    /// socket holds what it has not had acknowledged yet; where the CPU is the limit, the
    /// kernel's sizing (up to 4 MiB here) leaves its data cold in the cache by the time it is
    /// copied out: both ways over unlimited rails, 768 KiB carried 1.14-1.23x as much from
    /// 128 KiB messages up (BENCHMARKS.md, "Rail send buffers").
    pub send_buffer: u32,
    /// HX_RCVBUF: each TCP rail socket's receive buffer (SO_RCVBUF; 0, the default: the kernel
    /// sizes it). Where the CPU is the limit and a rank only receives, the kernel's sizing (up
    /// to tcp_rmem's maximum, 32 MiB here) lets unread data queue up and go cold in the cache;
    /// a fixed 512 KiB-2 MiB carried 1.02-1.14x as much one way over 4 unlimited rails (no slow
    /// runs) in two sets, but 0.89-0.99x with slow runs of its own in a third, and both ways
    /// 0.84-0.95x, so it is a knob, not the default (BENCHMARKS.md, "Rail receive buffers",
    /// "Where the bars stand").
    pub receive_buffer: u32,
    /// HX_TCP_CONGESTION: TCP congestion control of rail sockets (default `reno`; None, from
    /// `system`, keeps the kernel's default). Reno because it neither paces (BBR's start leaves
    /// a socket paced by TCP for good, and a paced bulk rail fell to 1.2 GB/s in 6 of 9 runs
    /// where reno read 7.7-8.7) nor leaves slow start early (cubic's HyStart: 32 KiB striped
    /// over 4 unlimited rails 1.2-1.3x reno's time), and every kernel lets any user choose it.
    /// BBR (v1) also drains a busy rail to 4 packets for 200 ms every 10 s (PROBE_RTT).
    pub tcp_congestion: Option<String>,
    /// HX_TCP_CONGESTION_LATENCY: the algorithm of a rail socket that carries no bulk data
    /// (default `same`, i.e. None: the one algorithm throughout; also None with
    /// HX_TCP_CONGESTION=system). If set, a socket that fills switches to HX_TCP_CONGESTION,
    /// and back before its first write after 200 ms without one (conn::BULK_CC_IDLE_MS).
    pub tcp_congestion_latency: Option<String>,
    /// HX_RAIL_RATE: the rate of each rail's link in bits per second (None, from `none`: not
    /// given). Given, every TCP rail socket is paced just above it (SO_MAX_PACING_RATE), so
    /// that data waits in the socket, not in a deep queue further on.
    pub rail_rate: Option<u64>,
    /// HX_CONNECT_TIMEOUT: how long one connection attempt (connect and handshake) may take.
    pub connect_timeout: Duration,
    /// HX_RAIL_TIMEOUT: milliseconds without progress after which a rail counts as broken.
    pub rail_timeout: Duration,
    /// HX_RANK_TIMEOUT: seconds a peer may stay unreachable (all rails down) before operations
    /// involving it fail.
    pub rank_timeout: Duration,
    /// HX_TRANSPORTS: `shm,tcp` (default: shared memory between ranks on one host) or `tcp`.
    pub shm: bool,
    /// HX_DIRECT: copy large messages between ranks of one host straight into the receiver's
    /// buffer (process_vm_writev) instead of through the ring.
    pub direct: bool,
    /// HX_SHM_PREFAULT: bytes of shared-memory rings populated ahead of use once busy (see
    /// hx_transport::shm::PrefaultBudget).
    pub shm_prefault: usize,
    /// HX_SHM_LANE: small messages answering a same-host peer go through the shared-memory
    /// lane (hx_transport::shm, "The lane") when they can, unframed.
    pub shm_lane: bool,
}

/// Where settings are read from: a name -> value lookup (the environment, or the libfabric
/// provider's resolved parameters).
type Lookup<'a> = &'a dyn Fn(&str) -> Option<String>;

fn env_var(name: &str) -> Option<String> {
    std::env::var(name).ok()
}

fn num<T: std::str::FromStr>(var: Lookup, name: &str, default: T) -> Result<T, Error> {
    match var(name).filter(|v| !v.is_empty()) {
        None => Ok(default),
        Some(v) => v
            .parse()
            .map_err(|_| Error::Config(format!("{name}={v}: expected a number"))),
    }
}

fn size(var: Lookup, name: &str, default: usize) -> Result<usize, Error> {
    let Some(v) = var(name).filter(|v| !v.is_empty()) else {
        return Ok(default);
    };
    let (digits, mult) = match v.to_ascii_lowercase() {
        s if s.ends_with('k') => (s[..s.len() - 1].to_string(), 1024),
        s if s.ends_with('m') => (s[..s.len() - 1].to_string(), 1024 * 1024),
        s => (s, 1),
    };
    digits
        .parse::<usize>()
        .map(|n| n * mult)
        .map_err(|_| Error::Config(format!("{name}={v}: expected a size like 65536, 64k or 1m")))
}

impl Settings {
    pub fn from_env() -> Result<Settings, Error> {
        Self::from_lookup(&env_var)
    }

    /// Reads the settings through `get` (`HX_*` name -> value; unset or empty: default).
    pub fn from_lookup(get: &dyn Fn(&str) -> Option<String>) -> Result<Settings, Error> {
        let var = |name: &str| get(name).filter(|v| !v.is_empty());
        let var: Lookup = &var;
        let policy = match var("HX_POLICY") {
            None => Policy::Adaptive,
            Some(p) => Policy::parse(&p).ok_or_else(|| {
                Error::Config(format!(
                    "HX_POLICY={p}: expected one of bind, rr, stripe, adaptive"
                ))
            })?,
        };
        let d = Config::default();
        let protocol = Config {
            policy,
            eager_limit: size(var, "HX_EAGER_LIMIT", d.eager_limit)?,
            max_chunk: size(var, "HX_CHUNK", d.max_chunk)?,
            min_chunk: size(var, "HX_MIN_CHUNK", d.min_chunk)?,
            stage_size: d.stage_size,
            eager_credits: size(var, "HX_EAGER_CREDITS", d.eager_credits)?,
        };
        if protocol.min_chunk == 0 || protocol.max_chunk < protocol.min_chunk {
            return Err(Error::Config(format!(
                "HX_MIN_CHUNK ({}) must be positive and at most HX_CHUNK ({})",
                protocol.min_chunk, protocol.max_chunk
            )));
        }
        if protocol.max_chunk > u32::MAX as usize {
            return Err(Error::Config("HX_CHUNK must be below 4 GiB".into()));
        }
        let rails = var("HX_RAILS").map(|v| {
            v.split(',')
                .map(|s| s.trim().to_string())
                .filter(|s| !s.is_empty())
                .collect::<Vec<_>>()
        });
        let topology = topology(var)?;
        if topology.is_some() && rails.is_some() {
            return Err(Error::Config(
                "HX_RAILS and HX_TOPOLOGY exclude each other: with a topology every NIC it \
                 names carries paths"
                    .into(),
            ));
        }
        let loopback_rails: usize = num(var, "HX_LOOPBACK_RAILS", 1)?;
        if loopback_rails == 0 || loopback_rails > 64 {
            return Err(Error::Config(format!(
                "HX_LOOPBACK_RAILS={loopback_rails}: expected 1 to 64"
            )));
        }
        let cores = online_cores();
        let local: usize = num(var, "HX_LOCAL_SIZE", 1)?;
        let yield_while_spinning = match var("HX_YIELD").as_deref() {
            None => local > cores,
            Some("1") | Some("yes") | Some("true") => true,
            Some("0") | Some("no") | Some("false") => false,
            Some(v) => return Err(Error::Config(format!("HX_YIELD={v}: expected 0 or 1"))),
        };
        Ok(Settings {
            protocol,
            rails,
            topology,
            loopback_rails,
            spin: Duration::from_micros(num(var, "HX_SPIN_US", 200u64)?),
            yield_while_spinning,
            bulk_wait: Duration::from_micros(num(var, "HX_BULK_WAIT_US", 1000u64)?),
            notsent_lowat: size(var, "HX_NOTSENT_LOWAT", 128 * 1024)? as u32,
            send_buffer: size(var, "HX_SNDBUF", 768 * 1024)?.min(i32::MAX as usize / 2) as u32,
            receive_buffer: size(var, "HX_RCVBUF", 0)?.min(i32::MAX as usize / 2) as u32,
            tcp_congestion: tcp_congestion(var, "HX_TCP_CONGESTION", "reno")?,
            tcp_congestion_latency: match tcp_congestion(var, "HX_TCP_CONGESTION", "reno")? {
                None => None,
                Some(bulk) => tcp_congestion(var, "HX_TCP_CONGESTION_LATENCY", "same")?
                    .filter(|latency| *latency != bulk),
            },
            rail_rate: rail_rate(var)?,
            connect_timeout: Duration::from_secs(num(var, "HX_CONNECT_TIMEOUT", 30u64)?),
            rail_timeout: Duration::from_millis(num(var, "HX_RAIL_TIMEOUT", 1000u64)?.max(1)),
            rank_timeout: Duration::from_secs(num(var, "HX_RANK_TIMEOUT", 30u64)?.max(1)),
            shm: transports(var)?,
            direct: match var("HX_DIRECT").as_deref() {
                None | Some("1") | Some("yes") | Some("true") => true,
                Some("0") | Some("no") | Some("false") => false,
                Some(v) => return Err(Error::Config(format!("HX_DIRECT={v}: expected 0 or 1"))),
            },
            shm_prefault: size(var, "HX_SHM_PREFAULT", 64 << 20)?,
            shm_lane: match var("HX_SHM_LANE").as_deref() {
                None | Some("1") | Some("yes") | Some("true") => true,
                Some("0") | Some("no") | Some("false") => false,
                Some(v) => return Err(Error::Config(format!("HX_SHM_LANE={v}: expected 0 or 1"))),
            },
        })
    }
}

fn topology(var: Lookup) -> Result<Option<hx_topology::Topology>, Error> {
    let links = var("HX_LINKS_PER_DIM");
    let detours = match var("HX_DETOURS").as_deref().map(str::trim) {
        None | Some("") | Some("0") | Some("no") | Some("false") => false,
        Some("1") | Some("yes") | Some("true") => true,
        Some(v) => return Err(Error::Config(format!("HX_DETOURS={v}: expected 0 or 1"))),
    };
    let Some(spec) = var("HX_TOPOLOGY") else {
        return match (links, detours) {
            (None, false) => Ok(None),
            (Some(l), _) => Err(Error::Config(format!(
                "HX_LINKS_PER_DIM={l} without HX_TOPOLOGY: set both (e.g. HX_TOPOLOGY=hxb:2x2x2)"
            ))),
            (None, true) => Err(Error::Config(
                "HX_DETOURS=1 without HX_TOPOLOGY: detours need a hyper-crossbar \
                 (e.g. HX_TOPOLOGY=hxb:2x2x2)"
                    .into(),
            )),
        };
    };
    let links: u32 = num(var, "HX_LINKS_PER_DIM", 1)?;
    let t = hx_topology::Topology::parse(spec.trim(), links)
        .map_err(|e| Error::Config(format!("HX_TOPOLOGY={spec}, HX_LINKS_PER_DIM={links}: {e}")))?;
    if detours && t.ndims() == 1 {
        return Err(Error::Config(format!(
            "HX_DETOURS=1 with HX_TOPOLOGY={spec}: one dimension has no other to detour through"
        )));
    }
    Ok(Some(t.with_detours(detours)))
}

/// HX_RAIL_RATE: `none`, or bits per second as tc writes them (`1gbit`, `2.5gbit`, `100mbit`,
/// `640kbit`, or a plain number).
fn rail_rate(var: Lookup) -> Result<Option<u64>, Error> {
    let Some(v) = var("HX_RAIL_RATE").filter(|v| !v.trim().is_empty()) else {
        return Ok(None);
    };
    let t = v.trim().to_ascii_lowercase();
    if t == "none" {
        return Ok(None);
    }
    let (num, mult) = [("gbit", 1e9), ("mbit", 1e6), ("kbit", 1e3), ("bit", 1.0)]
        .iter()
        .find_map(|(suffix, m)| t.strip_suffix(suffix).map(|n| (n, *m)))
        .unwrap_or((t.as_str(), 1.0));
    let bits = num.trim().parse::<f64>().ok().map(|n| n * mult);
    match bits {
        Some(b) if (1000.0..1e15).contains(&b) => Ok(Some(b as u64)),
        _ => Err(Error::Config(format!(
            "HX_RAIL_RATE={v}: expected a link rate such as 1gbit, 2.5gbit or 100mbit \
             (at least 1kbit), or none"
        ))),
    }
}

/// HX_TCP_CONGESTION (`system`: the kernel's default) or HX_TCP_CONGESTION_LATENCY (`same`:
/// no switching): an algorithm's name, or None.
fn tcp_congestion(var: Lookup, name: &str, default: &str) -> Result<Option<String>, Error> {
    // Empty counts as unset, as for the other settings.
    let v = var(name)
        .filter(|v| !v.trim().is_empty())
        .unwrap_or_else(|| default.into());
    let v = v.trim();
    let none = match name {
        "HX_TCP_CONGESTION" => "system",
        _ => "same",
    };
    if v == none {
        return Ok(None);
    }
    // The kernel's names: up to 15 characters (TCP_CA_NAME_MAX 16 with the NUL).
    if v.len() > 15 || !v.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_') {
        return Err(Error::Config(format!(
            "{name}={v}: expected an algorithm name (cubic, bbr, reno, ...) or {none}"
        )));
    }
    Ok(Some(v.to_string()))
}

fn transports(var: Lookup) -> Result<bool, Error> {
    let Some(v) = var("HX_TRANSPORTS") else {
        return Ok(true);
    };
    let mut shm = false;
    let mut tcp = false;
    for t in v.split(',').map(str::trim) {
        match t {
            "shm" => shm = true,
            "tcp" => tcp = true,
            other => {
                return Err(Error::Config(format!(
                    "HX_TRANSPORTS={v}: unknown transport {other:?} (expected shm, tcp)"
                )))
            }
        }
    }
    if !tcp {
        return Err(Error::Config(format!(
            "HX_TRANSPORTS={v}: tcp is needed between hosts (use tcp or shm,tcp)"
        )));
    }
    Ok(shm)
}

/// The host's online cores. Not `available_parallelism`, which counts the CPUs this process may
/// run on: a rank pinned to one core (taskset, `mpirun --bind-to core`) saw one, concluded that
/// two ranks oversubscribe it and yielded on every idle round (8-byte shared-memory latency
/// 0.58 us pinned against 0.28 without the yield).
fn online_cores() -> usize {
    use nix::unistd::{sysconf, SysconfVar};
    match sysconf(SysconfVar::_NPROCESSORS_ONLN) {
        Ok(Some(n)) if n > 0 => n as usize,
        _ => std::thread::available_parallelism().map_or(1, |n| n.get()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn yields(local: usize) -> bool {
        let get = |name: &str| (name == "HX_LOCAL_SIZE").then(|| local.to_string());
        Settings::from_lookup(&get).unwrap().yield_while_spinning
    }

    /// Ranks pinned one per core do not yield: the default counts the host's cores, not the
    /// CPUs the process may run on.
    #[test]
    fn yield_default_counts_the_hosts_cores_not_the_affinity() {
        let cores = online_cores();
        assert!(cores >= std::thread::available_parallelism().unwrap().get());
        assert!(!yields(cores));
        assert!(yields(cores + 1));
        if cores < 2 {
            return;
        }
        // On a thread pinned to one CPU (the affinity is per thread).
        std::thread::spawn(move || {
            let mut one = nix::sched::CpuSet::new();
            one.set(0).unwrap();
            nix::sched::sched_setaffinity(nix::unistd::Pid::from_raw(0), &one).unwrap();
            assert_eq!(std::thread::available_parallelism().unwrap().get(), 1);
            assert!(!yields(cores));
        })
        .join()
        .unwrap();
    }

    #[test]
    fn detours_need_a_multi_dimensional_topology() {
        let with = |pairs: &[(&str, &str)]| {
            let v: Vec<(String, String)> = pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect();
            topology(&move |n: &str| v.iter().find(|(k, _)| k == n).map(|(_, v)| v.clone()))
        };
        let t = with(&[("HX_TOPOLOGY", "hxb:2x2x2"), ("HX_DETOURS", "1")]).unwrap();
        assert!(t.unwrap().detours());
        let t = with(&[("HX_TOPOLOGY", "hxb:2x2x2")]).unwrap();
        assert!(!t.unwrap().detours());
        let e = with(&[("HX_DETOURS", "1")]).unwrap_err().to_string();
        assert!(e.contains("without HX_TOPOLOGY"), "{e}");
        let e = with(&[("HX_TOPOLOGY", "hxb:8"), ("HX_DETOURS", "1")])
            .unwrap_err()
            .to_string();
        assert!(e.contains("one dimension"), "{e}");
        let e = with(&[("HX_TOPOLOGY", "hxb:2x2"), ("HX_DETOURS", "maybe")])
            .unwrap_err()
            .to_string();
        assert!(e.contains("HX_DETOURS=maybe"), "{e}");
    }

    #[test]
    fn socket_buffers_are_sizes_and_0_leaves_them_to_the_kernel() {
        let get = |name: &'static str, v: &str| {
            let v = v.to_string();
            Settings::from_lookup(&move |n: &str| (n == name).then(|| v.clone()))
                .map(|s| (s.send_buffer, s.receive_buffer))
        };
        assert_eq!(get("HX_SNDBUF", "").unwrap(), (768 * 1024, 0));
        assert_eq!(get("HX_SNDBUF", "0").unwrap().0, 0);
        assert_eq!(get("HX_SNDBUF", "1m").unwrap().0, 1 << 20);
        assert_eq!(get("HX_RCVBUF", "512k").unwrap(), (768 * 1024, 512 * 1024));
        assert_eq!(get("HX_RCVBUF", "0").unwrap().1, 0);
        for name in ["HX_SNDBUF", "HX_RCVBUF"] {
            let e = get(name, "lots").unwrap_err().to_string();
            assert!(e.contains(&format!("{name}=lots")), "{e}");
        }
    }

    #[test]
    fn rail_rate_in_bits_per_second() {
        let rate = |v: &str| {
            Settings::from_lookup(&|n: &str| (n == "HX_RAIL_RATE").then(|| v.to_string()))
                .map(|s| s.rail_rate)
        };
        assert_eq!(rate("").unwrap(), None);
        assert_eq!(rate("none").unwrap(), None);
        assert_eq!(rate("1gbit").unwrap(), Some(1_000_000_000));
        assert_eq!(rate("2.5gbit").unwrap(), Some(2_500_000_000));
        assert_eq!(rate("100mbit").unwrap(), Some(100_000_000));
        assert_eq!(rate("640kbit").unwrap(), Some(640_000));
        assert_eq!(rate("1000000").unwrap(), Some(1_000_000));
        for bad in ["fast", "0", "-1gbit", "1gbyte", "1e400gbit", "0.5bit"] {
            let e = rate(bad).unwrap_err().to_string();
            assert!(
                e.contains(&format!("HX_RAIL_RATE={bad}")) && e.contains("1gbit"),
                "{e}"
            );
        }
    }

    #[test]
    fn tcp_congestion_defaults_to_reno() {
        let cc = |v: Option<&str>| {
            let get = |name: &str| (name == "HX_TCP_CONGESTION").then(|| v.unwrap().to_string());
            let none = |_: &str| None;
            if v.is_some() {
                Settings::from_lookup(&get).map(|s| s.tcp_congestion)
            } else {
                Settings::from_lookup(&none).map(|s| s.tcp_congestion)
            }
        };
        assert_eq!(cc(None).unwrap().as_deref(), Some("reno"));
        assert_eq!(cc(Some("bbr")).unwrap().as_deref(), Some("bbr"));
        assert_eq!(cc(Some("system")).unwrap(), None);
        assert_eq!(cc(Some("")).unwrap().as_deref(), Some("reno"));
        assert!(cc(Some("cubic;rm")).is_err());
    }

    #[test]
    fn rails_keep_one_algorithm_unless_given_one_for_latency() {
        let both = |vars: &[(&str, &str)]| {
            Settings::from_lookup(&|n: &str| {
                vars.iter()
                    .find(|(k, _)| *k == n)
                    .map(|(_, v)| v.to_string())
            })
            .map(|s| (s.tcp_congestion, s.tcp_congestion_latency))
        };
        let s = |v: &str| Some(v.to_string());
        assert_eq!(both(&[]).unwrap(), (s("reno"), None));
        let latency = |v| both(&[("HX_TCP_CONGESTION_LATENCY", v)]);
        assert_eq!(latency("same").unwrap(), (s("reno"), None));
        assert_eq!(latency("bbr").unwrap(), (s("reno"), s("bbr")));
        assert_eq!(
            latency("reno").unwrap(),
            (s("reno"), None),
            "nothing to switch"
        );
        assert_eq!(latency("").unwrap(), (s("reno"), None));
        let cubic_bbr = both(&[
            ("HX_TCP_CONGESTION", "cubic"),
            ("HX_TCP_CONGESTION_LATENCY", "bbr"),
        ]);
        assert_eq!(cubic_bbr.unwrap(), (s("cubic"), s("bbr")));
        let e = latency("bbr 2").unwrap_err().to_string();
        assert!(
            e.contains("HX_TCP_CONGESTION_LATENCY=bbr 2") && e.contains("same"),
            "{e}"
        );
        // The kernel's default throughout, as asked.
        let system = both(&[("HX_TCP_CONGESTION", "system")]).unwrap();
        assert_eq!(system, (None, None));
        let bulk_bbr = both(&[("HX_TCP_CONGESTION", "bbr")]).unwrap();
        assert_eq!(bulk_bbr, (s("bbr"), None));
    }
}
