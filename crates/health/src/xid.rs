//! NVIDIA XIDs: the driver's numbered error reports (`NVRM: Xid (PCI:0000:00:1e): 79, …` in the
//! kernel log). A fatal XID leaves a GPU that still shows in `nvidia.com/gpu` capacity but
//! fails every job: it becomes `AcceleratedHardwareReady=False` with reason `NvidiaXID<N>Error`,
//! the form Karpenter's repair policies match. Any other XID is a warning: an Event and a
//! metric, no condition.
//!
//! The fatal set is the EKS node monitoring agent's well-known list, so Karpenter classifies
//! our reasons as it does theirs; meanings from NVIDIA's Xid catalog
//! (docs.nvidia.com/deploy/xid-errors) and its `xiderrorsmapping.csv` (NVSentinel). The
//! reboot-or-replace split is Karpenter's (`kk_karpenter::repair`).

/// One XID as this table knows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Xid {
    pub code: u32,
    /// NVIDIA's mnemonic.
    pub name: &'static str,
    pub meaning: &'static str,
    pub fatal: bool,
}

const fn xid(code: u32, name: &'static str, meaning: &'static str, fatal: bool) -> Xid {
    Xid {
        code,
        name,
        meaning,
        fatal,
    }
}

/// The XIDs this table names; an XID not here is a warning.
pub const TABLE: &[Xid] = &[
    xid(
        13,
        "GR_EXCEPTION",
        "graphics engine exception (usually the application)",
        false,
    ),
    xid(
        31,
        "FIFO_ERROR_MMU_ERR_FLT",
        "GPU memory page fault (usually the application)",
        false,
    ),
    xid(
        43,
        "RESETCHANNEL_VERIF_ERROR",
        "a channel was reset (the application stopped)",
        false,
    ),
    xid(
        45,
        "PREEMPTIVE_REMOVAL",
        "channels removed after another XID",
        false,
    ),
    xid(46, "GPU_TIMEOUT_ERROR", "the GPU stopped processing", true),
    xid(48, "GPU_ECC_DBE", "double-bit ECC error", true),
    xid(
        54,
        "PWR_REDUCED_CLOCKING",
        "auxiliary power lost, clocks reduced",
        true,
    ),
    xid(
        61,
        "PMU_BREAKPOINT",
        "internal micro-controller breakpoint",
        false,
    ),
    xid(
        62,
        "PMU_HALT_ERROR",
        "internal micro-controller halted",
        true,
    ),
    xid(
        63,
        "INFOROM_DRAM_RETIREMENT_EVENT",
        "row remapping pending: a GPU reset activates it",
        true,
    ),
    xid(
        64,
        "INFOROM_DRAM_RETIREMENT_FAILURE",
        "row remapping failed",
        true,
    ),
    xid(68, "NVDEC0_ERROR", "video decoder exception", false),
    xid(69, "GR_CLASS_ERROR", "graphics engine class error", false),
    xid(74, "NVLINK_ERROR", "NVLink error", true),
    xid(
        79,
        "GPU_HAS_FALLEN_OFF_THE_BUS",
        "the GPU has fallen off the bus",
        true,
    ),
    xid(
        92,
        "EXCESSIVE_SBE_INTERRUPTS",
        "high single-bit ECC error rate",
        false,
    ),
    xid(
        94,
        "CONTAINED_ERROR",
        "contained ECC error (the application was stopped)",
        false,
    ),
    xid(95, "UNCONTAINED_ERROR", "uncontained ECC error", true),
    xid(109, "CTXSW_TIMEOUT", "context switch timeout", true),
    xid(110, "SEC_FAULT", "security fault", true),
    xid(119, "GSP_RPC_TIMEOUT", "GSP firmware RPC timeout", true),
    xid(120, "GSP_ERROR", "GSP firmware error", true),
    xid(
        136,
        "ALI_TRAINING_FAIL",
        "NVLink link training failed",
        true,
    ),
    xid(
        140,
        "UNRECOVERABLE_ECC_ERROR_ESCAPE",
        "unrecoverable ECC error escaped containment",
        true,
    ),
    xid(
        142,
        "NVENC3_ERROR",
        "video encoder error the driver cannot recover",
        true,
    ),
    xid(143, "GPU_INIT_ERROR", "GPU initialization failed", true),
    xid(
        151,
        "KEY_ROTATION_ERROR",
        "confidential-computing key rotation failed",
        true,
    ),
    xid(
        154,
        "GPU_RECOVERY_ACTION_CHANGED",
        "the recovery the GPU needs changed (follow the XID before it)",
        false,
    ),
    xid(
        155,
        "NVLINK_SW_DEFINED_ERROR",
        "NVLink software-defined error",
        true,
    ),
    xid(
        156,
        "RESOURCE_RETIREMENT_EVENT",
        "GPU resource retirement",
        true,
    ),
    xid(158, "GPU_FATAL_TIMEOUT", "GPU fatal timeout", true),
];

