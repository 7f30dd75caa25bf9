//! hx-bootstrap: the key-value exchange that ranks use to find each other.
//!
//! Why it is built this way: ranks need a few small facts about each other (rail addresses, ports)
//! before any rail exists, so the launcher runs a tiny TCP key-value service ([`KvServer`]) and hands
//! every rank its address and a per-job secret in the environment ([`from_env`]). Everything a rank
//! does with it goes through the small [`Bootstrap`] trait (put / get / fence), so other launchers
//! plug in without touching the engine: under a PMI-1 launcher (MPICH's Hydra `mpiexec`, Slurm's
//! `srun --mpi=pmi2`) the same trait is served by [`PmiClient`] ([`pmi`] holds its line codec). A
//! program started without a launcher gets [`Singleton`] (rank 0 of 1) and still works.
//! [`join_from_env`] picks one of them and the job secret ([`from_env`]: the bootstrap alone).
//!
//! The service listens on loopback or on the testbed's management network only, and it trusts
//! nobody: every connection must prove it knows the job secret (HMAC over a fresh nonce, compared in
//! constant time), everything read from the network is bounded, and a bad peer loses its own
//! connection without disturbing the job. Those primitives ([`hmac_sha256`], [`ct_eq`],
//! [`fill_random`], [`new_secret`], [`Secret`]) live in `hx-auth`, which the rail handshakes
//! (`hx-transport`) use too; they are re-exported here for the crates that reach them through the
//! bootstrap.

mod client;
pub mod pmi;
mod pmi_client;
mod server;
pub mod wire;

use std::collections::HashMap;
use std::fmt;
use std::io;
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

pub use client::KvClient;
pub use pmi_client::{management_ip, parse_pmi_env, PmiClient, PmiConfig, PmiEndpoint};
pub use server::KvServer;
pub use wire::{decode_request, decode_response, DecodeError, Request, Response};

pub use hx_auth::{ct_eq, fill_random, hmac_sha256, new_secret, Secret};

/// Environment variable with the rank of this process.
pub const ENV_RANK: &str = "HX_RANK";
/// Environment variable with the number of ranks.
pub const ENV_SIZE: &str = "HX_SIZE";
/// Environment variable with the `ip:port` of the bootstrap service.
pub const ENV_BOOTSTRAP: &str = "HX_BOOTSTRAP";
/// Environment variable with the job secret, 64 hex characters.
pub const ENV_SECRET: &str = "HX_JOB_SECRET";
/// Environment variable with the get/fence timeout in seconds (default 60).
pub const ENV_TIMEOUT: &str = "HX_BOOTSTRAP_TIMEOUT";
/// Default get/fence timeout.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(60);

