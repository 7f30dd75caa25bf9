//! The engine's HX_* settings, also reachable as libfabric parameters FI_HXCOMM_* (so `fi_info -e`
//! documents them and MPI users can set them the libfabric way).

/// (parameter name as given to fi_param_define, meaning). The libfabric variable is
/// `FI_HXCOMM_<NAME>`, the engine's is `HX_<NAME>`.
pub const SETTINGS: &[(&str, &str)] = &[
    ("policy", "which rails carry which bytes: bind, rr, stripe, adaptive (default adaptive)"),
    ("rails", "use only these interfaces, by name, e.g. r0,r2 (default all)"),
    ("transports", "shm,tcp (default): same-host ranks use shared memory; tcp forces the network path"),
    ("direct", "1 (default): same-host rendezvous messages are copied once into the receiver (process_vm_writev); 0: through the ring"),
    ("loopback_rails", "with HX_TRANSPORTS=tcp: TCP connections per peer between ranks of one host (default 1)"),
    ("spin_us", "microseconds a waiting call polls before it sleeps (default 200)"),
    ("bulk_wait_us", "microseconds a CQ read that finds nothing waits in epoll while bulk data is in flight over sockets, instead of returning at once (default 1000; 0: never; a reply ends the wait at once)"),
    ("yield", "yield the CPU while spinning, 1 or 0 (default: when the host runs more ranks than cores)"),
    ("eager_limit", "messages up to this size are sent at once, larger ones by rendezvous (default 32k; same on all ranks)"),
    ("chunk", "largest data frame of a striped message (default 256k)"),
    ("min_chunk", "smallest data frame of a striped message (default 16k)"),
    ("notsent_lowat", "unsent bytes a rail socket may hold, TCP_NOTSENT_LOWAT (default 128k)"),
    ("eager_credits", "eager bytes a sender may have outstanding at one receiver (default 4m)"),
    ("rail_timeout", "milliseconds without progress after which a rail counts as broken (default 1000)"),
    ("rank_timeout", "seconds a peer may stay unreachable before operations involving it fail (default 30)"),
    ("connect_timeout", "seconds for all rails to come up (default 30)"),
    ("job_secret", "per-job secret the rails prove knowledge of (HMAC challenge-response); set by the launcher"),
];

pub fn fi_var(name: &str) -> String {
    format!("FI_HXCOMM_{}", name.to_ascii_uppercase())
}

pub fn hx_var(name: &str) -> String {
    format!("HX_{}", name.to_ascii_uppercase())
}

/// The help text given to fi_param_define.
pub fn help(name: &str, meaning: &str) -> String {
    format!("Another name for {}: {}", hx_var(name), meaning)
}

/// Effective HX_* values from an environment lookup: FI_HXCOMM_X counts as HX_X; both set to
/// different values is an error naming both.
pub fn resolve_settings(
    get: impl Fn(&str) -> Option<String>,
) -> Result<Vec<(String, String)>, String> {
    let mut out = Vec::new();
    for (name, _) in SETTINGS {
        let (fi, hx) = (fi_var(name), hx_var(name));
        match (get(&fi), get(&hx)) {
            (Some(a), Some(b)) if a != b => {
                return Err(format!(
                    "{fi}={a:?} and {hx}={b:?} disagree; set only one of them"
                ))
            }
            (Some(v), _) | (None, Some(v)) => out.push((hx, v)),
            (None, None) => {}
        }
    }
    Ok(out)
}

/// The effective HX_* settings of this process. Reads the environment with getenv (std::env)
/// rather than fi_param_get_str: libfabric's fi_param_get reads the same FI_HXCOMM_* variable,
/// and getenv also works before the provider is registered (unit tests, fi_getinfo).
pub fn settings_env() -> Result<Vec<(String, String)>, String> {
    resolve_settings(|k| std::env::var(k).ok())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn env(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let m: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        move |k| m.get(k).cloned()
    }

    #[test]
    fn alias_only_becomes_hx() {
        let r = resolve_settings(env(&[
            ("FI_HXCOMM_POLICY", "rr"),
            ("FI_HXCOMM_SPIN_US", "5"),
        ]))
        .unwrap();
        assert_eq!(
            r,
            vec![
                ("HX_POLICY".into(), "rr".into()),
                ("HX_SPIN_US".into(), "5".into())
            ]
        );
    }

    #[test]
    fn hx_only_and_agreeing_pairs_pass() {
        let r = resolve_settings(env(&[
            ("HX_RAILS", "r0"),
            ("FI_HXCOMM_CHUNK", "1m"),
            ("HX_CHUNK", "1m"),
        ]))
        .unwrap();
        assert_eq!(
            r,
            vec![
                ("HX_RAILS".into(), "r0".into()),
                ("HX_CHUNK".into(), "1m".into())
            ]
        );
        assert!(resolve_settings(env(&[])).unwrap().is_empty());
    }

    #[test]
    fn disagreement_names_both() {
        let e = resolve_settings(env(&[("FI_HXCOMM_POLICY", "rr"), ("HX_POLICY", "bind")]))
            .unwrap_err();
        assert!(
            e.contains("FI_HXCOMM_POLICY") && e.contains("HX_POLICY"),
            "{e}"
        );
        assert!(e.contains("rr") && e.contains("bind"), "{e}");
    }

    #[test]
    fn every_setting_has_both_names() {
        assert_eq!(SETTINGS.len(), 17);
        assert_eq!(fi_var("job_secret"), "FI_HXCOMM_JOB_SECRET");
        assert!(help("policy", "x").starts_with("Another name for HX_POLICY"));
    }
}
