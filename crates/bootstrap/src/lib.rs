//! hx-bootstrap: the key-value exchange that ranks use to find each other.
//!
//! Why it is built this way: ranks need a few small facts about each other (rail addresses, ports)
//! before any rail exists, so the launcher runs a tiny TCP key-value service ([`KvServer`]) and hands
//! every rank its address and a per-job secret in the environment ([`from_env`]). Everything a rank
//! does with it goes through the small [`Bootstrap`] trait (put / get / fence), so that PMI (Hydra,
//! Slurm) or an ssh-based launcher can be added later without touching the engine. A program started
//! without the launcher gets [`Singleton`] (rank 0 of 1) and still works.
//!
//! The service listens on loopback or on the testbed's management network only, and it trusts
//! nobody: every connection must prove it knows the job secret (HMAC over a fresh nonce, compared in
//! constant time), everything read from the network is bounded, and a bad peer loses its own
//! connection without disturbing the job. The same [`hmac_sha256`] and [`ct_eq`] are reused by the
//! engine for rail handshakes.

mod client;
mod server;
pub mod wire;

use std::collections::HashMap;
use std::fmt;
use std::io;
use std::net::SocketAddr;
use std::time::Duration;

pub use client::KvClient;
pub use server::KvServer;
pub use wire::{decode_request, decode_response, DecodeError, Request, Response};

/// The per-job secret shared by the launcher and all ranks.
pub type Secret = [u8; 32];

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

/// Reads `HX_RANK`, `HX_SIZE`, `HX_BOOTSTRAP` (ip:port) and `HX_JOB_SECRET` (64 hex characters) and
/// connects to the launcher's service. If none of them is set, returns [`Singleton`]. If some but not
/// all are set, or one is malformed, the error names the variable.
pub fn from_env() -> Result<Box<dyn Bootstrap>, BootstrapError> {
    let get = |name: &str| std::env::var_os(name).map(|v| v.to_string_lossy().into_owned());
    match parse_env(get)? {
        None => Ok(Box::new(Singleton::new())),
        Some(cfg) => {
            let mut client = KvClient::connect(cfg.addr, cfg.rank, cfg.size, &cfg.secret)?;
            client.set_timeout(cfg.timeout);
            Ok(Box::new(client))
        }
    }
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

/// Fills `buf` from the kernel's random source (getrandom, falling back to /dev/urandom).
pub fn fill_random(buf: &mut [u8]) -> io::Result<()> {
    let mut done = 0;
    while done < buf.len() {
        let rest = &mut buf[done..];
        // SAFETY: the pointer and length describe the writable slice `rest`.
        let n = unsafe { libc::getrandom(rest.as_mut_ptr().cast(), rest.len(), 0) };
        if n > 0 {
            done += n as usize;
            continue;
        }
        let err = io::Error::last_os_error();
        match err.raw_os_error() {
            Some(libc::EINTR) => continue,
            Some(libc::ENOSYS) | Some(libc::EPERM) => {
                use std::io::Read;
                return std::fs::File::open("/dev/urandom")?.read_exact(rest);
            }
            _ => return Err(err),
        }
    }
    Ok(())
}

/// A fresh random job secret.
///
/// # Panics
/// If the kernel has no random source at all (no getrandom and no /dev/urandom): running a job
/// with a predictable secret would be worse.
pub fn new_secret() -> Secret {
    let mut s = [0u8; 32];
    if let Err(e) = fill_random(&mut s) {
        panic!("hx-bootstrap: cannot read random bytes for the job secret: {e}");
    }
    s
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

/// HMAC-SHA256 of the concatenation of `parts` under `key`.
pub fn hmac_sha256(key: &[u8], parts: &[&[u8]]) -> [u8; 32] {
    use hmac::{Hmac, Mac};
    // HMAC accepts keys of any length, so this never fails.
    let mut mac =
        <Hmac<sha2::Sha256> as Mac>::new_from_slice(key).expect("HMAC accepts keys of any length");
    for p in parts {
        mac.update(p);
    }
    mac.finalize().into_bytes().into()
}

/// Compares two byte strings in time that depends only on their lengths.
pub fn ct_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    let mut diff = 0u8;
    for (x, y) in a.iter().zip(b) {
        diff |= x ^ y;
    }
    std::hint::black_box(diff) == 0
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
        assert_ne!(s, [0u8; 32]);
        assert_ne!(s, new_secret());
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
    fn hmac_known_answer() {
        // RFC 4231 test case 2.
        let mac = hmac_sha256(b"Jefe", &[b"what do ya want ", b"for nothing?"]);
        assert_eq!(
            secret_to_hex(&mac),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
        );
    }

    #[test]
    fn ct_eq_works() {
        assert!(ct_eq(b"abc", b"abc"));
        assert!(!ct_eq(b"abc", b"abd"));
        assert!(!ct_eq(b"abc", b"ab"));
        assert!(ct_eq(b"", b""));
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

    fn env_of(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
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
}
