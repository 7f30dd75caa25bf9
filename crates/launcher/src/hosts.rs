//! Host lists for jobs on several machines: `--hosts a,b:4,c` and `--hostfile FILE` (Open MPI's
//! `host slots=N` and Hydra's `host:N` lines), placement of ranks on their slots, and the
//! launcher's address towards the hosts (where the bootstrap service listens).
//!
//! Why it is separate: all of it is pure or nearly so (name resolution aside), runs before any
//! process starts, and every error names the host and where it was given (`--hosts` entry or
//! file and line), so a typo fails at once instead of after half the hosts are logged into.

use std::net::{IpAddr, Ipv4Addr, SocketAddr, ToSocketAddrs, UdpSocket};

/// One host of the job, as given.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostSpec {
    pub name: String,
    pub slots: u32,
    /// Where it was given: `--hosts entry 2` or `FILE line 7`, for messages.
    pub origin: String,
}

fn parse_slots(s: &str, what: &str, origin: &str) -> Result<u32, String> {
    match s.parse::<u32>() {
        Ok(n) if n >= 1 => Ok(n),
        _ => Err(format!(
            "{origin}: bad slot count {s:?} for {what}: expected a whole number from 1 to {}",
            u32::MAX
        )),
    }
}

fn check_name(name: &str, origin: &str) -> Result<(), String> {
    let ok = !name.is_empty()
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_'));
    if ok {
        Ok(())
    } else {
        Err(format!(
            "{origin}: bad host name {name:?} (letters, digits, '.', '-', '_'; IPv6 addresses are not supported here)"
        ))
    }
}

/// `a,b:4,c`: hosts separated by commas, each with an optional `:SLOTS` (default 1).
pub fn parse_hosts_arg(s: &str) -> Result<Vec<HostSpec>, String> {
    let mut out = Vec::new();
    for (i, entry) in s.split(',').enumerate() {
        let origin = format!("--hosts entry {} ({entry:?})", i + 1);
        let entry = entry.trim();
        let (name, slots) = match entry.split_once(':') {
            Some((n, s)) => (n, parse_slots(s, n, &origin)?),
            None => (entry, 1),
        };
        check_name(name, &origin)?;
        out.push(HostSpec {
            name: name.to_owned(),
            slots,
            origin,
        });
    }
    check_duplicates(&out)?;
    Ok(out)
}

/// A hostfile: one host a line, `host`, `host slots=N` (Open MPI; `max_slots=M` is accepted and
/// must not be below N) or `host:N` (Hydra); `#` starts a comment; blank lines are skipped.
pub fn parse_hostfile(text: &str, file: &str) -> Result<Vec<HostSpec>, String> {
    let mut out = Vec::new();
    for (i, raw) in text.lines().enumerate() {
        let origin = format!("{file} line {}", i + 1);
        let line = raw.split('#').next().unwrap_or("").trim();
        if line.is_empty() {
            continue;
        }
        let mut words = line.split_whitespace();
        let first = words.next().unwrap_or_default();
        let (name, mut slots) = match first.split_once(':') {
            Some((n, s)) => (n, Some(parse_slots(s, n, &origin)?)),
            None => (first, None),
        };
        check_name(name, &origin)?;
        let mut max_slots = None;
        for w in words {
            match w.split_once('=') {
                Some(("slots", v)) if slots.is_none() => slots = Some(parse_slots(v, name, &origin)?),
                Some(("slots", _)) => {
                    return Err(format!("{origin}: slots given twice for {name}"))
                }
                Some(("max_slots" | "max-slots", v)) => {
                    max_slots = Some(parse_slots(v, name, &origin)?)
                }
                _ => {
                    return Err(format!(
                        "{origin}: unknown word {w:?} after host {name} (expected `{name} slots=N` or `{name}:N`)"
                    ))
                }
            }
        }
        let slots = slots.unwrap_or(1);
        if max_slots.is_some_and(|m| m < slots) {
            return Err(format!(
                "{origin}: max_slots below slots={slots} for {name}"
            ));
        }
        out.push(HostSpec {
            name: name.to_owned(),
            slots,
            origin,
        });
    }
    if out.is_empty() {
        return Err(format!("{file}: no hosts in the file"));
    }
    check_duplicates(&out)?;
    Ok(out)
}

