//! Finds the provider built by this `cargo test` and puts it alone in a directory for
//! FI_PROVIDER_PATH (libfabric loads every `*fi.so` of the directories it is given).

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};

/// `cargo test -p hx-ofi` compiles the library once with both crate types, so the cdylib is in
/// target/<profile>/deps (and, after `cargo build`, also in target/<profile>). The newest wins.
pub fn provider_dir() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let deps = exe.parent().unwrap();
    let profile = deps.parent().unwrap();
    let so = [
        deps.join("libhxcomm_fi.so"),
        profile.join("libhxcomm_fi.so"),
    ]
    .into_iter()
    .filter(|p| p.exists())
    .max_by_key(|p| p.metadata().and_then(|m| m.modified()).ok())
    .expect("libhxcomm_fi.so not built: run `cargo build --release -p hx-ofi`");
    // One directory per call: tests run in parallel, and copying over a library another
    // fi_info is loading would break it.
    static N: AtomicUsize = AtomicUsize::new(0);
    let n = N.fetch_add(1, Ordering::Relaxed);
    let dir = std::env::temp_dir().join(format!(
        "hx-ofi-prov-{}-{}-{n}",
        std::process::id(),
        name_of(&exe)
    ));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::copy(&so, dir.join("libhxcomm_fi.so")).unwrap();
    dir
}

fn name_of(p: &Path) -> String {
    p.file_name().unwrap().to_string_lossy().into_owned()
}

/// Compiles tests/c/NAME.c against the installed libfabric headers into `dir`; returns the
/// program's path.
#[allow(dead_code)] // not every test binary that shares this module compiles C
pub fn compile_c(dir: &Path, name: &str) -> PathBuf {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("tests/c/{name}.c"));
    let exe = dir.join(name);
    let out = std::process::Command::new("cc")
        .args(["-Wall", "-Werror", "-o"])
        .arg(&exe)
        .arg(&src)
        .arg("-lfabric")
        .output()
        .expect("run cc");
    assert!(
        out.status.success(),
        "cc {}: {}",
        src.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    exe
}

/// Runs a compiled C test with the provider of `dir` and job secret `secret` (hex); returns
/// whether it exited 0, and its stdout followed by its stderr.
#[allow(dead_code)] // not every test binary runs a C program this way
pub fn run_c(exe: &Path, dir: &Path, args: &[&str], secret: &str) -> (bool, String) {
    run_c_env(exe, dir, args, secret, &[])
}

/// [`run_c`] with more environment variables.
#[allow(dead_code)] // not every test binary runs a C program this way
pub fn run_c_env(
    exe: &Path,
    dir: &Path,
    args: &[&str],
    secret: &str,
    env: &[(&str, &str)],
) -> (bool, String) {
    let out = std::process::Command::new(exe)
        .args(args)
        .env("FI_PROVIDER_PATH", dir)
        .env("HX_JOB_SECRET", secret)
        .envs(env.iter().copied())
        .output()
        .expect("run the C test");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}
