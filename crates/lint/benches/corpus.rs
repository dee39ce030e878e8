//! Lint throughput over a 10,000-document corpus, next to kubeconform's on the same files.
//!
//! `cargo bench -p kk-lint --bench corpus` (release build; a bench binary, not a test).
//!
//! The corpus: the objects of our rendered bundles (the built-in example and every spec of
//! fixtures/specs/), copied with varied names until 6,000 documents, then generated workloads
//! (Deployment, StatefulSet, DaemonSet, ReplicaSet, Job, CronJob, Pod; some GPU, some
//! tolerating everything) and ConfigMaps (plain, and Kubean inventories/vars with embedded
//! YAML) up to 10,000, shuffled deterministically into files of 100 documents in a temporary
//! directory (`KK_BENCH_KEEP=1` keeps it).
//!
//! Measured: `kk_lint::lint` over all files at once (every cross-object rule sees the whole
//! set), and file by file (100 runs, as kubeconform sees files), reading the files included.
//! Then kubeconform (built by `benches/kubeconform.sh` into
//! `${KK_TESTBED_CACHE:-~/.cache/kubean-karpenter/testbed}/kubeconform/`, with JSON schemas
//! generated from the Karpenter and Kubean CRDs; core kinds have no schema here and are
//! skipped with `-ignore-missing-schemas`), with its default 4 workers and with one.
//! `KK_BENCH_ITERS` (default 3) runs of each; the median is reported.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use base64::Engine;
use kk_lint::{Config, Input};
use kk_model::yaml::{LoadLimits, load_documents, to_yaml};
use kk_spec::{EXAMPLE, EXAMPLE_FILE, LoadedSpec, parse_spec};
use serde_json::{Value, json};

