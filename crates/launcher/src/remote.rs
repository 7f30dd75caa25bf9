//! The launcher's side of a job on several hosts (`--hosts` / `--hostfile`): one rsh process per
//! host running `hxcomm run-agent` there (see [`crate::agent`] for the protocol), output and
//! exits read back from it, the job stopped on every host at the first failure, a signal or the
//! timeout.
//!
//! Why it is built this way: the rsh processes are supervised like local ranks (own process
//! groups, parent-death signal, the watchdog), so whatever ends the launcher ends them, and with
//! them the ssh sessions; each agent kills its ranks when its session's stdin closes. Nothing
//! about a job but the agent's path is on any command line.

use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::process::CommandExt;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use crate::agent::{self, Header};
use crate::job::{die_with_launcher, Ended, Job, JobEnv, GRACE, HANG_EXIT, TIMEOUT_EXIT};
use crate::output::{Sink, MAX_LINE};
use crate::plan::{Plan, Remote};
use crate::signals::{signal_name, SignalGuard};
use crate::watchdog::Watchdog;

/// Variables of the launcher's environment that are passed on to remote ranks: every `HX_*`
/// setting but those the launcher sets per job, and `RUST_LOG`. (`--env` comes after, and wins.)
fn forwarded_env() -> Vec<(String, String)> {
    const OWN: [&str; 7] = [
        "HX_RANK",
        "HX_SIZE",
        "HX_LOCAL_RANK",
        "HX_LOCAL_SIZE",
        "HX_BOOTSTRAP",
        "HX_JOB_SECRET",
        "HX_JOB_TIMEOUT",
    ];
    std::env::vars()
        .filter(|(k, _)| (k.starts_with("HX_") && !OWN.contains(&k.as_str())) || k == "RUST_LOG")
        .collect()
}

enum Kind {
    Hello,
    Started,
    End(u32, Ended),
    Fail(u32, i32, String),
    Hang(u32, f64),
    Eof,
}

struct Ev {
    host: usize,
    kind: Kind,
}

struct Agent {
    name: String,
    origin: String,
    pid: libc::pid_t,
    _child: Child,
    stdin: Option<ChildStdin>,
    ranks: Vec<u32>,
    hello: bool,
    started: bool,
    exited: Option<(Ended, Instant)>,
    eof: bool,
    /// Its rsh process was killed and reaped (or exited and was reaped).
    reaped: bool,
}

impl Agent {
    fn send(&mut self, line: &str) {
        if let Some(s) = &mut self.stdin {
            if s.write_all(line.as_bytes()).is_err() {
                self.stdin = None;
            }
        }
    }
}

/// Reads an agent's stdout: rank output to the sinks, the rest as events.
fn read_agent_stdout(
    host: usize,
    name: String,
    pipe: impl Read,
    out: Sink,
    err: Sink,
    tag: bool,
    tx: mpsc::Sender<Ev>,
) {
    let mut r = BufReader::new(pipe);
    let mut line = Vec::with_capacity(256);
    let mut hello = false;
    let send = |kind| {
        let _ = tx.send(Ev { host, kind });
    };
    loop {
        line.clear();
        match (&mut r)
            .take(MAX_LINE as u64 + 64)
            .read_until(b'\n', &mut line)
        {
            Ok(0) | Err(_) => break,
            Ok(_) => {}
        }
        if !hello {
            let text = String::from_utf8_lossy(&line);
            if let Some(rest) = text.strip_prefix("hxcomm-agent ") {
                let version = rest.split_whitespace().next().unwrap_or("");
                if version != agent::PROTOCOL.to_string() {
                    write_line(
                        &err,
                        &format!(
                            "hxcomm run: host {name}: its hxcomm speaks agent protocol {version}, this one {}: use the same hxcomm version on every host\n",
                            agent::PROTOCOL
                        ),
                    );
                    break;
                }
                hello = true;
                send(Kind::Hello);
            } else {
                // A login banner or similar, before the agent started.
                write_line(
                    &err,
                    &format!("hxcomm run: host {name}: {}", text.trim_end_matches('\n')),
                );
                write_line(&err, "\n");
            }
            continue;
        }
        // `o RANK LINE` and `e RANK LINE` carry output; the rest are events.
        if line.len() > 2 && (line[0] == b'o' || line[0] == b'e') && line[1] == b' ' {
            let body = &line[2..];
            let Some(sp) = body.iter().position(|&b| b == b' ') else {
                continue;
            };
            let rank = String::from_utf8_lossy(&body[..sp]).into_owned();
            let mut msg = Vec::with_capacity(line.len() + 8);
            if tag {
                msg.extend_from_slice(format!("[{rank}] ").as_bytes());
            }
            msg.extend_from_slice(&body[sp + 1..]);
            if msg.last() != Some(&b'\n') {
                msg.push(b'\n');
            }
            let sink = if line[0] == b'o' { &out } else { &err };
            let mut s = sink.lock().unwrap_or_else(|e| e.into_inner());
            let _ = s.write_all(&msg);
            let _ = s.flush();
            continue;
        }
        let text = String::from_utf8_lossy(&line);
        let w: Vec<&str> = text.split_whitespace().collect();
        let num = |i: usize| w.get(i).and_then(|x| x.parse::<i64>().ok());
        let kind = match (w.first().copied(), num(1), num(3)) {
            (Some("started"), _, _) => Some(Kind::Started),
            (Some("end"), Some(r), Some(c)) if w.get(2) == Some(&"exit") => {
                Some(Kind::End(r as u32, Ended::Exited(c as i32)))
            }
            (Some("end"), Some(r), Some(s)) if w.get(2) == Some(&"signal") => {
                Some(Kind::End(r as u32, Ended::Signaled(s as i32)))
            }
            (Some("fail"), Some(r), _) => {
                let code = num(2).unwrap_or(1) as i32;
                let msg = w.get(3).and_then(|m| agent::unhex(m)).unwrap_or_default();
                Some(Kind::Fail(r as u32, code, msg))
            }
            (Some("hang"), Some(r), _) => Some(Kind::Hang(
                r as u32,
                w.get(2).and_then(|s| s.parse().ok()).unwrap_or(0.0),
            )),
            _ => None,
        };
        match kind {
            Some(k) => send(k),
            None => write_line(
                &err,
                &format!(
                    "hxcomm run: host {name}: unexpected line from the agent: {}\n",
                    text.trim_end()
                ),
            ),
        }
    }
    send(Kind::Eof);
}