/// Errors of the bootstrap layer. Each names what it was about: the address, the key, the rank.
#[derive(Debug)]
#[non_exhaustive]
pub enum BootstrapError {
    /// An environment variable is missing or malformed.
    Env { var: &'static str, msg: String },
    /// A socket operation failed.
    Io {
        addr: SocketAddr,
        rank: Option<u32>,
        what: &'static str,
        source: io::Error,
    },
    /// The server refused our credentials, or the handshake went wrong.
    Auth {
        addr: SocketAddr,
        rank: u32,
        msg: String,
    },
    /// The peer sent something outside the protocol.
    Protocol {
        addr: SocketAddr,
        rank: u32,
        msg: String,
    },
    /// No rank put `key` within the timeout.
    GetTimeout {
        addr: Option<SocketAddr>,
        rank: u32,
        key: String,
        timeout: Duration,
    },
    /// Not every rank reached the fence within the timeout.
    FenceTimeout {
        addr: SocketAddr,
        rank: u32,
        timeout: Duration,
    },
    /// A key or value is larger than the protocol allows.
    TooLarge {
        what: &'static str,
        key: String,
        len: usize,
        max: usize,
    },
    /// The server answered a request with an error.
    Server {
        addr: SocketAddr,
        rank: u32,
        msg: String,
    },
    /// The PMI server (`server`: `PMI_FD=6`, `PMI_PORT=host:port`) failed, answered out of
    /// protocol, refused a request, or did not know a key.
    Pmi {
        rank: Option<u32>,
        server: String,
        msg: String,
    },
    /// A secret is not 64 hex characters.
    BadSecret(String),
    /// An argument is out of range (rank >= size, a wildcard bind address, ...).
    Invalid(String),
}

impl fmt::Display for BootstrapError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        use BootstrapError::*;
        match self {
            Env { var, msg } => write!(f, "environment variable {var}: {msg}"),
            Io {
                addr,
                rank,
                what,
                source,
            } => {
                write!(f, "bootstrap {what} {addr}")?;
                if let Some(r) = rank {
                    write!(f, " (rank {r})")?;
                }
                write!(f, ": {source}")
            }
            Auth { addr, rank, msg } => {
                write!(f, "bootstrap server {addr} did not accept rank {rank}: {msg}")
            }
            Protocol { addr, rank, msg } => {
                write!(f, "bootstrap server {addr} (rank {rank}): protocol error: {msg}")
            }
            GetTimeout {
                addr,
                rank,
                key,
                timeout,
            } => {
                write!(
                    f,
                    "rank {rank}: no rank put key {key:?} within {:.1} s",
                    timeout.as_secs_f64()
                )?;
                if let Some(a) = addr {
                    write!(f, " (bootstrap server {a})")?;
                }
                write!(f, "; raise {ENV_TIMEOUT} if ranks start slowly")
            }
            FenceTimeout {
                addr,
                rank,
                timeout,
            } => write!(
                f,
                "rank {rank}: not all ranks reached the fence within {:.1} s (bootstrap server {addr})",
                timeout.as_secs_f64()
            ),
            TooLarge {
                what,
                key,
                len,
                max,
            } => write!(
                f,
                "bootstrap {what} of {len} bytes for key {key:?} exceeds the maximum {max}"
            ),
            Server { addr, rank, msg } => {
                write!(f, "bootstrap server {addr} refused a request of rank {rank}: {msg}")
            }
            Pmi { rank, server, msg } => {
                if let Some(r) = rank {
                    write!(f, "rank {r}: ")?;
                }
                write!(f, "PMI server ({server}): {msg}")
            }
            BadSecret(msg) => write!(f, "bad job secret: {msg}"),
            Invalid(msg) => write!(f, "{msg}"),
        }
    }
}

impl std::error::Error for BootstrapError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            BootstrapError::Io { source, .. } => Some(source),
            _ => None,
        }
    }
}

/// What a rank needs from the launcher's key-value service.
pub trait Bootstrap: Send {
    /// This process's rank, `0..size`.
    fn rank(&self) -> u32;
    /// Number of ranks in the job.
    fn size(&self) -> u32;
    /// Stores `value` under `key` (a later put overwrites).
    fn put(&mut self, key: &str, value: &str) -> Result<(), BootstrapError>;
    /// Blocks until some rank has put `key` (or the timeout `HX_BOOTSTRAP_TIMEOUT` seconds,
    /// default 60, passes -> error naming the key).
    fn get(&mut self, key: &str) -> Result<String, BootstrapError>;
    /// Returns when all `size` ranks have called fence the same number of times.
    fn fence(&mut self) -> Result<(), BootstrapError>;
    /// An address on the launcher's management network as this bootstrap knows it (the
    /// interface holding it is left out of the rails); `None`: unknown.
    fn management_ip(&self) -> Option<Ipv4Addr> {
        None
    }
}

/// The bootstrap of a program started without the launcher: rank 0 of 1, with a local map.
#[derive(Debug, Default)]
pub struct Singleton {
    map: HashMap<String, String>,
}

impl Singleton {
    /// An empty singleton bootstrap.
    pub fn new() -> Self {
        Self::default()
    }
}

impl Bootstrap for Singleton {
    fn rank(&self) -> u32 {
        0
    }
    fn size(&self) -> u32 {
        1
    }
    fn put(&mut self, key: &str, value: &str) -> Result<(), BootstrapError> {
        check_key_value(key, Some(value))?;
        self.map.insert(key.to_owned(), value.to_owned());
        Ok(())
    }
    /// No other rank exists to put a missing key later, so a missing key is an error at once.
    fn get(&mut self, key: &str) -> Result<String, BootstrapError> {
        check_key_value(key, None)?;
        self.map
            .get(key)
            .cloned()
            .ok_or_else(|| BootstrapError::GetTimeout {
                addr: None,
                rank: 0,
                key: key.to_owned(),
                timeout: Duration::ZERO,
            })
    }
    fn fence(&mut self) -> Result<(), BootstrapError> {
        Ok(())
    }
}

