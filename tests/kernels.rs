//! The application-like kernels, end to end: `hxcomm bench is` and `hxcomm bench cg` as ranks
//! of `hxcomm run` on this host (shared memory, and TCP over two loopback rails), for 4 ranks
//! and for 3 (not a power of two), each reporting its own verification; and bench/mpi_is.c and
//! bench/mpi_cg.c under Open MPI's mpirun when mpicc and mpirun are there (skipped visibly
//! otherwise), checked against the hxcomm versions.

mod util;

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;
use util::{hxcomm, output_text, skip};

const TCP: &[&str] = &["HX_TRANSPORTS=tcp", "HX_LOOPBACK_RAILS=2"];
const IS_ARGS: &[&str] = &["--class", "S", "--iterations", "3", "--json"];
const CG_ARGS: &[&str] = &["--nx", "64", "--ny", "48", "--iterations", "120", "--json"];
/// A few CG iterations: far from converged, so the residual shows any difference in the
/// iterates (only the order of the dot products' sums may differ between rank counts).
const CG_SHORT: &[&str] = &[
    "--nx",
    "64",
    "--ny",
    "48",
    "--iterations",
    "5",
    "--verify-tol",
    "1",
    "--json",
];

/// The one JSON line rank 0 prints, from a job that must have succeeded.
fn json_line(out: &std::process::Output, what: &str) -> Value {
    let text = output_text(out);
    assert!(out.status.success(), "{what}: {text}");
    let lines: Vec<Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| l.starts_with('{'))
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{what}: {e}: {l}")))
        .collect();
    assert_eq!(lines.len(), 1, "{what}: one summary line expected: {text}");
    lines.into_iter().next().unwrap()
}

/// `hxcomm run -n N [--env ..] -- hxcomm bench KERNEL ARGS`: rank 0's summary.
fn hx(n: u32, env: &[&str], kernel: &str, args: &[&str]) -> Value {
    let mut c = Command::new(hxcomm());
    c.args(["run", "-n", &n.to_string()]);
    for e in env {
        c.args(["--env", e]);
    }
    let out = c
        .args(["--", hxcomm(), "bench", kernel])
        .args(args)
        .output()
        .unwrap();
    let v = json_line(&out, &format!("{kernel} on {n} ranks {env:?}"));
    assert_eq!(v["ranks"], n, "{v}");
    assert_eq!(v["impl"], "hxcomm", "{v}");
    v
}

fn verified(v: &Value) {
    assert_eq!(v["verified"], true, "{v}");
    assert!(v["failure"].is_null(), "{v}");
    assert!(v["seconds_per_iteration"].as_f64().unwrap() > 0.0, "{v}");
}

fn f(v: &Value, k: &str) -> f64 {
    v[k].as_f64().unwrap_or_else(|| panic!("no {k} in {v}"))
}

/// Both kernels, verified, over `env`'s transports with 4 and 3 ranks; returns IS and CG summaries.
fn both_kernels(env: &[&str]) -> Vec<(Value, Value)> {
    [4, 3]
        .iter()
        .map(|&n| {
            let is = hx(n, env, "is", IS_ARGS);
            verified(&is);
            assert_eq!(is["keys"], 65536, "{is}");
            let cg = hx(n, env, "cg", CG_ARGS);
            verified(&cg);
            assert!(f(&cg, "residual") < 1e-6, "{cg}");
            assert!(f(&cg, "error") < 1e-5, "{cg}");
            (is, cg)
        })
        .collect()
}

/// What does not depend on the rank count: the keys (same checksums) and the CG iterates.
fn same_results(runs: &[(Value, Value)]) {
    let (is4, _) = &runs[0];
    for (is, _) in runs {
        assert_eq!(is["key_sum"], is4["key_sum"], "{is} vs {is4}");
        assert_eq!(is["hash_sum"], is4["hash_sum"], "{is} vs {is4}");
    }
}

fn close(a: f64, b: f64, rel: f64) -> bool {
    (a - b).abs() <= rel * a.abs().max(b.abs())
}