const TARGET_DOCS: usize = 10_000;
const BUNDLE_DOCS: usize = 6_000;
const DOCS_PER_FILE: usize = 100;

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The CA a spec names (inline, a PEM file, or a kubeconfig's certificate-authority-data).
fn ca_pem(loaded: &LoadedSpec, base: &Path) -> Vec<u8> {
    if let Some(pem) = kk_render::inline_ca_pem(&loaded.spec) {
        return pem.expect("inline CA");
    }
    let ca = &loaded.spec.spec.ca_bundle;
    if let Some(file) = &ca.file {
        return fs::read(base.join(file)).expect("CA file");
    }
    let kc = ca.kubeconfig.as_ref().expect("a CA source");
    let text = fs::read_to_string(base.join(&kc.path)).expect("kubeconfig");
    let docs = load_documents(&text, LoadLimits::default()).expect("kubeconfig YAML");
    let clusters = docs[0].value["clusters"].as_array().expect("clusters");
    let entry = clusters
        .iter()
        .find(|c| kc.cluster.as_deref().is_none_or(|n| c["name"] == n))
        .expect("the named cluster");
    let data = entry["cluster"]["certificate-authority-data"]
        .as_str()
        .expect("certificate-authority-data");
    base64::engine::general_purpose::STANDARD
        .decode(data.trim())
        .expect("base64 CA")
}

/// Every YAML document of every rendered bundle, as values.
fn bundle_docs() -> (Vec<Value>, usize) {
    let specs_dir = workspace().join("fixtures/specs");
    let mut specs = vec![(
        EXAMPLE.to_owned(),
        EXAMPLE_FILE.to_owned(),
        PathBuf::from("."),
    )];
    let mut files: Vec<PathBuf> = fs::read_dir(&specs_dir)
        .expect("fixtures/specs")
        .map(|e| e.expect("dir entry").path())
        .filter(|p| p.extension().is_some_and(|x| x == "yaml"))
        .collect();
    files.sort();
    for file in files {
        let text = fs::read_to_string(&file).expect("spec");
        specs.push((text, file.display().to_string(), specs_dir.clone()));
    }
    let mut docs = Vec::new();
    for (text, name, base) in &specs {
        let loaded = parse_spec(text, name).unwrap_or_else(|e| panic!("{name}: {e:?}"));
        let bundle = kk_render::render(&loaded.spec, &ca_pem(&loaded, base)).expect("render");
        for (path, text) in &bundle.files {
            if !path.ends_with(".yaml") {
                continue;
            }
            for doc in load_documents(text, LoadLimits::default()).expect("bundle YAML") {
                docs.push(doc.value);
            }
        }
    }
    (docs, specs.len())
}

fn suffix(value: &mut Value, pointer: &str, k: usize) {
    if let Some(Value::String(s)) = value.pointer_mut(pointer) {
        s.push_str(&format!("-{k}"));
    }
}

/// Copy `k` of a bundle object: every name and every reference to one made unique.
fn renamed(doc: &Value, k: usize) -> Value {
    let mut v = doc.clone();
    for pointer in [
        "/metadata/name",
        "/spec/template/spec/nodeClassRef/name",
        "/spec/hostsConfRef/name",
        "/spec/varsConfRef/name",
        "/spec/sshAuthRef/name",
        "/spec/cluster",
        "/settings/clusterName",
        "/spec/nodeSelector/karpenter.sh~1nodepool",
        "/spec/template/spec/nodeSelector/karpenter.sh~1nodepool",
    ] {
        suffix(&mut v, pointer, k);
    }
    v
}

/// Generated document `g`: a workload or a ConfigMap.
fn generated(g: usize) -> Value {
    let name = format!("app-{g}");
    let labels = json!({"app": name});
    let mut pod = json!({
        "containers": [{
            "name": "main",
            "image": format!("registry.example.com/team-{}/app:{}", g % 17, g % 5),
            "resources": {"requests": {"cpu": "250m", "memory": "256Mi"}},
        }],
    });
    match g % 10 {
        0 | 1 => {
            pod["containers"][0]["resources"]["limits"] = json!({"nvidia.com/gpu": 1});
            pod["tolerations"] = json!([{"key": "gpu", "operator": "Equal", "value": "true", "effect": "NoSchedule"}]);
            pod["nodeSelector"] = json!({"node.accelerator": "nvidia-gpu"});
        }
        2 => {
            pod["tolerations"] = json!([{"operator": "Exists"}]);
            pod["nodeSelector"] = json!({"workload-tier": "general"});
        }
        3 => {
            pod["affinity"] = json!({"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{"matchExpressions": [
                    {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["spot"]}]}]}}});
        }
        _ => {}
    }
    let template = json!({"metadata": {"labels": labels}, "spec": pod});
    let meta = json!({"name": name, "namespace": format!("team-{}", g % 17)});
    match g % 12 {
        0 => json!({"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": template["spec"]}),
        1 => json!({"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": meta,
            "spec": {"serviceName": name, "selector": {"matchLabels": labels}, "template": template}}),
        2 => json!({"apiVersion": "batch/v1", "kind": "Job", "metadata": meta,
            "spec": {"template": template}}),
        3 => json!({"apiVersion": "batch/v1", "kind": "CronJob", "metadata": meta,
            "spec": {"schedule": "*/5 * * * *", "jobTemplate": {"spec": {"template": template}}}}),
        4 => json!({"apiVersion": "apps/v1", "kind": "ReplicaSet", "metadata": meta,
            "spec": {"selector": {"matchLabels": labels}, "template": template}}),
        5 => json!({"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": meta,
            "spec": {"selector": {"matchLabels": labels}, "template": template}}),
        6 | 7 => json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": {
            "app.properties": format!("listen=:8080\nworkers={}\nlog.level=info\n", g % 8),
            "feature-flags.json": format!("{{\"beta\": {}}}", g.is_multiple_of(2)),
        }}),
        8 => json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": {
            "hosts.yml": format!(
                "all:\n  hosts:\n    cp-{g}:\n      ip: 10.{}.{}.10\n      access_ip: 10.{}.{}.10\n  children:\n    kube_control_plane:\n      hosts:\n        cp-{g}:\n    etcd:\n      hosts:\n        cp-{g}:\n    k8s_cluster:\n      children:\n        kube_control_plane:\n",
                g / 256 % 256, g % 256, g / 256 % 256, g % 256),
        }}),
        9 => json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": {
            "group_vars.yml": format!(
                "kube_version: \"1.35.5\"\ncontainer_manager: containerd\nkube_network_plugin: calico\napiserver_loadbalancer_domain_name: api-{g}.example.internal\nsupplementary_addresses_in_ssl_keys:\n  - api-{g}.example.internal\nremove_anonymous_access: false\n"),
        }}),
        _ => json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": meta,
            "spec": {"replicas": 2, "selector": {"matchLabels": labels}, "template": template}}),
    }
}