fn check_duplicates(hosts: &[HostSpec]) -> Result<(), String> {
    for (i, h) in hosts.iter().enumerate() {
        if let Some(first) = hosts[..i]
            .iter()
            .find(|o| o.name.eq_ignore_ascii_case(&h.name))
        {
            return Err(format!(
                "{}: duplicate host {} (already given at {}); give each host once with its slot count",
                h.origin, h.name, first.origin
            ));
        }
    }
    Ok(())
}

/// Where one rank goes: host index, local rank, local size.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Slot {
    pub host: u32,
    pub local_rank: u32,
    pub local_size: u32,
}

/// Fills the hosts in order: the first `slots` ranks on the first host, the next on the second,
/// and so on. More ranks than slots is an error unless `oversubscribe`, which goes round the
/// hosts again (same slot counts) until every rank has a place.
pub fn fill(ranks: u32, hosts: &[HostSpec], oversubscribe: bool) -> Result<Vec<Slot>, String> {
    let total: u64 = hosts.iter().map(|h| u64::from(h.slots)).sum();
    if total == 0 {
        return Err("no hosts given".into());
    }
    if u64::from(ranks) > total && !oversubscribe {
        let list: Vec<String> = hosts
            .iter()
            .map(|h| format!("{}:{}", h.name, h.slots))
            .collect();
        return Err(format!(
            "-n {ranks} is more than the {total} slots of the hosts ({}); give more slots, or --oversubscribe to place the extra ranks round the hosts again",
            list.join(",")
        ));
    }
    let mut out = Vec::with_capacity(ranks as usize);
    let mut count = vec![0u32; hosts.len()];
    'outer: loop {
        for (h, spec) in hosts.iter().enumerate() {
            for _ in 0..spec.slots {
                if out.len() == ranks as usize {
                    break 'outer;
                }
                out.push(Slot {
                    host: h as u32,
                    local_rank: count[h],
                    local_size: 0,
                });
                count[h] += 1;
            }
        }
    }
    for s in &mut out {
        s.local_size = count[s.host as usize];
    }
    Ok(out)
}

/// Resolves a host name (IPv4 preferred), naming the host and where it was given on failure.
pub fn resolve(h: &HostSpec) -> Result<IpAddr, String> {
    let addrs: Vec<SocketAddr> = match (h.name.as_str(), 0u16).to_socket_addrs() {
        Ok(a) => a.collect(),
        Err(e) => {
            return Err(format!(
                "{}: unknown host {}: cannot resolve it ({e})",
                h.origin, h.name
            ))
        }
    };
    addrs
        .iter()
        .find(|a| a.is_ipv4())
        .or(addrs.first())
        .map(|a| a.ip())
        .ok_or_else(|| {
            format!(
                "{}: unknown host {}: it resolves to no address",
                h.origin, h.name
            )
        })
}

/// The launcher's own address on the route towards `to` (what the kernel would pick as source
/// address; nothing is sent). Loopback for a loopback destination.
pub fn source_address_towards(to: IpAddr) -> std::io::Result<IpAddr> {
    if to.is_loopback() {
        return Ok(if to.is_ipv4() {
            IpAddr::V4(Ipv4Addr::LOCALHOST)
        } else {
            to
        });
    }
    let bind: SocketAddr = if to.is_ipv4() {
        (Ipv4Addr::UNSPECIFIED, 0).into()
    } else {
        (std::net::Ipv6Addr::UNSPECIFIED, 0).into()
    };
    let s = UdpSocket::bind(bind)?;
    s.connect(SocketAddr::new(to, 9))?;
    Ok(s.local_addr()?.ip())
}

