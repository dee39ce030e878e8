//! Wall-clock limits and progress for long runs. The core reads no clock: the caller hands in
//! one (the CLI, `plan --disrupt --budget-time`), and without it a run is unbounded and
//! deterministic.

use std::fmt;
use std::sync::Arc;

/// Seconds since a fixed instant of the caller's choosing.
pub type Clock = Arc<dyn Fn() -> f64 + Send + Sync>;
/// Receives one line of progress.
pub type Progress = Arc<dyn Fn(&str) + Send + Sync>;

/// What the caller lets a run see of the world outside it.
#[derive(Clone)]
pub struct Watch {
    pub clock: Clock,
    /// Each consolidation method's limit per pass, as Karpenter's (multi-node consolidation
    /// 1 minute, single-node 3 minutes): past it, multi-node keeps the best command found so
    /// far and single-node gives up the pass. `None`: no limit.
    pub budget_seconds: Option<f64>,
    /// Called at most about once a second with where the run is.
    pub progress: Option<Progress>,
}

impl fmt::Debug for Watch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Watch")
            .field("budget_seconds", &self.budget_seconds)
            .field("progress", &self.progress.is_some())
            .finish()
    }
}

/// Two watches are alike when their limits are: the clock and the sink are the caller's.
impl PartialEq for Watch {
    fn eq(&self, other: &Self) -> bool {
        self.budget_seconds == other.budget_seconds
            && self.progress.is_some() == other.progress.is_some()
    }
}

/// One method's time within one pass.
pub(super) struct Stopwatch {
    watch: Option<Watch>,
    start: f64,
    last_report: f64,
}

impl Stopwatch {
    pub fn start(watch: Option<&Watch>) -> Stopwatch {
        let start = watch.map_or(0.0, |w| (w.clock)());
        Stopwatch {
            watch: watch.cloned(),
            start,
            last_report: start,
        }
    }

    /// Whether the method's budget is spent.
    pub fn expired(&self) -> bool {
        match &self.watch {
            Some(Watch {
                clock,
                budget_seconds: Some(limit),
                ..
            }) => clock() - self.start > *limit,
            _ => false,
        }
    }

    /// Reports `line()` when a second has passed since the last report.
    pub fn tick(&mut self, line: impl FnOnce() -> String) {
        let Some(Watch {
            clock,
            progress: Some(sink),
            ..
        }) = &self.watch
        else {
            return;
        };
        let now = clock();
        if now - self.last_report >= 1.0 {
            self.last_report = now;
            sink(&line());
        }
    }
}