/// A deterministic permutation (xorshift Fisher–Yates), so every run lints the same files.
fn shuffle<T>(items: &mut [T]) {
    let mut state: u64 = 0x9e37_79b9_7f4a_7c15;
    for i in (1..items.len()).rev() {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        items.swap(i, (state % (i as u64 + 1)) as usize);
    }
}

struct Corpus {
    dir: PathBuf,
    files: Vec<PathBuf>,
    bytes: usize,
    from_bundles: usize,
    workloads: usize,
    config_maps: usize,
    specs: usize,
}

fn write_corpus(dir: &Path) -> Corpus {
    let (sources, specs) = bundle_docs();
    let mut docs: Vec<String> = Vec::with_capacity(TARGET_DOCS);
    let mut k = 0;
    while docs.len() < BUNDLE_DOCS {
        for doc in &sources {
            if docs.len() == BUNDLE_DOCS {
                break;
            }
            docs.push(to_yaml(&renamed(doc, k)).expect("YAML"));
        }
        k += 1;
    }
    let from_bundles = docs.len();
    let (mut workloads, mut config_maps) = (0, 0);
    for g in 0..TARGET_DOCS - from_bundles {
        let doc = generated(g);
        if doc["kind"] == "ConfigMap" {
            config_maps += 1;
        } else {
            workloads += 1;
        }
        docs.push(to_yaml(&doc).expect("YAML"));
    }
    shuffle(&mut docs);
    let mut files = Vec::new();
    let mut bytes = 0;
    for (i, chunk) in docs.chunks(DOCS_PER_FILE).enumerate() {
        let path = dir.join(format!("corpus-{i:03}.yaml"));
        let text: String = chunk
            .iter()
            .map(|d| format!("---\n{}", d.trim_end_matches('\n')) + "\n")
            .collect();
        bytes += text.len();
        fs::write(&path, text).expect("write corpus file");
        files.push(path);
    }
    Corpus {
        dir: dir.to_owned(),
        files,
        bytes,
        from_bundles,
        workloads,
        config_maps,
        specs,
    }
}

fn read_inputs(files: &[PathBuf]) -> Vec<Input> {
    files
        .iter()
        .map(|p| {
            Input::from_bytes(p.display().to_string(), fs::read(p).expect("read"))
                .expect("corpus input")
        })
        .collect()
}

fn median(mut times: Vec<Duration>) -> Duration {
    times.sort();
    times[times.len() / 2]
}

fn rate(docs: usize, t: Duration) -> f64 {
    docs as f64 / t.as_secs_f64()
}

/// Lints every file in one run; `None` (and why) when the run refuses the inputs.
fn ours_whole(corpus: &Corpus, iters: usize) -> Result<(Duration, usize, usize), String> {
    let mut times = Vec::new();
    let mut findings = 0;
    let mut objects = 0;
    for _ in 0..iters {
        let start = Instant::now();
        let inputs = read_inputs(&corpus.files);
        let report = kk_lint::lint(&inputs, &Config::default()).map_err(|e| e.to_string())?;
        times.push(start.elapsed());
        findings = report.diagnostics.len();
        objects = report.objects;
    }
    Ok((median(times), findings, objects))
}