pub(crate) fn check_key_value(key: &str, value: Option<&str>) -> Result<(), BootstrapError> {
    if key.len() > wire::MAX_KEY {
        return Err(BootstrapError::TooLarge {
            what: "key",
            key: key.chars().take(32).collect::<String>() + "...",
            len: key.len(),
            max: wire::MAX_KEY,
        });
    }
    if let Some(v) = value {
        if v.len() > wire::MAX_VALUE {
            return Err(BootstrapError::TooLarge {
                what: "value",
                key: key.to_owned(),
                len: v.len(),
                max: wire::MAX_VALUE,
            });
        }
    }
    Ok(())
}

/// The bootstrap the environment describes, one of three, in this order:
///
/// 1. `hxcomm run`'s variables: if any of `HX_RANK`, `HX_SIZE`, `HX_BOOTSTRAP` is set, all of them
///    and `HX_JOB_SECRET` must be ([`parse_env`]), and this connects to the launcher's service
///    ([`KvClient`]). They win over PMI's, so `hxcomm run` works even inside an `mpiexec`.
/// 2. A PMI-1 launcher's ([`parse_pmi_env`]): `PMI_FD` (an inherited socket; Hydra's default, and
///    Slurm's `srun --mpi=pmi2`) with `PMI_RANK` and `PMI_SIZE`, or `PMI_PORT=host:port` (Hydra's
///    `-pmi-port`) with `PMI_ID` (or `PMI_RANK` and `PMI_SIZE`): a [`PmiClient`], which finalizes
///    when dropped.
/// 3. Neither: [`Singleton`] (rank 0 of 1). `HX_JOB_SECRET` alone is an error (it is meant for
///    one of the above).
///
/// A variable of the chosen kind that is missing or malformed is an error naming it.
/// `HX_BOOTSTRAP_TIMEOUT` bounds every wait in 1 and 2. [`join_from_env`] also finds the job
/// secret, which under PMI may come through PMI itself.
pub fn from_env() -> Result<Box<dyn Bootstrap>, BootstrapError> {
    Ok(match choose(&env_lookup)? {
        Chosen::Singleton => Box::new(Singleton::new()),
        Chosen::Kv(cfg) => Box::new(kv_connect(&cfg)?),
        Chosen::Pmi(cfg) => Box::new(PmiClient::connect(&cfg)?),
    })
}

/// Which bootstrap the environment asks for (see [`from_env`]).
enum Chosen {
    Singleton,
    Kv(EnvConfig),
    Pmi(PmiConfig),
}

fn choose(get: &dyn Fn(&str) -> Option<String>) -> Result<Chosen, BootstrapError> {
    let launcher = [ENV_RANK, ENV_SIZE, ENV_BOOTSTRAP]
        .iter()
        .any(|v| get(v).is_some());
    if !launcher {
        if let Some(cfg) = parse_pmi_env(get)? {
            return Ok(Chosen::Pmi(cfg));
        }
    }
    Ok(match parse_env(get)? {
        None => Chosen::Singleton,
        Some(cfg) => Chosen::Kv(cfg),
    })
}

fn kv_connect(cfg: &EnvConfig) -> Result<KvClient, BootstrapError> {
    let mut client = KvClient::connect(cfg.addr, cfg.rank, cfg.size, &cfg.secret)?;
    client.set_timeout(cfg.timeout);
    Ok(client)
}

fn env_lookup(name: &str) -> Option<String> {
    std::env::var_os(name).map(|v| v.to_string_lossy().into_owned())
}

/// Where this process stands in its job: its bootstrap and the job secret. See [`join_from_env`].
pub struct Join {
    pub bootstrap: Box<dyn Bootstrap>,
    /// The secret rails and the bootstrap prove knowledge of (all zero in a job of one rank
    /// started without a launcher, as before PMI).
    pub secret: Secret,
    /// Confirms the start-up; see [`Startup::done`].
    pub startup: Startup,
}

