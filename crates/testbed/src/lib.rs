//! `hxcomm net`: the emulated cluster (network namespaces, rate-limited rails).
//!
//! A testbed named PREFIX (default `hx`) is H namespaces `PREFIX0..PREFIX(H-1)` joined by R rails
//! (rail i = 10.10.i.0/24, host k = 10.10.i.(k+1) on `r<i>`), each rail interface shaped with tbf,
//! plus an unshaped management network 10.200.N.0/24 (root side 10.200.N.254 on bridge
//! `PREFIX-mgmt`, host k = 10.200.N.(k+1) on `mgmt`). A hyper-crossbar (`hxb:2x2x2` with L links
//! per dimension, [`TestbedSpec::hxb`]) has one switch per line and link instead, NICs
//! `x<d>l<l>`, hx-topology's addresses, and its relay routes and sysctls in every host. See
//! [`net`] for the exact layout. What `up`
//! made is recorded in /run/hxcomm/net-PREFIX.json; `down` removes exactly that. [`proc`] runs the
//! commands of the programs that drive a testbed (`hxcomm demo`, `hxcomm bench compare`): with a
//! timeout, as a process group, stopped on Ctrl-C.

pub mod cacheline;
mod cli;
mod hosts;
pub mod net;
pub mod proc;
pub mod spec;
pub mod state;
mod sys;

pub use cli::{run, NetArgs, NetCommand};
pub use spec::TestbedSpec;
pub use state::TestbedInfo;

use std::net::Ipv4Addr;

/// What went wrong; every message names the object or the command.
#[derive(Debug)]
pub enum TestbedError {
    /// Not running as root.
    NotRoot,
    /// A bad name, count, rate, MTU or delay.
    InvalidSpec(String),
    /// An `ip` or `tc` command failed: the command line and its stderr.
    Command { command: String, message: String },
    /// An object to be made exists and is not ours.
    Conflict(String),
    /// No such testbed, host or interface.
    NotFound(String),
    /// A file (state, lock, /etc/hosts) could not be read or written.
    Io(String),
}

impl std::fmt::Display for TestbedError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            TestbedError::NotRoot => write!(
                f,
                "needs root (network namespaces and tc); run as root or use sudo"
            ),
            TestbedError::InvalidSpec(m) => write!(f, "{m}"),
            TestbedError::Command { command, message } => {
                write!(f, "`{command}` failed: {message}")
            }
            TestbedError::Conflict(m) => write!(f, "{m}"),
            TestbedError::NotFound(m) => write!(f, "not found: {m}"),
            TestbedError::Io(m) => write!(f, "{m}"),
        }
    }
}

impl std::error::Error for TestbedError {}

/// Counters of one rail interface of one host.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RailCounters {
    pub tx_bytes: u64,
    pub rx_bytes: u64,
    pub tx_packets: u64,
    pub rx_packets: u64,
    /// Administratively up.
    pub up: bool,
    /// Carrier present (the other end is up too).
    pub carrier: bool,
}

/// Whether the process runs as root (effective uid 0).
pub fn is_root() -> bool {
    nix::unistd::geteuid().is_root()
}

/// A running testbed; dropping it takes it down (errors ignored), so tests clean up on panic.
#[derive(Debug)]
pub struct Testbed {
    info: TestbedInfo,
    active: bool,
}

impl Testbed {
    /// Brings up a testbed (replacing one of the same name). Needs root.
    pub fn up(spec: &TestbedSpec) -> Result<Testbed, TestbedError> {
        let info = net::up(spec)?;
        Ok(Testbed { info, active: true })
    }

    /// The prefix of every name.
    pub fn name(&self) -> &str {
        self.info.name()
    }

    /// What was made: spec, management subnet, namespaces, links.
    pub fn info(&self) -> &TestbedInfo {
        &self.info
    }

    /// Namespace names of the hosts, `PREFIX0..`.
    pub fn host_names(&self) -> Vec<String> {
        self.info.host_names()
    }

    /// Root side of the management network, 10.200.N.254.
    pub fn mgmt_addr(&self) -> Ipv4Addr {
        self.info.mgmt_addr()
    }

    /// Management address of host `k`, 10.200.N.(k+1).
    pub fn host_mgmt_addr(&self, host: u32) -> Ipv4Addr {
        self.info.host_mgmt_addr(host)
    }

    /// Address of host `host` on rail (NIC) `rail`: 10.10.rail.(host+1) in the flat layout,
    /// hx-topology's plan otherwise.
    pub fn rail_addr(&self, host: u32, rail: u32) -> Ipv4Addr {
        self.info.rail_addr(host, rail)
    }

    /// The topology wired (`hxb:HOSTS` with `rails` links for the flat layout).
    pub fn topology(&self) -> &hx_topology::Topology {
        &self.info.topology
    }

    /// A command that runs `program` inside host `host`'s namespace (`ip netns exec`).
    pub fn command(&self, host: u32, program: &str) -> std::process::Command {
        let mut c = std::process::Command::new("ip");
        c.args(["netns", "exec", &self.info.spec.host_name(host), program]);
        c
    }

    /// Cuts (`up = false`) or restores rail `rail` of host `host`.
    pub fn link(&self, host: u32, rail: u32, up: bool) -> Result<(), TestbedError> {
        net::link(&self.info, host, rail, up)
    }

    /// Byte counters, `[host][rail]`.
    pub fn counters(&self) -> Result<Vec<Vec<RailCounters>>, TestbedError> {
        net::counters(&self.info)
    }

    /// Takes the testbed down and reports errors (dropping does the same, silently).
    pub fn down(mut self) -> Result<(), TestbedError> {
        self.active = false;
        net::down(self.info.name()).map(|_| ())
    }

    /// Leaves the testbed up when this guard is dropped.
    pub fn keep(mut self) -> TestbedInfo {
        self.active = false;
        self.info.clone()
    }
}

impl Drop for Testbed {
    fn drop(&mut self) {
        if self.active {
            let _ = net::down(self.info.name());
        }
    }
}

/// Takes testbed `name` down (nothing to do is not an error).
pub fn down(name: &str) -> Result<(), TestbedError> {
    net::down(name).map(|_| ())
}

/// The recorded testbed `name`, if one is up.
pub fn info(name: &str) -> Result<Option<TestbedInfo>, TestbedError> {
    spec::validate_name(name)?;
    state::load(name)
}

/// Every recorded testbed.
pub fn list() -> Vec<TestbedInfo> {
    state::all()
}

/// Root side of testbed `name`'s management network (10.200.N.254), from its record or, failing
/// that, from the address of its `PREFIX-mgmt` bridge.
pub fn mgmt_addr_of(name: &str) -> Option<Ipv4Addr> {
    if let Ok(Some(info)) = info(name) {
        return Some(info.mgmt_addr());
    }
    let out = sys::ip(&["-j", "-4", "addr", "show", "dev", &state::mgmt_bridge(name)]).ok()?;
    let v: serde_json::Value = serde_json::from_str(&out).ok()?;
    v.get(0)?["addr_info"]
        .as_array()?
        .iter()
        .filter_map(|a| a["local"].as_str()?.parse::<Ipv4Addr>().ok())
        .find(|a| a.octets()[0] == 10 && a.octets()[1] == 200)
}
