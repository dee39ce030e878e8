//! A reclaim (`--reclaim`): the selected capacity taken back at once and unavailable after.

use super::Engine;
use super::Method;
use crate::disrupt::reclaim::Selector;
use crate::labels;

impl Engine<'_> {
    /// Marks every offering the selector names unavailable (Karpenter's unavailable-offerings
    /// cache does this for the interrupted instance's offering), then removes every node on
    /// that capacity and provisions its pods elsewhere.
    pub(super) fn reclaim(&mut self, selector: &Selector) {
        for (instance_type, zone, capacity_type) in selector.offerings(&self.input.catalog) {
            self.input
                .catalog
                .set_available(&instance_type, &zone, capacity_type, false);
        }
        let label =
            |n: &super::WorkingNode, key: &str| n.node.labels.get(key).cloned().unwrap_or_default();
        let reclaimed: Vec<String> = self
            .nodes
            .iter()
            .filter(|(_, n)| {
                selector.matches(
                    &label(n, labels::INSTANCE_TYPE),
                    &label(n, labels::ZONE),
                    &label(n, labels::CAPACITY_TYPE),
                )
            })
            .map(|(name, _)| name.clone())
            .collect();
        self.remove_forcefully(Method::Interruption, &reclaimed);
    }
}
