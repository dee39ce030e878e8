//! `spec.monitoring`: what the Prometheus Operator watches.

use super::*;

/// The longest wait the GPU-initialization alert accepts: a day.
const MAX_MINUTES: u32 = 24 * 60;

pub(super) fn monitoring(p: &mut Problems, at: &FieldPath, spec: &ClusterSpec) {
    let Some(monitoring) = &spec.monitoring else {
        return;
    };
    let at = at.key("monitoring");
    let minutes = monitoring.gpu_initialized_within_minutes;
    if !(1..=MAX_MINUTES).contains(&minutes) {
        p.push((
            at.key("gpuInitializedWithinMinutes"),
            format!("{minutes} is not between 1 and {MAX_MINUTES} minutes"),
        ));
    }
    for (key, value) in &monitoring.labels {
        let at = at.key("labels").key(key);
        if !is_qualified_name(key) {
            p.push((
                at.clone(),
                format!("{key:?} is not a label key (prefix/name, like app.kubernetes.io/part-of)"),
            ));
        }
        if !LABEL_VALUE.is_match(value) {
            p.push((
                at,
                format!(
                    "{value:?} is not a label value (at most 63 letters, digits, '-', '_', '.')"
                ),
            ));
        }
    }
}
