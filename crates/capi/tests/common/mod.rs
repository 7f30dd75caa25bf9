//! Shared by the C tests: cargo does not hand an integration test the package's cdylib or
//! another package's binary, so the tests run `cargo build` themselves, with the profile and
//! target directory they were built with.

use std::path::{Path, PathBuf};
use std::process::Command;

pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// target/<profile>, from the test executable's path (target/<profile>/deps/<test>-*).
pub fn profile_dir() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    exe.parent().and_then(Path::parent).unwrap().to_path_buf()
}

pub fn cargo_build(args: &[&str]) {
    let dir = profile_dir();
    let profile = dir.file_name().unwrap().to_str().unwrap().to_string();
    let mut cmd = Command::new(env!("CARGO"));
    cmd.current_dir(workspace_root())
        .arg("build")
        .args(args)
        .arg("--target-dir")
        .arg(dir.parent().unwrap());
    match profile.as_str() {
        "debug" => {}
        "release" => {
            cmd.arg("--release");
        }
        p => {
            cmd.args(["--profile", p]);
        }
    }
    let st = cmd.status().expect("running cargo");
    assert!(st.success(), "cargo build {args:?} failed");
}

/// Compiles the C file `src` against include/hxcomm.h and target/<profile>/libhxcomm.so (found
/// at run time through an rpath) with `-std=c99 -pedantic` and warnings as errors, plus `extra`
/// arguments; returns `exe`.
pub fn cc(src: &Path, exe: &Path, extra: &[&std::ffi::OsStr]) -> PathBuf {
    let lib_dir = profile_dir();
    let out = Command::new("cc")
        .args([
            "-std=c99",
            "-Wall",
            "-Wextra",
            "-Werror",
            "-pedantic",
            "-O2",
        ])
        .args(extra)
        .arg("-I")
        .arg(workspace_root().join("include"))
        .arg(src)
        .arg("-L")
        .arg(&lib_dir)
        .arg("-lhxcomm")
        .arg(format!("-Wl,-rpath,{}", lib_dir.display()))
        .arg("-o")
        .arg(exe)
        .output()
        .expect("running cc");
    assert!(
        out.status.success(),
        "cc {} failed:\n{}",
        src.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    exe.to_path_buf()
}
