//! Binding the ranks a launcher process starts to CPUs, one each (`HX_BIND`).
//!
//! Unbound, two ranks of a ping-pong on one machine were found stacked on one CPU for tens of
//! messages at a time: a rank that receives is woken on the CPU of the rank that sent (the
//! kernel expects the waker to sleep soon), but the waker spins (HX_SPIN_US), so the woken rank
//! waits for the spin to run out: ~290 us a message against ~9, and 64 MiB one way at 2.8-3.7
//! GB/s against 4.6-7.7 bound (BENCHMARKS.md, "After idle"). Open MPI's mpirun binds two ranks
//! to cores by default for the same reason.

use hx_testbed::proc::allowed_cpus;

/// The CPUs the `here` ranks this process starts go to, rank by rank (empty: not bound), for
/// the value of HX_BIND (`core`, the default: one CPU each when they are no more than the CPUs
/// `allowed`; `none`).
pub(crate) fn plan(
    here: usize,
    setting: Option<&str>,
    allowed: &[usize],
) -> Result<Vec<usize>, String> {
    match setting
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .unwrap_or("core")
    {
        "none" => Ok(Vec::new()),
        // More ranks than CPUs: they share, and yield while spinning (HX_YIELD).
        "core" if here > allowed.len() => Ok(Vec::new()),
        "core" => Ok(allowed[..here].to_vec()),
        v => Err(format!("HX_BIND={v}: expected core or none")),
    }
}

/// The plan for this process's environment; a bad HX_BIND is reported once and binds nothing
/// (`hxcomm run` refuses it before starting: [`check_env`]).
pub(crate) fn from_env(here: usize) -> Vec<usize> {
    plan(
        here,
        std::env::var("HX_BIND").ok().as_deref(),
        &allowed_cpus(),
    )
    .unwrap_or_else(|e| {
        tracing::warn!("{e}; the ranks are not bound");
        Vec::new()
    })
}

/// HX_BIND as `hxcomm run` checks it before starting anything.
pub(crate) fn check_env() -> Result<(), String> {
    plan(0, std::env::var("HX_BIND").ok().as_deref(), &[]).map(|_| ())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranks_get_a_cpu_each_unless_they_outnumber_them_or_are_told_not_to() {
        let cpus = [0, 1, 2, 3];
        assert_eq!(plan(2, None, &cpus).unwrap(), [0, 1]);
        assert_eq!(plan(4, Some("core"), &cpus).unwrap(), [0, 1, 2, 3]);
        assert_eq!(plan(5, None, &cpus).unwrap(), Vec::<usize>::new());
        assert_eq!(plan(2, Some("none"), &cpus).unwrap(), Vec::<usize>::new());
        assert_eq!(
            plan(2, Some(""), &[3, 5]).unwrap(),
            [3, 5],
            "the allowed ones, in order"
        );
        let e = plan(2, Some("socket"), &cpus).unwrap_err();
        assert!(
            e.contains("HX_BIND=socket") && e.contains("core or none"),
            "{e}"
        );
    }

    #[test]
    fn this_process_has_cpus_to_bind_to() {
        assert!(!allowed_cpus().is_empty());
    }
}
