//! Node health judged from the kernel log, for the health agent (`kubean-karpenter controller
//! health-agent`): which lines are faults, which faults make a node unhealthy, and the node
//! conditions that say so in the words Karpenter's node repair reads.
//!
//! Owns the NVIDIA XID table ([`xid`]), the kernel faults worth a condition ([`kernel`]) and
//! the fold from log lines to conditions and events ([`monitor`]). Pure: it takes lines and
//! returns findings; reading `/dev/kmsg`, patching the Node and posting Events happen in
//! kk-live. Karpenter's side of the contract (which conditions it repairs, after how long) is
//! `kk_karpenter::repair`.

pub mod kernel;
pub mod monitor;
pub mod xid;

pub use monitor::{Change, Condition, Finding, Monitor, Severity, Watch};

/// Strips a `/dev/kmsg` record's header (`prio,seq,usec,flags;`) or a dmesg timestamp
/// (`[  123.456789] `) from a line, leaving the message.
pub fn message_of(line: &str) -> &str {
    let line = line.trim_end_matches(['\n', '\r']);
    if let Some((head, text)) = line.split_once(';') {
        let mut fields = head.split(',');
        let numeric = |f: Option<&str>| {
            f.is_some_and(|f| !f.is_empty() && f.bytes().all(|b| b.is_ascii_digit()))
        };
        if numeric(fields.next()) && numeric(fields.next()) && numeric(fields.next()) {
            return text;
        }
    }
    if let Some(rest) = line.strip_prefix('[')
        && let Some((stamp, text)) = rest.split_once("] ")
        && stamp
            .trim()
            .bytes()
            .all(|b| b.is_ascii_digit() || b == b'.')
    {
        return text;
    }
    line
}

#[cfg(test)]
mod tests {
    #[test]
    fn headers_are_stripped() {
        assert_eq!(
            super::message_of("6,1234,5678901,-;NVRM: Xid x\n"),
            "NVRM: Xid x"
        );
        assert_eq!(
            super::message_of("[  12.345678] NVRM: Xid x"),
            "NVRM: Xid x"
        );
        assert_eq!(super::message_of("NVRM: Xid x; more"), "NVRM: Xid x; more");
        assert_eq!(super::message_of("a,b,c;text"), "a,b,c;text");
    }
}
