//! Kernel-log faults other than XIDs. Few are worth a condition: a node whose filesystem the
//! kernel made read-only, or whose XFS shut down, cannot recover without a new node, so those
//! set `StorageReady=False` (Karpenter replaces after 30 minutes). The rest — soft lockups,
//! hung tasks, OOM kills, I/O and ext4 errors, oopses — may pass or belong to one workload:
//! Events and metrics only, as node-problem-detector and the EKS node monitoring agent treat
//! them. EFA faults show in counters under /sys, not in the kernel log: none is read here.

use kk_karpenter::repair::{KERNEL_READY, STORAGE_READY};

/// One kind of kernel-log fault.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fault {
    /// The reason written into the condition or Event (`ReadonlyFilesystem`).
    pub reason: &'static str,
    /// The condition it sets False, or `None`: an Event only.
    pub condition: Option<&'static str>,
    /// Text that identifies it in a kernel message, in order.
    needles: &'static [&'static str],
}

const fn fault(
    reason: &'static str,
    condition: Option<&'static str>,
    needles: &'static [&'static str],
) -> Fault {
    Fault {
        reason,
        condition,
        needles,
    }
}

/// Every fault recognised, conditions first.
pub const FAULTS: &[Fault] = &[
    fault(
        "ReadonlyFilesystem",
        Some(STORAGE_READY),
        &["Remounting filesystem read-only"],
    ),
    fault(
        "XfsShutdown",
        Some(STORAGE_READY),
        &["XFS (", "Shutting down filesystem"],
    ),
    fault("SoftLockup", None, &["BUG: soft lockup"]),
    fault("TaskHung", None, &["blocked for more than", "seconds"]),
    fault("OOMKilling", None, &["Out of memory: Killed process"]),
    fault("Ext4Error", None, &["EXT4-fs error"]),
    fault("IOError", None, &["I/O error"]),
    fault("KernelOops", None, &["BUG: unable to handle"]),
    fault(
        "UnregisterNetDevice",
        None,
        &["unregister_netdevice: waiting for"],
    ),
];

/// The condition types kernel faults may set (the agent owns them when `kernel` is watched).
pub const CONDITIONS: [&str; 2] = [KERNEL_READY, STORAGE_READY];

/// The fault a kernel message reports, if any.
pub fn classify(message: &str) -> Option<&'static Fault> {
    FAULTS.iter().find(|f| {
        let mut rest = message;
        f.needles.iter().all(|needle| match rest.find(needle) {
            Some(at) => {
                rest = &rest[at + needle.len()..];
                true
            }
            None => false,
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lasting_faults_set_a_condition_and_passing_ones_do_not() {
        let ro = classify("EXT4-fs (nvme0n1p1): Remounting filesystem read-only").unwrap();
        assert_eq!(
            (ro.reason, ro.condition),
            ("ReadonlyFilesystem", Some(STORAGE_READY))
        );
        let xfs = classify(
            "XFS (nvme1n1): Corruption of in-memory data detected. Shutting down filesystem",
        )
        .unwrap();
        assert_eq!(xfs.reason, "XfsShutdown");
        let hung =
            classify("INFO: task kworker/0:1:123 blocked for more than 120 seconds.").unwrap();
        assert_eq!((hung.reason, hung.condition), ("TaskHung", None));
        assert_eq!(
            classify("Out of memory: Killed process 4242 (python)")
                .unwrap()
                .reason,
            "OOMKilling"
        );
        assert_eq!(
            classify("systemd[1]: Started Session 3 of user root."),
            None
        );
        // Order matters: "Shutting down filesystem" alone is not an XFS shutdown.
        assert_eq!(classify("Shutting down filesystem XFS ("), None);
    }
}