/// Quotes `s` for a POSIX shell (the remote login shell that runs the agent's command line).
pub fn shell_quote(s: &str) -> String {
    if !s.is_empty()
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || "/._-+=:,@%".contains(c))
    {
        return s.to_owned();
    }
    format!("'{}'", s.replace('\'', r"'\''"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(v: &[HostSpec]) -> Vec<(&str, u32)> {
        v.iter().map(|h| (h.name.as_str(), h.slots)).collect()
    }

    #[test]
    fn hosts_argument() {
        let h = parse_hosts_arg("a,b:4,c").unwrap();
        assert_eq!(names(&h), [("a", 1), ("b", 4), ("c", 1)]);
        let e = parse_hosts_arg("a,b:0").unwrap_err();
        assert!(e.contains("bad slot count \"0\" for b"), "{e}");
        assert!(e.contains("--hosts entry 2"), "{e}");
        let e = parse_hosts_arg("a,b:x").unwrap_err();
        assert!(e.contains("bad slot count \"x\""), "{e}");
        let e = parse_hosts_arg("a,b,A:2").unwrap_err();
        assert!(e.contains("duplicate host A"), "{e}");
        assert!(e.contains("--hosts entry 1"), "{e}");
        assert!(parse_hosts_arg("a,,b").is_err());
        assert!(parse_hosts_arg("a b").is_err());
    }

    #[test]
    fn hostfile_formats() {
        let f = "# cluster\n\nnode1 slots=2\nnode2:3   # hydra style\n  node3\nnode4 slots=2 max_slots=4\n";
        let h = parse_hostfile(f, "hf").unwrap();
        assert_eq!(
            names(&h),
            [("node1", 2), ("node2", 3), ("node3", 1), ("node4", 2)]
        );
        assert_eq!(h[1].origin, "hf line 4");
        let e = parse_hostfile("a\nb slots=-1\n", "hf").unwrap_err();
        assert!(
            e.starts_with("hf line 2: bad slot count \"-1\" for b"),
            "{e}"
        );
        let e = parse_hostfile("a\nb\na:2\n", "hf").unwrap_err();
        assert!(
            e.starts_with("hf line 3: duplicate host a (already given at hf line 1)"),
            "{e}"
        );
        let e = parse_hostfile("a cpus=3\n", "hf").unwrap_err();
        assert!(e.contains("hf line 1: unknown word \"cpus=3\""), "{e}");
        let e = parse_hostfile("a:2 slots=3\n", "hf").unwrap_err();
        assert!(e.contains("slots given twice"), "{e}");
        let e = parse_hostfile("# nothing\n\n", "hf").unwrap_err();
        assert!(e.contains("no hosts"), "{e}");
        let e = parse_hostfile("a slots=4 max_slots=2", "hf").unwrap_err();
        assert!(e.contains("max_slots"), "{e}");
    }

    #[test]
    fn filling_slots() {
        let h = parse_hosts_arg("a:2,b,c:3").unwrap();
        let s = fill(4, &h, false).unwrap();
        let v: Vec<(u32, u32, u32)> = s
            .iter()
            .map(|s| (s.host, s.local_rank, s.local_size))
            .collect();
        assert_eq!(v, [(0, 0, 2), (0, 1, 2), (1, 0, 1), (2, 0, 1)]);
        let e = fill(7, &h, false).unwrap_err();
        assert!(e.contains("-n 7 is more than the 6 slots"), "{e}");
        assert!(e.contains("--oversubscribe"), "{e}");
        let s = fill(8, &h, true).unwrap();
        let hosts: Vec<u32> = s.iter().map(|s| s.host).collect();
        assert_eq!(hosts, [0, 0, 1, 2, 2, 2, 0, 0]);
        assert_eq!(s[7].local_rank, 3);
        assert_eq!(s[7].local_size, 4);
    }

    #[test]
    fn resolution_and_quoting() {
        let h = HostSpec {
            name: "127.0.0.3".into(),
            slots: 1,
            origin: "x".into(),
        };
        assert_eq!(
            resolve(&h).unwrap(),
            IpAddr::V4(Ipv4Addr::new(127, 0, 0, 3))
        );
        let h = HostSpec {
            name: "no-such-host-hx.invalid".into(),
            slots: 1,
            origin: "hf line 2".into(),
        };
        let e = resolve(&h).unwrap_err();
        assert!(
            e.starts_with("hf line 2: unknown host no-such-host-hx.invalid"),
            "{e}"
        );
        assert_eq!(
            source_address_towards("127.0.0.5".parse().unwrap()).unwrap(),
            IpAddr::V4(Ipv4Addr::LOCALHOST)
        );
        assert_eq!(shell_quote("/usr/bin/hxcomm"), "/usr/bin/hxcomm");
        assert_eq!(shell_quote("a b'c"), r"'a b'\''c'");
        assert_eq!(shell_quote(""), "''");
    }
}
