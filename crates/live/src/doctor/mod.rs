//! `doctor`'s reading: [`gather`] reads the cluster and the account once (get/list/describe
//! only, as `kk_doctor::permissions` grants); kk-doctor judges the snapshot. Its types are
//! re-exported here under the paths the CLI uses.

pub mod gather;
pub mod gather_interruption;

pub use gather::gather;
pub use kk_doctor::{
    Check, Facts, InterruptionFacts, Read, ReadError, Report, Snapshot, StaticToken, Status,
    StoredJoin, checks, permissions, policy, snapshot,
};

/// Reads the cluster and the account, then runs every check.
/// `probe`: the client's configuration (its address and CA), to authenticate as the join token.
pub async fn run(
    client: &kube::Client,
    probe: &kube::Config,
    aws: Option<&aws_config::SdkConfig>,
    facts: &Facts,
) -> Report {
    let started = std::time::Instant::now();
    let snapshot = gather(client, probe, aws, facts).await;
    let checks = checks::all(&snapshot, facts);
    Report {
        checks,
        elapsed: started.elapsed(),
    }
}