impl fmt::Debug for Join {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Join")
            .field("rank", &self.bootstrap.rank())
            .field("size", &self.bootstrap.size())
            .finish_non_exhaustive()
    }
}

/// The end of a job's start-up, for a launcher that must be told how a process leaves.
///
/// Under PMI, a process that leaves without finalize makes Hydra stop the whole job at once,
/// while one that finalized and then fails leaves the others waiting. So until [`Startup::done`]
/// is called, a [`PmiClient`] that is dropped (because joining failed) does not finalize: its
/// socket stays open until the process exits, and the launcher then stops the job. After it, the
/// client finalizes when dropped (the end of the program). Other bootstraps ignore it.
#[derive(Debug)]
pub struct Startup {
    finalize_on_drop: Option<Arc<AtomicBool>>,
}

impl Startup {
    /// The job has started (every address exchanged): from now on leaving is a clean end.
    pub fn done(self) {
        if let Some(f) = self.finalize_on_drop {
            f.store(true, Ordering::SeqCst);
        }
    }
}

/// Joins the job the environment describes ([`from_env`] says which bootstrap): the bootstrap,
/// and the job secret:
///
/// - `hxcomm run`: `HX_JOB_SECRET` (all zero in a job of one rank, which has no peers).
/// - PMI: `HX_JOB_SECRET` if it is set (the same for every rank, e.g. `mpiexec -genv
///   HX_JOB_SECRET ...`); otherwise rank 0 makes a random one and publishes it through PMI (put,
///   fence, get), which only the job's processes reach. Either way all ranks take part in one
///   fence, and a rank whose `HX_JOB_SECRET` differs from rank 0's (or is set on one and not the
///   other) fails naming it.
/// - no launcher: all zero.
///
/// Call [`Startup::done`] once the job's start-up succeeded.
pub fn join_from_env() -> Result<Join, BootstrapError> {
    let get = &env_lookup;
    let startup = Startup {
        finalize_on_drop: None,
    };
    match choose(get)? {
        Chosen::Singleton => Ok(Join {
            bootstrap: Box::new(Singleton::new()),
            secret: [0; 32],
            startup,
        }),
        Chosen::Kv(cfg) => Ok(Join {
            bootstrap: Box::new(kv_connect(&cfg)?),
            secret: if cfg.size > 1 { cfg.secret } else { [0; 32] },
            startup,
        }),
        Chosen::Pmi(cfg) => {
            let mut client = PmiClient::connect(&cfg)?;
            let switch = client.finalize_switch();
            switch.store(false, Ordering::SeqCst);
            let secret = pmi_job_secret(&mut client, get(ENV_SECRET))?;
            Ok(Join {
                bootstrap: Box::new(client),
                secret,
                startup: Startup {
                    finalize_on_drop: Some(switch),
                },
            })
        }
    }
}

/// The PMI key under which rank 0 publishes the job secret (or a check value of the one given).
pub const PMI_SECRET_KEY: &str = "hx.job_secret";

/// A check value of `s` (16 bytes of HMAC, hex): tells whether two ranks were given the same
/// secret without publishing it.
fn secret_check(s: &Secret) -> String {
    secret_to_hex(&hmac_sha256(s, &[b"hxcomm-pmi-secret-check"]))[..32].to_owned()
}

