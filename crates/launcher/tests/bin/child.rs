//! The rank and launcher programs of tests/run.rs, as a binary of their own
//! (`hx-launcher-test-child`, declared in Cargo.toml; the tests find it through
//! `CARGO_BIN_EXE_hx-launcher-test-child`). They were `#[test]` functions, no-ops unless the test
//! executable re-ran itself with one of these variables set, and so counted as passed tests
//! (issue 11). The role is chosen by the same variables:
//!
//! - `HX_LAUNCHER_PROBE` (given to the ranks with `--env`): a rank that puts its address into the
//!   bootstrap service, fences, reads every rank's back and checks it, fences again, and prints
//!   `probe ok rank R of N local L`;
//! - `HX_LAUNCHER_SIGNAL_DIR=DIR`: a launcher of 2 ranks, each running `sleep 30` in the
//!   background and writing "$$ $!" to DIR/pid.RANK; exits with the launcher's status.

fn main() {
    if std::env::var_os("HX_LAUNCHER_PROBE").is_some() {
        kv_probe_rank();
    } else if let Some(dir) = std::env::var_os("HX_LAUNCHER_SIGNAL_DIR") {
        let script = format!(
            r#"sleep 30 & echo "$$ $!" > {}/pid.$HX_RANK; wait"#,
            std::path::PathBuf::from(dir).display()
        );
        std::process::exit(hx_launcher::run(hx_launcher::RunArgs::new(
            2,
            ["sh", "-c", &script],
        )));
    } else {
        eprintln!("hx-launcher-test-child: set HX_LAUNCHER_PROBE or HX_LAUNCHER_SIGNAL_DIR");
        std::process::exit(2);
    }
}

fn kv_probe_rank() {
    let mut b = hx_bootstrap::from_env().expect("bootstrap from env");
    let (r, n) = (b.rank(), b.size());
    b.put(&format!("addr.{r}"), &format!("hello from {r}"))
        .unwrap();
    b.fence().unwrap();
    for p in 0..n {
        assert_eq!(
            b.get(&format!("addr.{p}")).unwrap(),
            format!("hello from {p}")
        );
    }
    b.fence().unwrap();
    println!(
        "probe ok rank {r} of {n} local {}",
        std::env::var("HX_LOCAL_RANK").unwrap_or_default()
    );
}