#[test]
fn kernels_over_shared_memory() {
    let runs = both_kernels(&[]);
    same_results(&runs);
    let short: Vec<f64> = [4, 3, 1]
        .iter()
        .map(|&n| f(&hx(n, &[], "cg", CG_SHORT), "residual"))
        .collect();
    assert!(short[0] > 1e-4, "{short:?}");
    for r in &short {
        assert!(close(*r, short[0], 1e-10), "{short:?}");
    }
}

#[test]
fn kernels_over_tcp_rails() {
    let runs = both_kernels(TCP);
    same_results(&runs);
}

#[test]
fn bad_options_are_clear_errors() {
    for (kernel, args, says) in [
        ("is", &["--class", "Q"][..], "--class Q"),
        ("is", &["--max-key", "1000"][..], "power of two"),
        ("cg", &["--ny", "2"][..], "at least one grid row per rank"),
        ("cg", &["--shift", "0"][..], "--shift"),
    ] {
        let out = Command::new(hxcomm())
            .args(["run", "-n", "3", "--", hxcomm(), "bench", kernel])
            .args(args)
            .output()
            .unwrap();
        let text = output_text(&out);
        assert!(!out.status.success(), "{kernel} {args:?}: {text}");
        assert!(text.contains(says), "{kernel} {args:?}: {text}");
        assert!(!text.contains("panicked"), "{kernel} {args:?}: {text}");
    }
}

struct TempDir(PathBuf);

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn mpicc(src: &str, out: &Path) {
    let root = env!("CARGO_MANIFEST_DIR");
    let o = Command::new("mpicc")
        .args(["-O2", "-Wall", "-o"])
        .arg(out)
        .arg(format!("{root}/bench/{src}"))
        .arg("-lm")
        .output()
        .unwrap();
    assert!(o.status.success(), "mpicc {src}: {}", output_text(&o));
}

fn mpirun(n: u32, prog: &Path, args: &[&str]) -> Value {
    mpirun_with(n, &[], prog, args)
}

/// `mpirun` on this host with Open MPI's own shared memory and TCP, plus `extra` arguments.
fn mpirun_with(n: u32, extra: &[&str], prog: &Path, args: &[&str]) -> Value {
    let mut c = Command::new("mpirun");
    c.args(["--oversubscribe", "--bind-to", "none", "-n", &n.to_string()]);
    if util::skip::is_root() {
        c.arg("--allow-run-as-root");
    }
    let out = c
        .env("OMPI_MCA_btl", "self,vader,tcp")
        .env("OMPI_MCA_btl_tcp_if_include", "lo")
        .env("OMPI_MCA_oob_tcp_if_include", "lo")
        .args(extra)
        .arg(prog)
        .args(args)
        .output()
        .unwrap();
    let v = json_line(&out, &format!("mpirun -n {n} {}", prog.display()));
    assert_eq!(v["impl"], "mpi", "{v}");
    assert_eq!(v["ranks"], n, "{v}");
    v
}

/// A fresh directory with both MPI programs built, or None (skipped) without mpicc/mpirun.
fn mpi_programs(name: &str) -> Option<(TempDir, PathBuf, PathBuf)> {
    if !skip::need_tool("mpicc", &["--version"], "libopenmpi-dev")
        || !skip::need_tool("mpirun", &["--version"], "openmpi-bin")
    {
        return None;
    }
    let dir =
        TempDir(std::env::temp_dir().join(format!("hxcomm-kernels-{name}-{}", std::process::id())));
    std::fs::create_dir_all(&dir.0).unwrap();
    let (is, cg) = (dir.0.join("mpi_is"), dir.0.join("mpi_cg"));
    mpicc("mpi_is.c", &is);
    mpicc("mpi_cg.c", &cg);
    Some((dir, is, cg))
}