/// The job secret under PMI; see [`join_from_env`].
fn pmi_job_secret(c: &mut PmiClient, given: Option<String>) -> Result<Secret, BootstrapError> {
    let given = given
        .map(|v| {
            secret_from_hex(v.trim()).map_err(|e| BootstrapError::Env {
                var: ENV_SECRET,
                msg: e.to_string(),
            })
        })
        .transpose()?;
    if c.size() == 1 {
        return Ok(given.unwrap_or_else(new_secret));
    }
    let pmi_err = |c: &PmiClient, msg: String| BootstrapError::Pmi {
        rank: Some(c.rank()),
        server: format!("kvs {}", c.kvsname()),
        msg,
    };
    if c.rank() == 0 {
        let (secret, value) = match given {
            Some(s) => (s, format!("given:{}", secret_check(&s))),
            None => {
                if c.over_tcp() {
                    tracing::warn!(
                        "the PMI server listens on a TCP port (PMI_PORT): whoever reaches it while \
                         the job starts can read the job secret published through it; set \
                         {ENV_SECRET} for every rank to publish only a check value"
                    );
                }
                let s = new_secret();
                (s, format!("made:{}", secret_to_hex(&s)))
            }
        };
        c.put(PMI_SECRET_KEY, &value)?;
        c.fence()?;
        return Ok(secret);
    }
    c.fence()?;
    let v = c.get(PMI_SECRET_KEY)?;
    match (v.split_once(':'), given) {
        (Some(("made", hex)), None) => secret_from_hex(hex).map_err(|e| {
            pmi_err(
                c,
                format!("rank 0 published a malformed job secret under {PMI_SECRET_KEY}: {e}"),
            )
        }),
        (Some(("given", check)), Some(s)) => {
            if ct_eq(check.as_bytes(), secret_check(&s).as_bytes()) {
                Ok(s)
            } else {
                Err(BootstrapError::Env {
                    var: ENV_SECRET,
                    msg: format!(
                        "differs between rank 0 and rank {}: give every rank the same one",
                        c.rank()
                    ),
                })
            }
        }
        (Some(("made", _)), Some(_)) => Err(BootstrapError::Env {
            var: ENV_SECRET,
            msg: format!(
                "set for rank {} but not for rank 0: set it for every rank (mpiexec -genv) or for none",
                c.rank()
            ),
        }),
        (Some(("given", _)), None) => Err(BootstrapError::Env {
            var: ENV_SECRET,
            msg: format!(
                "set for rank 0 but not for rank {}: set it for every rank (mpiexec -genv) or for none",
                c.rank()
            ),
        }),
        _ => Err(pmi_err(
            c,
            format!("rank 0 published a malformed value under {PMI_SECRET_KEY}"),
        )),
    }
}

/// A rank's setting `name` from its environment, or from what a launcher that is not hxcomm's
/// says instead: `HX_LOCAL_SIZE` (ranks on this host) falls back to Hydra's `MPI_LOCALNRANKS`.
pub fn launcher_var(name: &str) -> Option<String> {
    launcher_var_with(name, &|k| std::env::var(k).ok())
}

fn launcher_var_with(name: &str, get: &dyn Fn(&str) -> Option<String>) -> Option<String> {
    get(name).filter(|v| !v.is_empty()).or_else(|| match name {
        "HX_LOCAL_SIZE" => get("MPI_LOCALNRANKS"),
        _ => None,
    })
}

/// The launcher's settings as read from the environment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EnvConfig {
    pub rank: u32,
    pub size: u32,
    pub addr: SocketAddr,
    pub secret: Secret,
    pub timeout: Duration,
}

/// Parses the launcher's environment through `get` (testable without touching the process
/// environment). `Ok(None)`: none of the launcher's variables is set.
pub fn parse_env(
    get: impl Fn(&str) -> Option<String>,
) -> Result<Option<EnvConfig>, BootstrapError> {
    const ALL: [&str; 4] = [ENV_RANK, ENV_SIZE, ENV_BOOTSTRAP, ENV_SECRET];
    let vals: Vec<Option<String>> = ALL.iter().map(|n| get(n)).collect();
    if vals.iter().all(Option::is_none) {
        return Ok(None);
    }
    if let Some(i) = vals.iter().position(Option::is_none) {
        let set: Vec<&str> = ALL
            .iter()
            .zip(&vals)
            .filter(|(_, v)| v.is_some())
            .map(|(n, _)| *n)
            .collect();
        return Err(BootstrapError::Env {
            var: ALL[i],
            msg: format!(
                "not set, but {} is; the launcher sets all of {} (start the program with `hxcomm run`, or unset them all to run as a single rank)",
                set.join(", "),
                ALL.join(", ")
            ),
        });
    }
    let val = |i: usize| vals[i].as_deref().unwrap_or("").trim();
    let rank: u32 = val(0).parse().map_err(|_| BootstrapError::Env {
        var: ENV_RANK,
        msg: format!("{:?} is not a non-negative integer", val(0)),
    })?;
    let size: u32 = val(1).parse().map_err(|_| BootstrapError::Env {
        var: ENV_SIZE,
        msg: format!("{:?} is not a non-negative integer", val(1)),
    })?;
    if size == 0 {
        return Err(BootstrapError::Env {
            var: ENV_SIZE,
            msg: "must be at least 1".into(),
        });
    }
    if rank >= size {
        return Err(BootstrapError::Env {
            var: ENV_RANK,
            msg: format!("rank {rank} is not below {ENV_SIZE}={size}"),
        });
    }
    let addr: SocketAddr = val(2).parse().map_err(|_| BootstrapError::Env {
        var: ENV_BOOTSTRAP,
        msg: format!("{:?} is not an ip:port address", val(2)),
    })?;
    let secret = secret_from_hex(val(3)).map_err(|e| BootstrapError::Env {
        var: ENV_SECRET,
        msg: e.to_string(),
    })?;
    let timeout = timeout_from(get(ENV_TIMEOUT))?;
    Ok(Some(EnvConfig {
        rank,
        size,
        addr,
        secret,
        timeout,
    }))
}

