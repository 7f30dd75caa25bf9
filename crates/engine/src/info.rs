//! `hxcomm info`: what this host would use and why, and every setting with its value and where
//! it came from (as `ompi_info`, `ucx_info -d` and `fi_info` tell theirs).

use std::net::Ipv4Addr;

use hx_transport::ifaces;

use hx_wire::ADDRESS_MAX_RAILS;

use crate::{setup, Settings};

/// Every setting a rank reads: name (without HX_), default, meaning.
pub const SETTINGS: &[(&str, &str, &str)] = &[
    (
        "POLICY",
        "adaptive",
        "which rails carry which bytes: bind, rr, stripe, adaptive",
    ),
    ("RAILS", "all", "use only these interfaces, by name"),
    (
        "TOPOLOGY",
        "none",
        "hyper-crossbar this host is part of (hxb:2x2x2): peers over its disjoint relayed paths",
    ),
    (
        "LINKS_PER_DIM",
        "1",
        "with HX_TOPOLOGY: links (NICs) per host and dimension",
    ),
    (
        "DETOURS",
        "0",
        "with HX_TOPOLOGY: line neighbours also over 3-hop detours through the other dimensions",
    ),
    (
        "TRANSPORTS",
        "shm,tcp",
        "shm,tcp: same-host peers use shared memory; tcp: the network path",
    ),
    (
        "DIRECT",
        "1",
        "same-host large messages copied once into the receiver (process_vm_writev)",
    ),
    (
        "SHM_LANE",
        "1",
        "same-host messages of up to 32 bytes that answer the peer go through a lane of fixed slots beside the ring, unframed (0: through the ring)",
    ),
    (
        "SHM_PREFAULT",
        "64m",
        "bytes of same-host rings populated ahead of use once 32 KiB have gone through them (the rest fault page by page)",
    ),
    (
        "LOOPBACK_RAILS",
        "1",
        "with HX_TRANSPORTS=tcp: TCP connections per same-host peer",
    ),
    (
        "SPIN_US",
        "200",
        "how long a waiting call polls before it sleeps in epoll",
    ),
    (
        "YIELD",
        "auto",
        "yield the CPU while spinning (auto: more ranks here than cores)",
    ),
    (
        "BULK_WAIT_US",
        "1000",
        "libfabric provider: a CQ read waits this long in epoll while bulk data is in flight",
    ),
    (
        "EAGER_LIMIT",
        "32k",
        "larger messages go by rendezvous (same on all ranks)",
    ),
    ("CHUNK", "256k", "largest data frame of a striped message"),
    (
        "MIN_CHUNK",
        "16k",
        "smallest data frame of a striped message",
    ),
    (
        "NOTSENT_LOWAT",
        "128k",
        "unsent bytes a rail socket may hold (TCP_NOTSENT_LOWAT)",
    ),
    (
        "SNDBUF",
        "768k",
        "send buffer of a TCP rail socket (SO_SNDBUF, which the kernel doubles; capped by net.core.wmem_max unless the process has CAP_NET_ADMIN); 0: the kernel sizes it. Where the CPU is the limit, data kept longer goes cold in the cache: both ways over unlimited rails 1.14-1.23x the kernel's sizing",
    ),
    (
        "RCVBUF",
        "0",
        "receive buffer of a TCP rail socket (SO_RCVBUF, which the kernel doubles; capped by net.core.rmem_max unless the process has CAP_NET_ADMIN); 0: the kernel sizes it (autotuning). Where the CPU is the limit and a rank only receives, 512k-2m read 1.02-1.14x one way over unlimited rails with no slow runs in two sets, 0.89-0.99x and 0.75-1.00x with slow runs under every size in two more (the machine's, not the buffer's); both ways 0.84-0.95x the kernel's sizing",
    ),
    (
        "TCP_CONGESTION",
        "reno",
        "TCP congestion control of rail sockets (system: the kernel's default, and no switching); reno neither paces nor leaves slow start early: over unlimited rails BBR's pacing cut bulk to 1.2 GB/s in 6 of 9 runs (reno 7.7-8.7), cubic's HyStart made 32 KiB messages 1.2-1.3x slower",
    ),
    (
        "TCP_CONGESTION_LATENCY",
        "same",
        "TCP congestion control of a rail socket until it fills, and again after 200 ms without a write (same: HX_TCP_CONGESTION throughout); BBR here left filled sockets paced, 1.1-1.8x slower for 64 KiB-4 MiB over 4 unlimited rails",
    ),
    (
        "RAIL_RATE",
        "none",
        "each rail's link rate (1gbit, 2.5gbit, 100mbit): TCP rail sockets are paced 5% above it, so data waits in the socket rather than behind megabytes in a deep switch queue (64-128 KiB two ways over 4 x 1 Gbit/s testbed rails 1.04-1.29x; ping-pongs that a token bucket passed in a burst take the wire's time); none: not paced",
    ),
    (
        "EAGER_CREDITS",
        "4m",
        "eager bytes a sender may have outstanding at one receiver",
    ),
    (
        "RAIL_TIMEOUT",
        "1000",
        "ms without progress after which a rail counts as broken",
    ),
    (
        "RANK_TIMEOUT",
        "30",
        "s a peer may stay unreachable before operations involving it fail",
    ),
    ("CONNECT_TIMEOUT", "30", "s one connection attempt may take"),
    (
        "BOOTSTRAP_TIMEOUT",
        "60",
        "s a bootstrap get/fence may wait",
    ),
    (
        "JOB_TIMEOUT",
        "none",
        "hxcomm run: stop the job after this many seconds",
    ),
    (
        "LOG",
        "warn",
        "log filter (info, debug, hx_engine=debug, ...)",
    ),
];