fn ours_per_file(corpus: &Corpus, iters: usize) -> (Duration, usize) {
    let mut times = Vec::new();
    let mut findings = 0;
    for _ in 0..iters {
        let start = Instant::now();
        findings = 0;
        for file in &corpus.files {
            let inputs = read_inputs(std::slice::from_ref(file));
            let report = kk_lint::lint(&inputs, &Config::default()).expect("lint one file");
            findings += report.diagnostics.len();
        }
        times.push(start.elapsed());
    }
    (median(times), findings)
}

/// Where one whole-corpus run spends its time: loading, indexing, and each rule.
type Phases = (
    Duration,
    Duration,
    Vec<(&'static str, &'static str, Duration, usize)>,
);

fn rule_times(corpus: &Corpus) -> Option<Phases> {
    let inputs = read_inputs(&corpus.files);
    let start = Instant::now();
    let loaded = kk_lint::input::load(&inputs).ok()?;
    let load = start.elapsed();
    let start = Instant::now();
    let ctx = kk_lint::Context::new(&loaded);
    let context = start.elapsed();
    let rules = kk_lint::RULES
        .iter()
        .map(|rule| {
            let mut found = Vec::new();
            let start = Instant::now();
            rule.check(&ctx, &mut found);
            (rule.code(), rule.meta().name, start.elapsed(), found.len())
        })
        .collect();
    Some((load, context, rules))
}

struct Kubeconform {
    bin: String,
    schema_location: String,
}

fn build_kubeconform() -> Result<Kubeconform, String> {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("benches/kubeconform.sh");
    let out = Command::new("bash")
        .arg(&script)
        .output()
        .map_err(|e| format!("cannot run {}: {e}", script.display()))?;
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        let tail: Vec<&str> = err.lines().rev().take(8).collect();
        return Err(format!(
            "{} failed ({}):\n    {}",
            script.display(),
            out.status,
            tail.into_iter().rev().collect::<Vec<_>>().join("\n    ")
        ));
    }
    let stdout = String::from_utf8_lossy(&out.stdout);
    let mut lines = stdout.lines();
    match (lines.next(), lines.next()) {
        (Some(bin), Some(schemas)) => Ok(Kubeconform {
            bin: bin.to_owned(),
            schema_location: schemas.to_owned(),
        }),
        _ => Err(format!("{} printed no binary path", script.display())),
    }
}

/// Runs kubeconform over the corpus directory: median time and its summary.
fn run_kubeconform(
    k: &Kubeconform,
    corpus: &Corpus,
    workers: Option<usize>,
    iters: usize,
) -> Result<(Duration, Value), String> {
    let mut times = Vec::new();
    let mut summary = Value::Null;
    for _ in 0..iters {
        let mut cmd = Command::new(&k.bin);
        cmd.args(["-summary", "-output", "json", "-ignore-missing-schemas"])
            .args(["-schema-location", &k.schema_location]);
        if let Some(n) = workers {
            cmd.args(["-n", &n.to_string()]);
        }
        cmd.arg(&corpus.dir);
        let start = Instant::now();
        let out = cmd
            .output()
            .map_err(|e| format!("cannot run {}: {e}", k.bin))?;
        times.push(start.elapsed());
        // Exit 1 means "some resource is invalid": still a complete run.
        let report: Value = serde_json::from_slice(&out.stdout).map_err(|e| {
            format!(
                "kubeconform output is not JSON ({e}); exit {}: {}",
                out.status,
                String::from_utf8_lossy(&out.stderr)
            )
        })?;
        summary = report["summary"].clone();
    }
    Ok((median(times), summary))
}

