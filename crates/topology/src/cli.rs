//! `hxcomm topo routes|show`: the plan and one host's configuration as text.

use clap::{Args, Subcommand};

use crate::Topology;

/// `hxcomm topo`.
#[derive(Args, Debug)]
pub struct TopoArgs {
    /// What to print.
    #[command(subcommand)]
    pub command: TopoCommand,
}

/// `hxcomm topo routes|show`.
#[derive(Subcommand, Debug)]
pub enum TopoCommand {
    /// Print the commands (ip link/addr, sysctl, ip route; one per line, ready for a shell)
    /// that configure one host of a topology.
    Routes(RoutesArgs),
    /// Print the plan: hosts with coordinates and addresses, interfaces, subnets.
    Show(SpecArgs),
}

/// The topology.
#[derive(Args, Debug)]
pub struct SpecArgs {
    /// `hxb:S0xS1x...` (1 to 4 dimensions of 2 to 254 hosts); `hxb:N` is the flat layout.
    #[arg(long)]
    pub topology: String,
    /// Links (NICs) per host and dimension.
    #[arg(long, default_value_t = 1)]
    pub links_per_dim: u32,
}

/// `hxcomm topo routes`.
#[derive(Args, Debug)]
pub struct RoutesArgs {
    #[command(flatten)]
    /// The topology.
    pub spec: SpecArgs,
    /// The host (0 .. number of hosts, numbered by coordinates, last dimension fastest).
    #[arg(long)]
    pub host: u32,
}

/// Runs `hxcomm topo`; the exit code.
pub fn run(args: TopoArgs) -> i32 {
    let spec = match &args.command {
        TopoCommand::Routes(a) => &a.spec,
        TopoCommand::Show(a) => a,
    };
    let topo = match Topology::parse(&spec.topology, spec.links_per_dim) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("hxcomm topo: {e}");
            return 2;
        }
    };
    let text = match &args.command {
        TopoCommand::Routes(a) => topo.host_commands(a.host).map(|v| v.join("\n") + "\n"),
        TopoCommand::Show(_) => Ok(show(&topo)),
    };
    match text {
        Ok(t) => {
            print!("{t}");
            0
        }
        Err(e) => {
            eprintln!("hxcomm topo: {e}");
            2
        }
    }
}

/// The plan, compactly: a summary, the interfaces, the subnets per interface, and one line per
/// host with its coordinates and its addresses in interface order.
pub fn show(t: &Topology) -> String {
    use std::fmt::Write;
    let mut s = String::new();
    let subnets = t.subnet_count();
    let _ = writeln!(
        s,
        "{t}: {} hosts, {} NICs each, {subnets} line subnets of /{} in 10.10.0.0/16",
        t.hosts(),
        t.nics_per_host(),
        t.subnet_prefix()
    );
    let ifaces: Vec<String> = (0..t.ndims())
        .flat_map(|d| (0..t.links_per_dim()).map(move |l| (d, l)))
        .map(|(d, l)| t.iface_name(d, l))
        .collect();
    let naming = if t.ndims() == 1 {
        "r<link>"
    } else {
        "x<dimension>l<link>"
    };
    let _ = writeln!(s, "interfaces ({naming}): {}", ifaces.join(" "));
    let _ = writeln!(s, "subnets (a line = hosts sharing all other coordinates):");
    for d in 0..t.ndims() {
        for l in 0..t.links_per_dim() {
            let lines = t.lines(d);
            let first = t.line_subnet(d, 0, l);
            let last = t.line_subnet(d, lines - 1, l);
            if let (Some(a), Some(b)) = (first, last) {
                let _ = if lines == 1 {
                    writeln!(s, "  {}: 1 line, {a}", t.iface_name(d, l))
                } else {
                    writeln!(s, "  {}: {lines} lines, {a} .. {b}", t.iface_name(d, l))
                };
            }
        }
    }
    let _ = writeln!(s, "hosts (coordinates: addresses in interface order):");
    for h in 0..t.hosts() {
        let (Ok(c), Ok(a)) = (t.coords(h), t.addresses(h)) else {
            continue;
        };
        let c: Vec<String> = c.iter().map(|x| x.to_string()).collect();
        let a: Vec<String> = a.iter().map(|x| x.ip.to_string()).collect();
        let _ = writeln!(s, "  {h} ({}): {}", c.join(","), a.join(" "));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn show_is_compact() {
        let t = Topology::parse("hxb:2x2x2", 2).unwrap();
        let s = show(&t);
        assert!(
            s.contains("8 hosts, 6 NICs each, 24 line subnets of /27"),
            "{s}"
        );
        assert!(s.contains("interfaces (x<dimension>l<link>): x0l0 x0l1 x1l0 x1l1 x2l0 x2l1"));
        assert!(
            s.contains("  x0l0: 4 lines, 10.10.0.0/27 .. 10.10.0.96/27"),
            "{s}"
        );
        assert!(s.contains("  7 (1,1,1): "));
        assert_eq!(s.lines().count(), 3 + 6 + 1 + 8);
        let flat = show(&Topology::parse("hxb:4", 2).unwrap());
        assert!(flat.contains("  r1: 1 line, 10.10.1.0/24"), "{flat}");
        assert!(flat.contains("  3 (3): 10.10.0.4 10.10.1.4"), "{flat}");
    }
}