/// The report, or the first malformed setting (named).
pub fn report(get: &dyn Fn(&str) -> Option<String>) -> Result<String, crate::Error> {
    let settings = Settings::from_lookup(get)?;
    let mut out = format!("hxcomm {}\n\n", env!("CARGO_PKG_VERSION"));
    out.push_str("Settings (HX_*, also FI_HXCOMM_* under the libfabric provider):\n");
    for (name, default, meaning) in SETTINGS {
        let var = format!("HX_{name}");
        let alias = format!("FI_HXCOMM_{name}");
        let (value, source) = match (get(&var), get(&alias)) {
            (Some(v), _) => (v, format!("environment ({var})")),
            (None, Some(v)) => (v, format!("environment ({alias})")),
            (None, None) => (default.to_string(), "default".to_string()),
        };
        out.push_str(&format!("  {var:<20} {value:<10} {source:<28} {meaning}\n"));
    }
    // The management network is known only inside a job (the launcher's address).
    let mgmt = get("HX_BOOTSTRAP")
        .and_then(|b| b.parse::<std::net::SocketAddr>().ok())
        .and_then(|a| match a.ip() {
            std::net::IpAddr::V4(v4) if !v4.is_loopback() => Some(v4),
            _ => None,
        });
    out.push_str("\nInterfaces (IPv4):\n");
    let all = ifaces::list().map_err(crate::error::io_err("listing interfaces"))?;
    let (rails, place) = match &settings.topology {
        Some(t) => match setup::topology_interfaces(t, mgmt) {
            Ok((p, r)) => (Ok(r), Some(p)),
            Err(e) => (Err(e), None),
        },
        None => (setup::rail_interfaces(&settings, mgmt), None),
    };
    let used: Vec<String> = match &rails {
        Ok(r) => r
            .iter()
            .take(if place.is_some() {
                usize::MAX
            } else {
                ADDRESS_MAX_RAILS
            })
            .map(|i| i.name.clone())
            .collect(),
        Err(_) => Vec::new(),
    };
    for i in &all {
        let why = if i.loopback || i.addr.is_loopback() {
            "left out: loopback (same-host peers use shared memory or HX_LOOPBACK_RAILS)"
                .to_string()
        } else if !i.up {
            "left out: down".to_string()
        } else if mgmt.is_some_and(|m| i.contains(m)) {
            format!(
                "left out: the management network ({} is there)",
                mgmt.unwrap_or(Ipv4Addr::UNSPECIFIED)
            )
        } else if used.contains(&i.name) {
            "rail".to_string()
        } else if settings
            .rails
            .as_ref()
            .is_some_and(|n| !n.contains(&i.name))
        {
            "left out: not in HX_RAILS".to_string()
        } else if place.is_some() {
            "left out: not an address of the topology's plan".to_string()
        } else {
            format!("left out: same subnet as another rail, or beyond the {ADDRESS_MAX_RAILS} an address describes")
        };
        out.push_str(&format!(
            "  {:<12} {}/{:<3} {why}\n",
            i.name, i.addr, i.prefix
        ));
    }
    if let Err(e) = &rails {
        out.push_str(&format!("  rails: {e}\n"));
    }
    if let Some(p) = &place {
        out.push_str(&format!(
            "  topology: host {} {:?} of {} with {} link(s) per dimension{}; peers over its \
             disjoint paths\n",
            p.host,
            p.topo.coords(p.host).unwrap_or_default(),
            p.topo.spec(),
            p.topo.links_per_dim(),
            if p.topo.detours() { " and detours" } else { "" }
        ));
    }
    if mgmt.is_none() {
        out.push_str(
            "  (outside a job the management network is not known: under hxcomm run it is the \
             launcher's network, under mpirun/mpiexec the launcher's URIs; HX_RAILS overrides)\n",
        );
    }
    out.push_str("\nShared memory:\n");
    if settings.shm {
        out.push_str("  same-host peers: shared-memory rings (memfd), one per peer pair\n");
        out.push_str(&format!(
            "  small messages (up to {} bytes) answering the peer through the lane beside the \
             ring: {}\n",
            hx_transport::shm::LANE_PAYLOAD,
            if settings.shm_lane {
                "on"
            } else {
                "off (HX_SHM_LANE=0)"
            }
        ));
        use crate::setup::DirectCopy;
        let yama = std::fs::read_to_string("/proc/sys/kernel/yama/ptrace_scope")
            .map(|s| format!("Yama ptrace_scope {}", s.trim()))
            .unwrap_or_else(|_| "no Yama".into());
        let how = match (settings.direct, DirectCopy::here()) {
            (false, _) => "off (HX_DIRECT=0): through the ring".to_string(),
            (true, DirectCopy::Allowed) => format!("on ({yama}: nothing to allow)"),
            (true, DirectCopy::NeedsPtracerAny) => format!(
                "on ({yama}: each rank lets processes of its user attach to it, \
                 PR_SET_PTRACER_ANY; HX_DIRECT=0 avoids that)"
            ),
            (true, DirectCopy::Refused) => format!("off ({yama}): through the ring"),
        };
        out.push_str(&format!(
            "  direct copy of large messages (process_vm_writev): {how}\n"
        ));
    } else {
        out.push_str("  off (HX_TRANSPORTS=tcp): same-host peers use loopback TCP\n");
    }
    Ok(out)
}