/// bench/mpi_is.c and bench/mpi_cg.c under Open MPI (shared memory and TCP on this host): they
/// verify, and they compute what the hxcomm versions compute (same keys, same CG iterates).
#[test]
fn mpi_versions_agree_with_hxcomm() {
    let Some((_dir, is, cg)) = mpi_programs("ompi") else {
        return;
    };
    for n in [4, 3] {
        let m = mpirun(n, &is, IS_ARGS);
        verified(&m);
        let h = hx(n, &[], "is", IS_ARGS);
        for k in ["keys", "max_key", "buckets", "key_sum", "hash_sum"] {
            assert_eq!(m[k], h[k], "{k}: {m} vs {h}");
        }
        let m = mpirun(n, &cg, CG_ARGS);
        verified(&m);
        assert!(f(&m, "error") < 1e-5, "{m}");
        let m = mpirun(n, &cg, CG_SHORT);
        let h = hx(n, &[], "cg", CG_SHORT);
        for k in ["rows", "nonzeros", "iterations"] {
            assert_eq!(m[k], h[k], "{k}: {m} vs {h}");
        }
        for k in ["residual", "error"] {
            assert!(close(f(&m, k), f(&h, k), 1e-10), "{k}: {m} vs {h}");
        }
    }
    // Bad options are errors there too.
    let o = Command::new("mpirun")
        .args(["--oversubscribe", "-n", "2"])
        .args(if util::skip::is_root() {
            &["--allow-run-as-root"][..]
        } else {
            &[][..]
        })
        .env("OMPI_MCA_btl", "self,vader,tcp")
        .arg(&cg)
        .args(["--ny", "1"])
        .output()
        .unwrap();
    assert!(!o.status.success(), "{}", output_text(&o));
    assert!(
        output_text(&o).contains("at least one grid row per rank"),
        "{}",
        output_text(&o)
    );
}

/// The provider cargo built (libfabric loads every `*fi.so` of FI_PROVIDER_PATH, so it goes alone
/// into `dir`): the newer of target/release/deps and target/release.
fn provider_in(dir: &Path) -> bool {
    let exe = std::env::current_exe().unwrap();
    let deps = exe.parent().unwrap();
    let so = [deps.to_path_buf(), deps.parent().unwrap().to_path_buf()]
        .into_iter()
        .map(|d| d.join("libhxcomm_fi.so"))
        .filter(|p| p.exists())
        .max_by_key(|p| p.metadata().and_then(|m| m.modified()).ok());
    match so {
        Some(so) => {
            std::fs::copy(so, dir.join("libhxcomm_fi.so")).unwrap();
            true
        }
        None => skip::need(
            false,
            "no libhxcomm_fi.so (cargo build --release --workspace)",
        ),
    }
}

/// The MPI programs under Open MPI over the hxcomm libfabric provider (shared memory, and TCP
/// over two loopback rails), for 4 and 3 ranks: verified, and the same keys and CG iterates.
#[test]
fn mpi_versions_over_the_hxcomm_provider() {
    let Some((dir, is, cg)) = mpi_programs("fi") else {
        return;
    };
    let prov = dir.0.join("provider");
    std::fs::create_dir_all(&prov).unwrap();
    if !provider_in(&prov) {
        return;
    }
    let prov = prov.to_string_lossy().into_owned();
    let fi_path = format!("FI_PROVIDER_PATH={prov}");
    for (n, env) in [(4, &[][..]), (3, TCP)] {
        let mut extra = vec![
            "--mca",
            "pml",
            "cm",
            "--mca",
            "mtl",
            "ofi",
            "--mca",
            "mtl_ofi_provider_include",
            "hxcomm",
            "-x",
            &fi_path,
        ];
        for e in env {
            extra.extend(["-x", e]);
        }
        let m = mpirun_with(n, &extra, &is, IS_ARGS);
        verified(&m);
        let h = hx(n, env, "is", IS_ARGS);
        for k in ["keys", "key_sum", "hash_sum"] {
            assert_eq!(m[k], h[k], "{k}: {m} vs {h}");
        }
        let m = mpirun_with(n, &extra, &cg, CG_SHORT);
        let h = hx(n, env, "cg", CG_SHORT);
        assert!(
            close(f(&m, "residual"), f(&h, "residual"), 1e-10),
            "{m} vs {h}"
        );
        verified(&mpirun_with(n, &extra, &cg, CG_ARGS));
    }
}