/// Parses `HX_BOOTSTRAP_TIMEOUT` (seconds, fractions allowed); default 60 s.
pub(crate) fn timeout_from(v: Option<String>) -> Result<Duration, BootstrapError> {
    match v {
        None => Ok(DEFAULT_TIMEOUT),
        Some(s) => match s.trim().parse::<f64>() {
            Ok(x) if x.is_finite() && x > 0.0 && x < 1e9 => Ok(Duration::from_secs_f64(x)),
            _ => Err(BootstrapError::Env {
                var: ENV_TIMEOUT,
                msg: format!("{s:?} is not a positive number of seconds"),
            }),
        },
    }
}

/// Reads the job secret from `HX_JOB_SECRET`.
pub fn secret_from_env() -> Result<Secret, BootstrapError> {
    let v = std::env::var(ENV_SECRET).map_err(|_| BootstrapError::Env {
        var: ENV_SECRET,
        msg: "not set (or not UTF-8)".into(),
    })?;
    secret_from_hex(v.trim()).map_err(|e| BootstrapError::Env {
        var: ENV_SECRET,
        msg: e.to_string(),
    })
}

/// Lower-case hex of a secret (64 characters).
pub fn secret_to_hex(s: &Secret) -> String {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut out = String::with_capacity(64);
    for b in s {
        out.push(HEX[(b >> 4) as usize] as char);
        out.push(HEX[(b & 15) as usize] as char);
    }
    out
}

/// Parses 64 hex characters (either case) into a secret.
pub fn secret_from_hex(s: &str) -> Result<Secret, BootstrapError> {
    let b = s.as_bytes();
    if b.len() != 64 {
        return Err(BootstrapError::BadSecret(format!(
            "expected 64 hex characters, got {}",
            b.len()
        )));
    }
    fn nib(c: u8) -> Option<u8> {
        match c {
            b'0'..=b'9' => Some(c - b'0'),
            b'a'..=b'f' => Some(c - b'a' + 10),
            b'A'..=b'F' => Some(c - b'A' + 10),
            _ => None,
        }
    }
    let mut out = [0u8; 32];
    for (i, o) in out.iter_mut().enumerate() {
        match (nib(b[2 * i]), nib(b[2 * i + 1])) {
            (Some(h), Some(l)) => *o = h << 4 | l,
            _ => {
                return Err(BootstrapError::BadSecret(format!(
                    "character {} is not a hex digit",
                    if nib(b[2 * i]).is_none() {
                        2 * i
                    } else {
                        2 * i + 1
                    }
                )))
            }
        }
    }
    Ok(out)
}

