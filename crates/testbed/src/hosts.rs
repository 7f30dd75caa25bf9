//! The testbed's block in /etc/hosts, so MPI launchers can resolve `hx0`, `hx1`, ...

use crate::TestbedError;
use std::net::Ipv4Addr;

pub const HOSTS_FILE: &str = "/etc/hosts";

fn begin_marker(name: &str) -> String {
    format!("# hxcomm testbed {name} begin")
}

fn end_marker(name: &str) -> String {
    format!("# hxcomm testbed {name} end")
}

/// Returns `content` without the block of testbed `name`, plus a new block with `entries` if given.
/// Lines outside the block are kept as they are.
pub fn edit(content: &str, name: &str, entries: Option<&[(Ipv4Addr, String)]>) -> String {
    let begin = begin_marker(name);
    let end = end_marker(name);
    let mut out = String::with_capacity(content.len() + 256);
    let mut inside = false;
    for line in content.lines() {
        let t = line.trim();
        if !inside && t == begin {
            inside = true;
            continue;
        }
        if inside {
            if t == end {
                inside = false;
            }
            continue;
        }
        out.push_str(line);
        out.push('\n');
    }
    if let Some(entries) = entries {
        out.push_str(&begin);
        out.push('\n');
        for (ip, host) in entries {
            out.push_str(&format!("{ip} {host}\n"));
        }
        out.push_str(&end);
        out.push('\n');
    }
    out
}

/// Whether `content` holds the block of testbed `name`.
pub fn has_block(content: &str, name: &str) -> bool {
    let begin = begin_marker(name);
    content.lines().any(|l| l.trim() == begin)
}

/// Rewrites /etc/hosts in place (it is often a bind mount, so no rename); only if it changes.
pub fn update(name: &str, entries: Option<&[(Ipv4Addr, String)]>) -> Result<(), TestbedError> {
    let io = |e: std::io::Error| TestbedError::Io(format!("{HOSTS_FILE}: {e}"));
    let content = std::fs::read_to_string(HOSTS_FILE).map_err(io)?;
    if entries.is_none() && !has_block(&content, name) {
        return Ok(());
    }
    let new = edit(&content, name, entries);
    if new != content {
        std::fs::write(HOSTS_FILE, new).map_err(io)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entries(n: u8) -> Vec<(Ipv4Addr, String)> {
        vec![
            (Ipv4Addr::new(10, 200, n, 1), "t0".into()),
            (Ipv4Addr::new(10, 200, n, 2), "t1".into()),
        ]
    }

    #[test]
    fn add_replace_remove() {
        let base = "127.0.0.1 localhost\n::1 localhost\n";
        let a = edit(base, "t", Some(&entries(3)));
        assert_eq!(
            a,
            "127.0.0.1 localhost\n::1 localhost\n# hxcomm testbed t begin\n10.200.3.1 t0\n\
             10.200.3.2 t1\n# hxcomm testbed t end\n"
        );
        assert!(has_block(&a, "t"));
        assert!(!has_block(&a, "hx"));
        // Replacing keeps one block.
        let b = edit(&a, "t", Some(&entries(4)));
        assert_eq!(b.matches("begin").count(), 1);
        assert!(b.contains("10.200.4.2 t1") && !b.contains("10.200.3.2"));
        // Another testbed's block is untouched by removing this one.
        let c = edit(&b, "u", Some(&entries(5)));
        let d = edit(&c, "t", None);
        assert!(has_block(&d, "u") && !has_block(&d, "t"));
        assert_eq!(edit(&d, "u", None), base);
    }

    #[test]
    fn no_trailing_newline() {
        let a = edit("127.0.0.1 localhost", "t", Some(&entries(1)));
        assert!(a.starts_with("127.0.0.1 localhost\n# hxcomm"));
    }
}
