//! The fold from kernel-log lines to node conditions. One [`Monitor`] lives for one boot: it
//! starts with every watched condition healthy, turns one unhealthy at the first fatal line for
//! it, and never turns it healthy again — only a new boot, whose log no longer holds the
//! fault, clears it. A condition written False in this boot is kept across an agent restart
//! even when the kernel's ring buffer has since dropped the line ([`Monitor::keep`]).

use std::collections::BTreeMap;

use kk_karpenter::repair::{ACCELERATED_HARDWARE_READY, RepairAction, policy_for};

use crate::{kernel, message_of, xid};

/// What the agent watches on a node (the spec's `health` of its pool).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Watch {
    /// NVIDIA XIDs: `AcceleratedHardwareReady`.
    pub gpu: bool,
    /// Kernel and filesystem faults: `KernelReady`, `StorageReady`.
    pub kernel: bool,
}

impl Watch {
    /// The condition types the agent owns on the node.
    pub fn conditions(self) -> Vec<&'static str> {
        let mut out = Vec::new();
        if self.gpu {
            out.push(ACCELERATED_HARDWARE_READY);
        }
        if self.kernel {
            out.extend(kernel::CONDITIONS);
        }
        out
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Severity {
    /// Sets a condition False.
    Fatal,
    /// An Event and a metric only.
    Warning,
}

/// One fault read from the log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finding {
    pub severity: Severity,
    /// The condition type it concerns (for a warning: the one it would belong to).
    pub condition: &'static str,
    /// `NvidiaXID79Error`, `NvidiaXID13Warning`, `ReadonlyFilesystem`, …
    pub reason: String,
    /// A sentence naming the fault and the log line it came from.
    pub message: String,
}

/// A node condition as the agent writes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Condition {
    pub kind: &'static str,
    pub healthy: bool,
    pub reason: String,
    pub message: String,
}

impl Condition {
    pub fn status(&self) -> &'static str {
        if self.healthy { "True" } else { "False" }
    }
}

/// A condition that changed with a line: it turned unhealthy, or its reason escalated (a
/// replace-class XID after a reboot-class one).
pub type Change = Condition;

const BOOT_MARK: &str = " [boot ";

fn healthy(kind: &'static str) -> Condition {
    let reason = match kind {
        ACCELERATED_HARDWARE_READY => "NvidiaGPUIsReady",
        kk_karpenter::repair::STORAGE_READY => "StorageIsReady",
        _ => "KernelIsReady",
    };
    Condition {
        kind,
        healthy: true,
        reason: reason.to_owned(),
        message: "kubean-karpenter health agent: no fault in this boot's kernel log".to_owned(),
    }
}

/// The kernel log of one boot, read line by line.
#[derive(Debug, Clone)]
pub struct Monitor {
    watch: Watch,
    boot_id: String,
    conditions: BTreeMap<&'static str, Condition>,
}

impl Monitor {
    /// Every watched condition healthy, for the boot `boot_id`.
    pub fn new(watch: Watch, boot_id: &str) -> Monitor {
        Monitor {
            watch,
            boot_id: boot_id.to_owned(),
            conditions: watch
                .conditions()
                .into_iter()
                .map(|k| (k, healthy(k)))
                .collect(),
        }
    }

    /// Takes over a condition the Node already carries: an unhealthy one written in this boot
    /// stays unhealthy (its line may have left the kernel's ring buffer); one from another
    /// boot, or any other, is ignored — the reboot is the evidence that cleared it.
    pub fn keep(&mut self, kind: &str, status: &str, reason: &str, message: &str) {
        let Some(current) = self.conditions.get_mut(kind) else {
            return;
        };
        let this_boot = format!("{BOOT_MARK}{}]", self.boot_id);
        if status == "False" && message.ends_with(&this_boot) && current.healthy {
            current.healthy = false;
            current.reason = reason.to_owned();
            current.message = message.to_owned();
        }
    }

    /// The conditions to write, in a fixed order.
    pub fn conditions(&self) -> Vec<Condition> {
        self.conditions.values().cloned().collect()
    }

    /// Reads one line (a `/dev/kmsg` record or a dmesg line): the fault it reports, if the
    /// agent watches it, and the condition it changed, if any.
    pub fn read(&mut self, line: &str) -> Option<(Finding, Option<Change>)> {
        let message = message_of(line);
        let finding = self.find(message)?;
        if finding.severity == Severity::Warning {
            return Some((finding, None));
        }
        let current = self.conditions.get_mut(finding.condition)?;
        let escalates = !current.healthy
            && action(current) == Some(RepairAction::Reboot)
            && action_of(finding.condition, &finding.reason) == Some(RepairAction::Replace);
        if current.healthy || escalates {
            current.healthy = false;
            current.reason = finding.reason.clone();
            current.message = format!("{}{BOOT_MARK}{}]", finding.message, self.boot_id);
            let changed = current.clone();
            return Some((finding, Some(changed)));
        }
        Some((finding, None))
    }

    fn find(&self, message: &str) -> Option<Finding> {
        if self.watch.gpu
            && let Some(line) = xid::parse(message)
        {
            let known = xid::lookup(line.code);
            let fatal = known.is_some_and(|x| x.fatal);
            let meaning = known.map_or("not in the XID table", |x| x.meaning);
            return Some(Finding {
                severity: if fatal {
                    Severity::Fatal
                } else {
                    Severity::Warning
                },
                condition: ACCELERATED_HARDWARE_READY,
                reason: format!(
                    "NvidiaXID{}{}",
                    line.code,
                    if fatal { "Error" } else { "Warning" }
                ),
                message: format!(
                    "XID {} ({meaning}) on GPU {}: \"{}\"",
                    line.code,
                    line.pci,
                    excerpt(message)
                ),
            });
        }
        if self.watch.kernel
            && let Some(fault) = kernel::classify(message)
        {
            return Some(Finding {
                severity: if fault.condition.is_some() {
                    Severity::Fatal
                } else {
                    Severity::Warning
                },
                condition: fault
                    .condition
                    .unwrap_or(kk_karpenter::repair::KERNEL_READY),
                reason: fault.reason.to_owned(),
                message: format!("{}: \"{}\"", fault.reason, excerpt(message)),
            });
        }
        None
    }
}

