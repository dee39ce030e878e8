//! A reproducible large workload for measuring `plan` end to end: 100 Deployments (varied
//! requests, every third one spread across zones) whose replicas sum to PODS, as YAML on stdout.
//!
//! ```sh
//! cargo run -p kk-sim --example deployments -- 100000 > /tmp/deployments-100k.yaml
//! /usr/bin/time -v target/release/kubean-karpenter plan -f fixtures/sim/pools.yaml \
//!     -w /tmp/deployments-100k.yaml -o json > /dev/null
//! ```

const DEPLOYMENTS: u64 = 100;

/// The binary's allocator, so that what is measured is what `kubean-karpenter` does.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() {
    let pods: u64 = std::env::args()
        .nth(1)
        .and_then(|n| n.parse().ok())
        .unwrap_or(100_000);
    // xorshift64* from a fixed seed: the same PODS gives the same file.
    let mut state = 0x9E37_79B9_7F4A_7C15u64;
    let mut next = move || {
        state ^= state >> 12;
        state ^= state << 25;
        state ^= state >> 27;
        state.wrapping_mul(0x2545_F491_4F6C_DD1D)
    };
    let cpus = ["100m", "250m", "500m", "1", "1500m", "2"];
    let memories = ["128Mi", "256Mi", "512Mi", "1Gi", "2Gi", "4Gi"];
    let mut out = String::new();
    for i in 0..DEPLOYMENTS {
        // Replicas split evenly; the first ones take the remainder.
        let replicas = pods / DEPLOYMENTS + u64::from(i < pods % DEPLOYMENTS);
        let cpu = cpus[(next() % cpus.len() as u64) as usize];
        let memory = memories[(next() % memories.len() as u64) as usize];
        let spread = if i % 3 == 0 {
            format!(
                "      topologySpreadConstraints:\n        - maxSkew: 1\n          topologyKey: topology.kubernetes.io/zone\n          whenUnsatisfiable: DoNotSchedule\n          labelSelector: {{matchLabels: {{app: app-{i}}}}}\n"
            )
        } else {
            String::new()
        };
        out.push_str(&format!(
            "---\napiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: app-{i}\nspec:\n  replicas: {replicas}\n  selector: {{matchLabels: {{app: app-{i}}}}}\n  template:\n    metadata:\n      labels: {{app: app-{i}}}\n    spec:\n{spread}      containers:\n        - name: app\n          image: nginx\n          resources:\n            requests: {{cpu: {cpu}, memory: {memory}}}\n"
        ));
    }
    print!("{out}");
}