fn main() {
    // `cargo bench` passes `--bench`; filters are not used.
    let iters: usize = std::env::var("KK_BENCH_ITERS")
        .ok()
        .and_then(|v| v.parse().ok())
        .filter(|n| *n > 0)
        .unwrap_or(3);
    let tmp = tempfile::Builder::new()
        .prefix("kk-lint-corpus-")
        .tempdir()
        .expect("temp dir");
    let started = Instant::now();
    let corpus = write_corpus(tmp.path());
    let docs = TARGET_DOCS;
    println!(
        "corpus: {docs} documents in {} files of {DOCS_PER_FILE} ({:.1} MB) at {}, built in {:.1?}",
        corpus.files.len(),
        corpus.bytes as f64 / 1e6,
        corpus.dir.display(),
        started.elapsed()
    );
    println!(
        "  {} objects of the rendered bundles of {} specs (renamed copies), {} workloads, {} ConfigMaps",
        corpus.from_bundles, corpus.specs, corpus.workloads, corpus.config_maps
    );
    println!("  median of {iters} runs each; reading the files is included\n");

    let mut rows: Vec<(String, String)> = Vec::new();
    match ours_whole(&corpus, iters) {
        Ok((t, findings, objects)) => rows.push((
            "kk-lint, all files in one run (1 thread)".into(),
            format!(
                "{:>8.3} s {:>10.0} docs/s   {objects} objects, {findings} findings",
                t.as_secs_f64(),
                rate(docs, t)
            ),
        )),
        Err(e) => rows.push((
            "kk-lint, all files in one run".into(),
            format!("refused: {e}"),
        )),
    }
    let per_rule = rule_times(&corpus);
    let (t, findings) = ours_per_file(&corpus, iters);
    rows.push((
        format!(
            "kk-lint, file by file ({} runs, 1 thread)",
            corpus.files.len()
        ),
        format!(
            "{:>8.3} s {:>10.0} docs/s   {findings} findings",
            t.as_secs_f64(),
            rate(docs, t)
        ),
    ));

    match build_kubeconform() {
        Ok(k) => {
            for (label, workers) in [("default -n 4", None), ("-n 1", Some(1))] {
                match run_kubeconform(&k, &corpus, workers, iters) {
                    Ok((t, s)) => rows.push((
                        format!("kubeconform ({label})"),
                        format!(
                            "{:>8.3} s {:>10.0} docs/s   valid {}, invalid {}, errors {}, skipped {}",
                            t.as_secs_f64(),
                            rate(docs, t),
                            s["valid"],
                            s["invalid"],
                            s["errors"],
                            s["skipped"]
                        ),
                    )),
                    Err(e) => rows.push((format!("kubeconform ({label})"), format!("failed: {e}"))),
                }
            }
            println!(
                "kubeconform: {}\n  -schema-location {}\n",
                k.bin, k.schema_location
            );
        }
        Err(e) => rows.push(("kubeconform".into(), format!("not measured: {e}"))),
    }

    let width = rows.iter().map(|(l, _)| l.len()).max().unwrap_or(0);
    for (label, result) in &rows {
        println!("{label:<width$}  {result}");
    }
    if let Some((load, context, rules)) = per_rule {
        println!(
            "\nkk-lint over all files, by phase (one run): load {:.3} s, index {:.3} s, rules:",
            load.as_secs_f64(),
            context.as_secs_f64()
        );
        for (code, name, t, n) in rules {
            println!(
                "  {code} {name:<28} {:>8.3} s  {n} findings",
                t.as_secs_f64()
            );
        }
    }
    println!(
        "\nkubeconform validates only the Karpenter and Kubean objects against their CRD schemas \
         (core kinds have no schema offline: skipped; Helm values documents have no kind: errors); \
         kk-lint parses every document with positions, checks the CRDs (schema and CEL rules) and \
         runs every cross-object rule."
    );
    if std::env::var_os("KK_BENCH_KEEP").is_some_and(|v| v == "1") {
        let kept = tmp.keep();
        println!("corpus kept at {}", kept.display());
    }
}