/// What the table says of `code`.
pub fn lookup(code: u32) -> Option<&'static Xid> {
    TABLE.iter().find(|x| x.code == code)
}

/// Whether `code` makes the GPU unhealthy.
pub fn is_fatal(code: u32) -> bool {
    lookup(code).is_some_and(|x| x.fatal)
}

/// One XID line of the kernel log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct XidLine {
    /// `0000:00:1e` (the PCI address the driver names; MIG attribution left out).
    pub pci: String,
    pub code: u32,
    /// The driver's text after the code (`pid=…, name=…, GPU has fallen off the bus.`).
    pub detail: String,
}

/// Reads `NVRM: Xid (PCI:<domain:bus:device>[ GPU-I:…]): <code>, <detail>` from a message
/// (header already stripped, see [`crate::message_of`]); anything else is `None`.
pub fn parse(message: &str) -> Option<XidLine> {
    let at = message.find("NVRM: Xid (PCI:")?;
    let rest = &message[at + "NVRM: Xid (PCI:".len()..];
    let (inside, after) = rest.split_once("): ")?;
    let pci = inside.split_whitespace().next()?.to_owned();
    let digits = after.bytes().take_while(u8::is_ascii_digit).count();
    if digits == 0 || pci.is_empty() {
        return None;
    }
    let code = after[..digits].parse().ok()?;
    let detail = after[digits..].trim_start_matches(',').trim().to_owned();
    Some(XidLine { pci, code, detail })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_drivers_lines_parse() {
        let line = parse(
            "NVRM: Xid (PCI:0000:00:1e): 79, pid=1896, name=python, GPU has fallen off the bus.",
        )
        .unwrap();
        assert_eq!(line.pci, "0000:00:1e");
        assert_eq!(line.code, 79);
        assert_eq!(
            line.detail,
            "pid=1896, name=python, GPU has fallen off the bus."
        );
        let mig = parse("NVRM: Xid (PCI:0000:10:1c GPU-I:02 GPU-CI:01): 63, Row Remapper: New row marked for remapping, reset gpu to activate.").unwrap();
        assert_eq!((mig.pci.as_str(), mig.code), ("0000:10:1c", 63));
        let bare =
            parse("NVRM: Xid (PCI:0000:3b:00): 48, An uncorrectable double bit error").unwrap();
        assert_eq!(bare.code, 48);
        for other in [
            "NVRM: loading NVIDIA UNIX x86_64 Kernel Module",
            "NVRM: Xid (PCI:0000:00:1e): , no code",
            "Xid 79 mentioned in passing",
        ] {
            assert_eq!(parse(other), None, "{other}");
        }
    }

    #[test]
    fn the_table_agrees_with_karpenters_repair_lists() {
        use kk_karpenter::repair::{REBOOT_XIDS, REPLACE_XIDS};
        for code in REBOOT_XIDS.iter().chain(REPLACE_XIDS.iter()) {
            assert!(
                is_fatal(*code),
                "Karpenter repairs XID {code}: it must be fatal here"
            );
        }
        for x in TABLE {
            assert_eq!(
                TABLE.iter().filter(|o| o.code == x.code).count(),
                1,
                "{}",
                x.code
            );
        }
        assert!(!is_fatal(13) && !is_fatal(94) && !is_fatal(999));
    }
}