fn write_line(sink: &Sink, s: &str) {
    let mut o = sink.lock().unwrap_or_else(|e| e.into_inner());
    let _ = o.write_all(s.as_bytes());
    let _ = o.flush();
}

/// Reads the rsh's (and the agent's) stderr: diagnostics, prefixed with the host.
fn read_agent_stderr(name: String, pipe: impl Read, err: Sink) {
    let mut r = BufReader::new(pipe);
    let mut line = Vec::with_capacity(256);
    loop {
        line.clear();
        match (&mut r).take(MAX_LINE as u64).read_until(b'\n', &mut line) {
            Ok(0) | Err(_) => break,
            Ok(_) => {}
        }
        let text = String::from_utf8_lossy(&line);
        write_line(
            &err,
            &format!("hxcomm run: host {name}: {}\n", text.trim_end_matches('\n')),
        );
    }
}

fn ended_code(e: Ended) -> i32 {
    match e {
        Ended::Exited(0) => 255,
        other => other.code(),
    }
}

fn describe(e: Ended) -> String {
    match e {
        Ended::Exited(c) => format!("exited with status {c}"),
        Ended::Signaled(s) => format!("was killed by signal {}", signal_name(s)),
    }
}

/// Asks every agent to stop its ranks (SIGTERM; `kill` follows after the grace time).
fn stop(agents: &mut [Agent], kill_at: &mut Option<Instant>) {
    if kill_at.is_none() {
        for a in agents.iter_mut() {
            a.send("stop\n");
        }
        *kill_at = Some(Instant::now() + GRACE);
    }
}