/// The MAC a client presents for `rank` in answer to `nonce`.
pub(crate) fn auth_mac(secret: &Secret, nonce: &[u8], rank: u32) -> [u8; 32] {
    hmac_sha256(secret, &[wire::AUTH_LABEL, nonce, &rank.to_le_bytes()])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hex_round_trip_and_errors() {
        let s = new_secret();
        let h = secret_to_hex(&s);
        assert_eq!(h.len(), 64);
        assert_eq!(secret_from_hex(&h).unwrap(), s);
        assert_eq!(secret_from_hex(&h.to_uppercase()).unwrap(), s);
        assert!(secret_from_hex("abc").is_err());
        let bad = format!("{}zz", &h[..62]);
        let e = secret_from_hex(&bad).unwrap_err().to_string();
        assert!(e.contains("character 62"), "{e}");
    }

    #[test]
    fn singleton() {
        let mut s = Singleton::new();
        assert_eq!((s.rank(), s.size()), (0, 1));
        s.put("a", "1").unwrap();
        assert_eq!(s.get("a").unwrap(), "1");
        s.fence().unwrap();
        let e = s.get("missing").unwrap_err().to_string();
        assert!(e.contains("\"missing\""), "{e}");
    }

    /// A lookup over fixed pairs, standing in for the environment (pmi_client's tests too).
    pub(crate) fn env_of(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let m: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        move |k| m.get(k).cloned()
    }

    #[test]
    fn parse_env_cases() {
        assert_eq!(parse_env(env_of(&[])).unwrap(), None);
        let hex = secret_to_hex(&[7u8; 32]);
        let full = [
            ("HX_RANK", "2"),
            ("HX_SIZE", "4"),
            ("HX_BOOTSTRAP", "127.0.0.1:5555"),
            ("HX_JOB_SECRET", hex.as_str()),
        ];
        let cfg = parse_env(env_of(&full)).unwrap().unwrap();
        assert_eq!((cfg.rank, cfg.size), (2, 4));
        assert_eq!(cfg.addr, "127.0.0.1:5555".parse().unwrap());
        assert_eq!(cfg.secret, [7u8; 32]);
        assert_eq!(cfg.timeout, DEFAULT_TIMEOUT);

        let e = parse_env(env_of(&full[..2])).unwrap_err().to_string();
        assert!(e.contains("HX_BOOTSTRAP"), "{e}");
        let mut bad = full;
        bad[0].1 = "4";
        let e = parse_env(env_of(&bad)).unwrap_err().to_string();
        assert!(e.contains("HX_RANK"), "{e}");
        let mut bad = full;
        bad[2].1 = "localhost";
        let e = parse_env(env_of(&bad)).unwrap_err().to_string();
        assert!(e.contains("HX_BOOTSTRAP"), "{e}");
        let mut bad = full;
        bad[3].1 = "xyz";
        let e = parse_env(env_of(&bad)).unwrap_err().to_string();
        assert!(e.contains("HX_JOB_SECRET"), "{e}");
        let mut with_t = full.to_vec();
        with_t.push(("HX_BOOTSTRAP_TIMEOUT", "0.5"));
        let cfg = parse_env(env_of(&with_t)).unwrap().unwrap();
        assert_eq!(cfg.timeout, Duration::from_millis(500));
        with_t.pop();
        with_t.push(("HX_BOOTSTRAP_TIMEOUT", "soon"));
        let e = parse_env(env_of(&with_t)).unwrap_err().to_string();
        assert!(e.contains("HX_BOOTSTRAP_TIMEOUT"), "{e}");
    }

    #[test]
    fn choosing_the_bootstrap() {
        let hex = secret_to_hex(&[7u8; 32]);
        let kv = [
            ("HX_RANK", "0"),
            ("HX_SIZE", "2"),
            ("HX_BOOTSTRAP", "127.0.0.1:5555"),
            ("HX_JOB_SECRET", hex.as_str()),
        ];
        let pmi = [("PMI_FD", "6"), ("PMI_RANK", "1"), ("PMI_SIZE", "2")];
        assert!(matches!(choose(&env_of(&[])).unwrap(), Chosen::Singleton));
        assert!(matches!(choose(&env_of(&kv)).unwrap(), Chosen::Kv(_)));
        assert!(matches!(choose(&env_of(&pmi)).unwrap(), Chosen::Pmi(_)));
        // hxcomm run's variables win over PMI's.
        let both: Vec<_> = kv.iter().chain(&pmi).copied().collect();
        assert!(matches!(choose(&env_of(&both)).unwrap(), Chosen::Kv(_)));
        // HX_JOB_SECRET is fine under PMI, an error alone.
        let mut pmi_secret = pmi.to_vec();
        pmi_secret.push(("HX_JOB_SECRET", hex.as_str()));
        assert!(matches!(
            choose(&env_of(&pmi_secret)).unwrap(),
            Chosen::Pmi(_)
        ));
        let e = choose(&env_of(&[("HX_JOB_SECRET", hex.as_str())]))
            .err()
            .unwrap()
            .to_string();
        assert!(e.contains("HX_RANK"), "{e}");
        // Half of hxcomm run's variables is an error even with PMI present.
        let mut half = pmi.to_vec();
        half.push(("HX_RANK", "0"));
        let e = choose(&env_of(&half)).err().unwrap().to_string();
        assert!(e.contains("HX_SIZE"), "{e}");
        // A broken PMI setting names its variable.
        let e = choose(&env_of(&[("PMI_FD", "6"), ("PMI_SIZE", "2")]))
            .err()
            .unwrap()
            .to_string();
        assert!(e.contains("PMI_RANK"), "{e}");
    }

    #[test]
    fn local_size_from_hydra() {
        let get = env_of(&[("MPI_LOCALNRANKS", "4")]);
        assert_eq!(
            launcher_var_with("HX_LOCAL_SIZE", &get).as_deref(),
            Some("4")
        );
        assert_eq!(launcher_var_with("HX_POLICY", &get), None);
        let get = env_of(&[("MPI_LOCALNRANKS", "4"), ("HX_LOCAL_SIZE", "2")]);
        assert_eq!(
            launcher_var_with("HX_LOCAL_SIZE", &get).as_deref(),
            Some("2")
        );
    }

    /// `n` PMI clients of one job over fake servers sharing a store and a barrier; each runs
    /// `pmi_job_secret` with its own `HX_JOB_SECRET`.
    fn secrets_of(given: Vec<Option<String>>) -> Vec<Result<Secret, String>> {
        use crate::pmi_client::fake::{fake_server, hydra_like_on};
        use std::sync::{Barrier, Mutex};
        let n = given.len();
        let kvs = Arc::new(Mutex::new(HashMap::new()));
        let barrier = Arc::new(Barrier::new(n));
        let threads: Vec<_> = given
            .into_iter()
            .enumerate()
            .map(|(rank, g)| {
                let (fd, _server) = fake_server(hydra_like_on(kvs.clone(), Some(barrier.clone())));
                std::thread::spawn(move || {
                    let mut c =
                        PmiClient::over_socket(fd, rank as u32, n as u32, Duration::from_secs(2))
                            .unwrap();
                    pmi_job_secret(&mut c, g).map_err(|e| e.to_string())
                })
            })
            .collect();
        threads.into_iter().map(|t| t.join().unwrap()).collect()
    }

    #[test]
    fn secret_made_by_rank_0() {
        let got = secrets_of(vec![None, None, None]);
        let s0 = got[0].clone().unwrap();
        assert_ne!(s0, [0u8; 32]);
        assert!(got.iter().all(|s| s.as_ref() == Ok(&s0)), "{got:?}");
    }

    #[test]
    fn secret_given_to_all() {
        let hex = secret_to_hex(&[9u8; 32]);
        let got = secrets_of(vec![Some(hex.clone()), Some(hex)]);
        assert_eq!(got, vec![Ok([9u8; 32]), Ok([9u8; 32])]);
    }

    #[test]
    fn secret_given_inconsistently() {
        let a = secret_to_hex(&[1u8; 32]);
        let b = secret_to_hex(&[2u8; 32]);
        let got = secrets_of(vec![Some(a.clone()), Some(b)]);
        let e = got[1].clone().unwrap_err();
        assert!(e.contains("HX_JOB_SECRET") && e.contains("differs"), "{e}");
        let got = secrets_of(vec![Some(a.clone()), None]);
        let e = got[1].clone().unwrap_err();
        assert!(e.contains("set for rank 0 but not for rank 1"), "{e}");
        let got = secrets_of(vec![None, Some(a)]);
        let e = got[1].clone().unwrap_err();
        assert!(e.contains("set for rank 1 but not for rank 0"), "{e}");
        let got = secrets_of(vec![None, Some("xyz".into())]);
        let e = got[1].clone().unwrap_err();
        assert!(e.contains("HX_JOB_SECRET"), "{e}");
    }
}