/// Karpenter's action for a condition as it stands (reboot-for-repair assumed on: the
/// escalation only matters when it would reboot).
fn action(c: &Condition) -> Option<RepairAction> {
    action_of(c.kind, &c.reason)
}

fn action_of(kind: &str, reason: &str) -> Option<RepairAction> {
    policy_for(kind, "False", reason, true).map(|p| p.action)
}

/// The log line as quoted in a message: one line, at most 200 characters.
fn excerpt(message: &str) -> String {
    let line = message.lines().next().unwrap_or_default().trim();
    match line.char_indices().nth(200) {
        Some((at, _)) => format!("{}…", &line[..at]),
        None => line.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GPU: Watch = Watch {
        gpu: true,
        kernel: false,
    };

    #[test]
    fn a_fatal_xid_turns_the_gpu_unhealthy_once() {
        let mut m = Monitor::new(GPU, "b1");
        assert!(m.conditions().iter().all(|c| c.healthy));
        let (finding, change) = m
            .read("6,812,5012345,-;NVRM: Xid (PCI:0000:00:1e): 79, pid=1896, name=python, GPU has fallen off the bus.")
            .unwrap();
        assert_eq!(finding.reason, "NvidiaXID79Error");
        let change = change.unwrap();
        assert_eq!(
            (change.kind, change.status()),
            (ACCELERATED_HARDWARE_READY, "False")
        );
        assert!(
            change.message.starts_with(
                "XID 79 (the GPU has fallen off the bus) on GPU 0000:00:1e: \"NVRM: Xid"
            ),
            "{}",
            change.message
        );
        assert!(change.message.ends_with(" [boot b1]"), "{}", change.message);
        // The same fault again changes nothing; the condition is never cleared by a line.
        let (_, again) = m
            .read("NVRM: Xid (PCI:0000:00:1e): 79, GPU has fallen off the bus.")
            .unwrap();
        assert_eq!(again, None);
        assert_eq!(m.conditions()[0].reason, "NvidiaXID79Error");
    }

    #[test]
    fn a_warning_xid_changes_no_condition() {
        let mut m = Monitor::new(GPU, "b1");
        let (finding, change) = m
            .read("NVRM: Xid (PCI:0000:00:1e): 13, Graphics Exception")
            .unwrap();
        assert_eq!(
            (finding.severity, finding.reason.as_str()),
            (Severity::Warning, "NvidiaXID13Warning")
        );
        assert_eq!(change, None);
        assert!(m.conditions()[0].healthy);
        assert_eq!(m.read("systemd[1]: Started Session 3."), None);
    }

    #[test]
    fn a_replace_class_xid_escalates_a_reboot_class_one() {
        let mut m = Monitor::new(GPU, "b1");
        let (_, first) = m.read("NVRM: Xid (PCI:0000:00:1e): 48, DBE").unwrap();
        assert_eq!(first.unwrap().reason, "NvidiaXID48Error");
        let (_, second) = m
            .read("NVRM: Xid (PCI:0000:00:1e): 79, off the bus")
            .unwrap();
        assert_eq!(second.unwrap().reason, "NvidiaXID79Error");
        let (_, third) = m.read("NVRM: Xid (PCI:0000:00:1e): 63, row remap").unwrap();
        assert_eq!(
            third, None,
            "a reboot-class XID does not step back from replace"
        );
    }

    #[test]
    fn an_unhealthy_condition_survives_a_restart_in_the_same_boot_only() {
        let mut m = Monitor::new(GPU, "b1");
        m.keep(
            ACCELERATED_HARDWARE_READY,
            "False",
            "NvidiaXID79Error",
            "XID 79 … [boot b1]",
        );
        assert!(!m.conditions()[0].healthy);
        let mut after_reboot = Monitor::new(GPU, "b2");
        after_reboot.keep(
            ACCELERATED_HARDWARE_READY,
            "False",
            "NvidiaXID79Error",
            "XID 79 … [boot b1]",
        );
        assert!(
            after_reboot.conditions()[0].healthy,
            "the reboot cleared it"
        );
        // Not ours to keep: a type the agent does not watch.
        let mut m = Monitor::new(GPU, "b1");
        m.keep("KernelReady", "False", "X", "x [boot b1]");
        assert_eq!(m.conditions().len(), 1);
    }

    #[test]
    fn kernel_faults_are_watched_only_when_asked() {
        let line = "EXT4-fs (nvme0n1p1): Remounting filesystem read-only";
        assert_eq!(Monitor::new(GPU, "b").read(line), None);
        let mut m = Monitor::new(
            Watch {
                gpu: false,
                kernel: true,
            },
            "b",
        );
        let (finding, change) = m.read(line).unwrap();
        assert_eq!(finding.reason, "ReadonlyFilesystem");
        assert_eq!(change.unwrap().kind, "StorageReady");
        let (hung, none) = m
            .read("INFO: task x:1 blocked for more than 120 seconds.")
            .unwrap();
        assert_eq!((hung.severity, none), (Severity::Warning, None));
    }
}
