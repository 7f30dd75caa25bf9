//! Runs one `hxcomm run` job and collects its output, through the testbed's child-process runner
//! ([`hx_testbed::proc`]): on a caught signal or past the deadline it stops the launcher
//! (SIGTERM: the launcher stops its ranks and exits; SIGKILL after 10 s).

use std::process::Command;
use std::time::Duration;

use hx_testbed::proc::{self, Job};

/// How long the launcher gets to stop its ranks after SIGTERM.
const STOP_GRACE: Duration = Duration::from_secs(10);

/// Runs `exe args..`; returns stdout when the job exits 0.
pub fn run(exe: &str, args: &[String], deadline: Duration) -> Result<String, String> {
    let mut cmd = Command::new(exe);
    cmd.args(args);
    let done = Job::spawn(cmd).and_then(|job| job.grace(STOP_GRACE).wait(deadline));
    proc::check_interrupted()?;
    let done = done?;
    if !done.ok {
        let tail: Vec<&str> = done.stderr.lines().rev().take(12).collect();
        let tail: Vec<&str> = tail.into_iter().rev().collect();
        return Err(format!(
            "`hxcomm {}` failed ({}):\n{}",
            args.join(" "),
            done.status,
            tail.join("\n")
        ));
    }
    Ok(done.stdout)
}