/// Starts `remote`'s agents and watches the job to its end; returns the job's exit code.
#[allow(clippy::too_many_arguments)]
pub fn run(
    plan: &Plan,
    remote: &Remote,
    size: u32,
    env: &JobEnv,
    out: Sink,
    err: Sink,
    tag: bool,
    hang_after: Duration,
    signals: &SignalGuard,
) -> i32 {
    let used: Vec<usize> = (0..remote.hosts.len())
        .filter(|&h| remote.slots.iter().any(|s| s.host as usize == h))
        .collect();
    let watchdog = match Watchdog::start(used.len()) {
        Ok(w) => Some(w),
        Err(e) => {
            tracing::warn!(error = %e, "cannot start the launcher watchdog");
            None
        }
    };
    let mut extra_env = forwarded_env();
    extra_env.extend(plan.env.iter().cloned());
    let (tx, rx) = mpsc::channel::<Ev>();
    let mut agents: Vec<Agent> = Vec::new();
    let mut ended: Vec<Option<Ended>> = vec![None; size as usize];
    let mut result: Option<i32> = None;
    let mut kill_at: Option<Instant> = None;
    let mut sent_kill = false;
    let mut hard_at: Option<Instant> = None;
    let remote_cmd = agent::remote_command(&remote.agent);
    let start = Instant::now();

    for &h in &used {
        let spec = &remote.hosts[h];
        let ranks: Vec<(u32, u32, u32)> = remote
            .slots
            .iter()
            .enumerate()
            .filter(|(_, s)| s.host as usize == h)
            .map(|(r, s)| (r as u32, s.local_rank, s.local_size))
            .collect();
        let header = Header {
            host: spec.name.clone(),
            size,
            bootstrap: env.bootstrap.clone(),
            secret_hex: env.secret_hex.clone(),
            cwd: remote.cwd.clone(),
            program: remote.program.clone(),
            args: plan.args.clone(),
            env: extra_env.clone(),
            ranks: ranks.clone(),
            hang_after: hang_after.as_secs_f64(),
        };
        let mut cmd = Command::new(&remote.rsh[0]);
        cmd.args(&remote.rsh[1..]).arg(&spec.name).arg(&remote_cmd);
        cmd.stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0);
        die_with_launcher(&mut cmd);
        if let Some(w) = &watchdog {
            w.register_child(&mut cmd);
        }
        let mut child = match cmd.spawn() {
            Ok(c) => c,
            Err(e) => {
                if let Some(w) = &watchdog {
                    w.spawn_failed();
                }
                eprintln!(
                    "hxcomm run: host {} ({}): cannot run the rsh command {:?}: {e}",
                    spec.name, spec.origin, remote.rsh[0]
                );
                result = Some(if e.kind() == std::io::ErrorKind::NotFound {
                    127
                } else {
                    126
                });
                for (r, _, _) in &ranks {
                    ended[*r as usize] = Some(Ended::Exited(255));
                }
                stop(&mut agents, &mut kill_at);
                break;
            }
        };
        let pid = child.id() as libc::pid_t;
        if let Some(w) = &watchdog {
            w.add(pid);
        }
        let idx = agents.len();
        if let Some(p) = child.stdout.take() {
            let (name, out, err, tx) = (spec.name.clone(), out.clone(), err.clone(), tx.clone());
            let _ = std::thread::Builder::new()
                .name("hx-run-agent-out".into())
                .spawn(move || read_agent_stdout(idx, name, p, out, err, tag, tx));
        }
        if let Some(p) = child.stderr.take() {
            let (name, err) = (spec.name.clone(), err.clone());
            let _ = std::thread::Builder::new()
                .name("hx-run-agent-err".into())
                .spawn(move || read_agent_stderr(name, p, err));
        }
        let stdin = child.stdin.take();
        let mut a = Agent {
            name: spec.name.clone(),
            origin: spec.origin.clone(),
            pid,
            _child: child,
            stdin,
            ranks: ranks.iter().map(|r| r.0).collect(),
            hello: false,
            started: false,
            exited: None,
            eof: false,
            reaped: false,
        };
        a.send(&header.encode());
        agents.push(a);
    }
    drop(tx);
    tracing::debug!(hosts = agents.len(), "agents started");

    loop {
        while let Ok(ev) = rx.try_recv() {
            let name = agents[ev.host].name.clone();
            match ev.kind {
                Kind::Hello => agents[ev.host].hello = true,
                Kind::Started => agents[ev.host].started = true,
                Kind::Eof => agents[ev.host].eof = true,
                Kind::End(r, e) => {
                    if (r as usize) < ended.len() && ended[r as usize].is_none() {
                        ended[r as usize] = Some(e);
                        if kill_at.is_none() && e.failed() {
                            eprintln!("hxcomm run: rank {r} (host {name}) {}", describe(e));
                            result = Some(e.code());
                            stop(&mut agents, &mut kill_at);
                        }
                    }
                }
                Kind::Fail(r, code, msg) => {
                    if let Some(e) = ended.get_mut(r as usize) {
                        e.get_or_insert(Ended::Exited(code));
                    }
                    if kill_at.is_none() {
                        eprintln!("hxcomm run: {msg}");
                        if code == 127 {
                            eprintln!(
                                "hxcomm run: (every host needs the program at the same path, or on its PATH for a bare name)"
                            );
                        }
                        result = Some(code);
                        stop(&mut agents, &mut kill_at);
                    }
                }
                Kind::Hang(r, secs) => {
                    if kill_at.is_none() {
                        eprintln!(
                            "hxcomm run: rank {r} (host {name}) has been stopped for {secs:.0} s (HX_RANK_TIMEOUT); it hangs the job, stopping it"
                        );
                        result = Some(HANG_EXIT);
                        stop(&mut agents, &mut kill_at);
                    }
                }
            }
        }
        // rsh processes that ended.
        for a in agents.iter_mut() {
            if a.reaped {
                continue;
            }
            if let Some(e) = Job::peek(a.pid) {
                Job::finish(&watchdog, a.pid);
                a.reaped = true;
                a.exited = Some((e, Instant::now()));
                a.stdin = None;
            }
        }
        // A host whose connection ended while some of its ranks had not reported their end.
        for i in 0..agents.len() {
            let Some((e, at)) = agents[i].exited else {
                continue;
            };
            if !agents[i].eof && at.elapsed() < Duration::from_secs(1) {
                continue; // its last reports may still be in the pipe
            }
            let open: Vec<u32> = agents[i]
                .ranks
                .iter()
                .copied()
                .filter(|&r| ended[r as usize].is_none())
                .collect();
            if open.is_empty() {
                continue;
            }
            for &r in &open {
                ended[r as usize] = Some(Ended::Exited(255));
            }
            if kill_at.is_none() {
                let a = &agents[i];
                let rsh = remote.rsh.join(" ");
                if !a.hello {
                    let why = match e {
                        Ended::Exited(255) => "the rsh command failed (ssh exits with 255 when it cannot connect or log in)".to_owned(),
                        Ended::Exited(126 | 127) => format!(
                            "no executable {} on that host (give its path there with --remote-hxcomm)",
                            remote.agent
                        ),
                        _ => "the agent did not start".to_owned(),
                    };
                    eprintln!(
                        "hxcomm run: host {} ({}): `{rsh} {} ...` {} before the agent started: {why}; its messages are above",
                        a.name, a.origin, a.name, describe(e)
                    );
                } else if !a.started {
                    eprintln!(
                        "hxcomm run: host {} ({}): the agent {} before starting its ranks; its messages are above",
                        a.name, a.origin, describe(e)
                    );
                } else {
                    let list: Vec<String> = open.iter().map(|r| r.to_string()).collect();
                    eprintln!(
                        "hxcomm run: host {} ({}): lost: the connection (`{rsh}`) {} while rank(s) {} were running",
                        a.name, a.origin, describe(e), list.join(",")
                    );
                }
                result = Some(ended_code(e));
                stop(&mut agents, &mut kill_at);
            }
        }
        if ended.iter().all(Option::is_some) {
            break;
        }
        if kill_at.is_none() {
            let running = ended.iter().filter(|e| e.is_none()).count();
            if let Some(sig) = signals.pending() {
                eprintln!(
                    "hxcomm run: received {}, stopping {running} rank(s) on {} host(s)",
                    signal_name(sig),
                    agents.len()
                );
                result = Some(128 + sig);
                stop(&mut agents, &mut kill_at);
            } else if plan.timeout.is_some_and(|t| start.elapsed() >= t) {
                eprintln!(
                    "hxcomm run: job timed out after {:.1} s, stopping {running} rank(s)",
                    plan.timeout.unwrap_or_default().as_secs_f64()
                );
                result = Some(TIMEOUT_EXIT);
                stop(&mut agents, &mut kill_at);
            }
        }
        if let Some(t) = kill_at {
            let now = Instant::now();
            if !sent_kill && now >= t {
                for a in agents.iter_mut() {
                    a.send("kill\n");
                }
                sent_kill = true;
                hard_at = Some(now + GRACE);
            }
            if hard_at.is_some_and(|h| now >= h) {
                // Agents that do not answer: end their connections; they kill their ranks on
                // end-of-file.
                for a in agents.iter_mut().filter(|a| !a.reaped) {
                    tracing::debug!(host = %a.name, "agent does not answer: closing its connection");
                    a.stdin = None;
                    Job::finish(&watchdog, a.pid);
                    a.reaped = true;
                    a.exited = Some((Ended::Signaled(libc::SIGKILL), Instant::now()));
                }
                for e in ended.iter_mut().filter(|e| e.is_none()) {
                    *e = Some(Ended::Signaled(libc::SIGKILL));
                }
            }
        }
        std::thread::sleep(Duration::from_millis(10));
    }

    // Every rank has ended: let the agents exit (end-of-file on their stdin) and their output
    // drain, for at most the grace time.
    for a in agents.iter_mut() {
        a.stdin = None;
    }
    let deadline = Instant::now() + GRACE;
    loop {
        while let Ok(ev) = rx.try_recv() {
            if let Kind::Eof = ev.kind {
                agents[ev.host].eof = true;
            }
        }
        for a in agents.iter_mut().filter(|a| !a.reaped) {
            if Job::peek(a.pid).is_some() || Instant::now() >= deadline {
                Job::finish(&watchdog, a.pid);
                a.reaped = true;
            }
        }
        if agents.iter().all(|a| a.reaped && a.eof) || Instant::now() >= deadline {
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    for a in agents.iter_mut().filter(|a| !a.reaped) {
        Job::finish(&watchdog, a.pid);
    }
    result.unwrap_or(0)
}
