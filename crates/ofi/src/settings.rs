//! The engine's HX_* settings, also reachable as libfabric parameters FI_HXCOMM_* (so `fi_info -e`
//! documents them and MPI users can set them the libfabric way).

/// Engine settings that mean nothing under the provider (the launcher's own).
const LAUNCHER_ONLY: &[&str] = &["BOOTSTRAP_TIMEOUT", "JOB_TIMEOUT", "LOG"];

/// Defaults the provider gives the engine where the engine's own differ: (name, value).
///
/// BULK_WAIT_US: a CQ read that finds nothing to do while bulk data is in flight waits this long
/// in epoll (any socket event ends the wait). Open MPI reads the CQ in a loop while it waits, and
/// with 1 ms most waits on a wire-limited rail ended by the timeout (a sender's socket has room
/// again every ~1 MiB, a receiver's payload wakes it per chunk: 9-35 ms at 1 Gbit/s), each
/// followed by 7 polling rounds: 4 MiB one way over one 1 Gbit/s rail cost 1.4-1.5x iperf3's
/// CPU per GB against the native API's 0.9x. 5 ms: 1.07x (10 ms 1.03x, 20 ms 1.04x; BENCHMARKS.md
/// "MPI over hxcomm"); a caller that computes between reads may wait that long for an idle
/// read, and with FI_THREAD_SAFE another thread's call for the domain.
pub const PROVIDER_DEFAULTS: &[(&str, &str)] = &[("BULK_WAIT_US", "5000")];

/// The provider's default for engine setting `name` (without the HX_ prefix), if it has its own.
pub fn provider_default(name: &str) -> Option<&'static str> {
    PROVIDER_DEFAULTS
        .iter()
        .find(|(n, _)| n.eq_ignore_ascii_case(name))
        .map(|(_, v)| *v)
}

/// (parameter name as given to fi_param_define, meaning with its default): the engine's list
/// (hx_engine::info::SETTINGS, which `hxcomm info` prints) and the job secret. The libfabric
/// variable is `FI_HXCOMM_<NAME>`, the engine's is `HX_<NAME>`.
pub fn settings() -> Vec<(String, String)> {
    let mut v: Vec<(String, String)> = hx_engine::info::SETTINGS
        .iter()
        .filter(|(name, _, _)| !LAUNCHER_ONLY.contains(name))
        .map(|(name, default, meaning)| {
            let default = provider_default(name).unwrap_or(default);
            (
                name.to_ascii_lowercase(),
                format!("{meaning} (default {default})"),
            )
        })
        .collect();
    v.push((
        "job_secret".into(),
        "per-job secret the rails prove knowledge of (HMAC challenge-response); set by the launcher"
            .into(),
    ));
    v
}

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
    for (name, _) in settings() {
        let (fi, hx) = (fi_var(&name), hx_var(&name));
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
        let all = settings();
        assert_eq!(all.len(), 27);
        assert!(all
            .iter()
            .any(|(n, m)| n == "sndbuf" && m.ends_with("(default 768k)")));
        assert!(all
            .iter()
            .any(|(n, m)| n == "tcp_congestion_latency" && m.ends_with("(default same)")));
        assert!(all.iter().any(|(n, _)| n == "topology"));
        assert!(all
            .iter()
            .any(|(n, m)| n == "tcp_congestion" && m.ends_with("(default reno)")));
        assert!(all.iter().any(|(n, _)| n == "links_per_dim"));
        assert!(all
            .iter()
            .any(|(n, m)| n == "bulk_wait_us" && m.ends_with("(default 5000)")));
        assert_eq!(provider_default("bulk_wait_us"), Some("5000"));
        assert_eq!(provider_default("POLICY"), None);
        assert_eq!(fi_var("job_secret"), "FI_HXCOMM_JOB_SECRET");
        assert!(help("policy", "x").starts_with("Another name for HX_POLICY"));
    }
}
