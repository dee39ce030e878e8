//! Runs every rendered EC2NodeClass userData the way an instance Karpenter launched would,
//! in `tests/sandbox/run-userdata.sh`: its own network namespace with a fake IMDS that
//! requires IMDSv2 tokens, /etc as an overlay whose writes land in a temp dir, and recording
//! fakes for kubeadm, systemctl, nvidia-smi, nvidia-container-runtime and aws.
//!
//! The sandbox needs root (unshare --net --mount). Without it the sandbox tests fail when
//! CI=true and are skipped with a loud SKIP line otherwise; the same holds for shellcheck.
//!
//! Over 700 lines on purpose: one sandbox harness and the userData cases that need it; each
//! case is a few lines of setup around the shared runner.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use serde_json::Value;
use tempfile::TempDir;

const INSTANCE_ID: &str = "i-0123456789abcdef0";
const PROVIDER_ID: &str = "aws:///us-east-1b/i-0123456789abcdef0";
const API_ENDPOINT: &str = "api.demo.internal:6443";
/// `openssl x509 -pubkey | openssl pkey -pubin -outform der | sha256sum` of the example CA.
const EXAMPLE_CA_HASH: &str =
    "sha256:21653cfdac168d446a75e375b2a11321106dc4c67610b50c31d2db403838754e";
const STATIC_TOKEN: &str = "abcdef.0123456789abcdef";
/// The token the fake SSM parameter / secret holds: differs from the static one on purpose.
const STORE_TOKEN: &str = "07401b.f395accd246ae52d";
/// The CA hash the fake store holds: a store writer's forgery (not the example CA's). Every
/// join must still pin the example CA's hash, baked into the userData at render time.
const FORGED_CA_HASH: &str =
    "sha256:00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff";
const SSM_STORE: &str = "/kubean-karpenter/demo/join";
const SM_STORE: &str = "kubean-karpenter/demo/join";
const DROP_IN: &str = "systemd/system/kubelet.service.d/20-kubean-karpenter.conf";
const FLAGS_ENV: &str = "kubean-karpenter/kubelet-flags.env";

// ---------------------------------------------------------------------------------------
// Specs and the rendered bundle

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    Ssm,
    Static,
    SecretsManager,
}

/// The built-in example (join mode ssm), or the example switched to static / secrets-manager.
/// Where the userData writes kubeadm's JoinConfiguration.
const JOIN_CONFIG: &str = "/run/kubean-karpenter/kubeadm-join.yaml";

fn spec_text(mode: Mode) -> String {
    let mut out = String::new();
    let mut replaced = 0;
    for line in kk_spec::EXAMPLE.lines() {
        let trimmed = line.trim_start();
        let indent = &line[..line.len() - trimmed.len()];
        let new = if trimmed.starts_with("mode: ssm") {
            replaced += 1;
            match mode {
                Mode::Ssm => line.to_owned(),
                Mode::Static => format!("{indent}mode: static\n{indent}allowInsecureStatic: true"),
                Mode::SecretsManager => format!("{indent}mode: secrets-manager"),
            }
        } else if trimmed.starts_with("storeName: ") {
            replaced += 1;
            match mode {
                Mode::Ssm => line.to_owned(),
                Mode::Static => format!("{indent}token: {STATIC_TOKEN}"),
                Mode::SecretsManager => format!("{indent}storeName: {SM_STORE}"),
            }
        } else {
            line.to_owned()
        };
        out.push_str(&new);
        out.push('\n');
    }
    assert_eq!(
        replaced, 2,
        "the example no longer has exactly one `mode: ssm` and one `storeName:` line"
    );
    out
}

struct Rendered {
    spec: kk_spec::ElasticCluster,
    classes: Vec<NodeClass>,
}

struct NodeClass {
    name: String,
    user_data: String,
    /// `spec.kubelet` of the EC2NodeClass.
    kubelet: Value,
    gpu: bool,
    /// The full KUBELET_EXTRA_ARGS value expected on an instance with PROVIDER_ID.
    expected_kubelet_args: String,
}

fn render(mode: Mode) -> Rendered {
    render_text(&spec_text(mode), mode)
}

fn render_text(text: &str, mode: Mode) -> Rendered {
    let loaded = kk_spec::parse_spec(text, "example.yaml").unwrap_or_else(|errors| {
        panic!(
            "parse_spec rejects the {mode:?} variant of the example:\n{}",
            errors
                .iter()
                .map(|e| e.to_string())
                .collect::<Vec<_>>()
                .join("\n")
        )
    });
    let cluster = loaded.spec;
    let ca = kk_render::inline_ca_pem(&cluster)
        .expect("the example carries caBundle.base64")
        .expect("caBundle.base64 decodes");
    let bundle = kk_render::render(&cluster, &ca).expect("the example renders");

    let docs = |prefix: &str, kind: &str| -> Vec<Value> {
        let mut out = Vec::new();
        for (path, text) in &bundle.files {
            if !path.starts_with(prefix) {
                continue;
            }
            let docs = kk_model::yaml::load_documents(text, Default::default())
                .unwrap_or_else(|e| panic!("{path} is not YAML: {e:?}"));
            for doc in docs {
                if doc.value["kind"] == kind {
                    out.push(doc.value);
                }
            }
        }
        out
    };
    let pools = docs("nodepools/", "NodePool");
    let gpu_classes: Vec<&str> = cluster
        .spec
        .pools
        .iter()
        .filter(|p| p.pool_type == kk_spec::PoolType::Gpu)
        .map(kk_spec::node_class_name)
        .collect();

    let mut classes = Vec::new();
    for class in docs("nodeclasses/", "EC2NodeClass") {
        let name = class["metadata"]["name"].as_str().unwrap().to_owned();
        let user_data = class["spec"]["userData"]
            .as_str()
            .unwrap_or_else(|| panic!("EC2NodeClass {name} has no spec.userData"))
            .to_owned();
        let kubelet = class["spec"]["kubelet"].clone();
        let expected_kubelet_args = expected_kubelet_args(&name, &kubelet, &pools);
        classes.push(NodeClass {
            gpu: gpu_classes.contains(&name.as_str()),
            name,
            user_data,
            kubelet,
            expected_kubelet_args,
        });
    }
    assert_eq!(
        classes.iter().map(|c| c.name.as_str()).collect::<Vec<_>>(),
        [
            "gpu",
            "kubean-aws-cpu",
            "kubean-aws-gpu",
            "kubean-aws-training"
        ],
        "the example's EC2NodeClasses"
    );
    Rendered {
        spec: cluster,
        classes,
    }
}

/// KUBELET_EXTRA_ARGS built independently from the NodePools that use the class and the
/// EC2NodeClass's own spec.kubelet.
fn expected_kubelet_args(class: &str, kubelet: &Value, pools: &[Value]) -> String {
    let users: Vec<&Value> = pools
        .iter()
        .filter(|p| p["spec"]["template"]["spec"]["nodeClassRef"]["name"] == class)
        .collect();
    assert!(!users.is_empty(), "no NodePool uses EC2NodeClass {class}");
    let flags_of = |pool: &Value| -> (String, String) {
        let template = &pool["spec"]["template"];
        let labels: BTreeMap<String, String> = template["metadata"]["labels"]
            .as_object()
            .map(|m| {
                m.iter()
                    .map(|(k, v)| (k.clone(), v.as_str().unwrap().to_owned()))
                    .collect()
            })
            .unwrap_or_default();
        let mut taints = vec!["karpenter.sh/unregistered:NoExecute".to_owned()];
        for t in template["spec"]["taints"].as_array().into_iter().flatten() {
            let key = t["key"].as_str().unwrap();
            let effect = t["effect"].as_str().unwrap();
            taints.push(match t["value"].as_str() {
                Some(v) => format!("{key}={v}:{effect}"),
                None => format!("{key}:{effect}"),
            });
        }
        let labels = labels
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join(",");
        (taints.join(","), labels)
    };
    let (taints, labels) = flags_of(users[0]);
    for other in &users[1..] {
        assert_eq!(
            flags_of(other),
            (taints.clone(), labels.clone()),
            "NodePools sharing EC2NodeClass {class} differ in labels or taints"
        );
    }
    let mut args = vec![
        "--cloud-provider=external".to_owned(),
        format!("--provider-id={PROVIDER_ID}"),
        format!("--register-with-taints={taints}"),
    ];
    if !labels.is_empty() {
        args.push(format!("--node-labels={labels}"));
    }
    let max_pods = kubelet["maxPods"]
        .as_i64()
        .unwrap_or_else(|| panic!("EC2NodeClass {class} has no spec.kubelet.maxPods"));
    args.push(format!("--max-pods={max_pods}"));
    for (key, flag) in [
        ("kubeReserved", "--kube-reserved"),
        ("systemReserved", "--system-reserved"),
    ] {
        if let Some(map) = kubelet[key].as_object().filter(|m| !m.is_empty()) {
            let mut pairs: Vec<String> = map
                .iter()
                .map(|(k, v)| format!("{k}={}", v.as_str().unwrap()))
                .collect();
            pairs.sort();
            args.push(format!("{flag}={}", pairs.join(",")));
        }
    }
    args.join(" ")
}

// ---------------------------------------------------------------------------------------
// Tools and the sandbox

fn in_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| v == "true")
}

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn runner() -> PathBuf {
    repo_root().join("tests/sandbox/run-userdata.sh")
}

/// Why the sandbox cannot run here, or None when it can.
fn sandbox_unavailable() -> Option<&'static str> {
    static PROBE: OnceLock<Option<String>> = OnceLock::new();
    PROBE
        .get_or_init(|| {
            for (tool, arg) in [
                ("python3", "--version"),
                ("curl", "--version"),
                ("ip", "-V"),
            ] {
                match Command::new(tool).arg(arg).output() {
                    Ok(o) if o.status.success() => {}
                    _ => return Some(format!("{tool} is not installed")),
                }
            }
            let probe = Command::new("unshare")
                .args([
                    "--net",
                    "--mount",
                    "--pid",
                    "--fork",
                    "--mount-proc",
                    "true",
                ])
                .output();
            match probe {
                Ok(o) if o.status.success() => None,
                Ok(o) => Some(format!(
                    "unshare --net --mount is not permitted (needs root): {}",
                    String::from_utf8_lossy(&o.stderr).trim()
                )),
                Err(e) => Some(format!("cannot run unshare: {e}")),
            }
        })
        .as_deref()
}

/// Prints `line` once per process straight to stderr, past libtest's output capture, so a
/// skip is seen in a plain `cargo test` run.
fn loud_once(flag: &'static std::sync::Once, line: &str) {
    use std::io::Write;
    flag.call_once(|| {
        let _ = writeln!(std::io::stderr(), "{line}");
    });
}

/// True when the sandbox can run; otherwise fails under CI=true and skips loudly elsewhere.
fn sandbox_or_skip(test: &str) -> bool {
    static SAID: std::sync::Once = std::sync::Once::new();
    match sandbox_unavailable() {
        None => true,
        Some(why) if in_ci() => panic!("{test}: the userData sandbox cannot run: {why}"),
        Some(why) => {
            loud_once(
                &SAID,
                &format!("SKIP: userData sandbox tests: {why}; run them as root"),
            );
            false
        }
    }
}

fn shellcheck_or_skip() -> bool {
    static PRESENT: OnceLock<bool> = OnceLock::new();
    let present = *PRESENT.get_or_init(|| {
        Command::new("shellcheck")
            .arg("--version")
            .output()
            .is_ok_and(|o| o.status.success())
    });
    if present {
        return true;
    }
    if in_ci() {
        panic!("shellcheck not installed; run .ci/setup-tools");
    }
    static SAID: std::sync::Once = std::sync::Once::new();
    loud_once(&SAID, "SKIP: shellcheck not installed; run .ci/setup-tools");
    false
}

/// One sandbox run: its exit status and everything it left in OUTDIR.
struct Outcome {
    /// Kept so OUTDIR lives as long as the outcome, removed on drop.
    dir: TempDir,
    rc: i32,
    stdout: String,
    stderr: String,
    console: String,
    calls: Vec<Vec<String>>,
    imds: Vec<Value>,
}

impl Outcome {
    fn out(&self) -> PathBuf {
        self.dir.path().join("out")
    }

    /// A file the script wrote under /etc, as it landed in the overlay's upper layer.
    fn etc(&self, rel: &str) -> Option<String> {
        std::fs::read_to_string(self.out().join("etc-upper").join(rel)).ok()
    }

    fn calls_of(&self, command: &str) -> Vec<&Vec<String>> {
        self.calls.iter().filter(|c| c[0] == command).collect()
    }

    fn position(&self, argv: &[&str]) -> Option<usize> {
        self.calls.iter().position(|c| c == argv)
    }

    fn report(&self) -> String {
        format!(
            "exit status {}\n--- stderr ---\n{}\n--- calls.log ---\n{}\n--- imds.log ---\n{}\n--- stdout ---\n{}",
            self.rc,
            self.stderr,
            self.calls
                .iter()
                .map(|c| c.join(" "))
                .collect::<Vec<_>>()
                .join("\n"),
            self.imds
                .iter()
                .map(Value::to_string)
                .collect::<Vec<_>>()
                .join("\n"),
            self.stdout,
        )
    }
}

/// Runs `script` in the sandbox with the given FAKE_* knobs (and nothing else from ours).
fn run_in_sandbox(script: &str, knobs: &[(&str, &str)]) -> Outcome {
    let dir = TempDir::new().expect("temp dir");
    let script_path = dir.path().join("user-data");
    std::fs::write(&script_path, script).unwrap();
    let out = dir.path().join("out");
    let mut cmd = Command::new("bash");
    cmd.arg(runner()).arg(&script_path).arg(&out);
    for (name, _) in std::env::vars() {
        if name.starts_with("FAKE_") {
            cmd.env_remove(name);
        }
    }
    cmd.env("SANDBOX_TIMEOUT", "30");
    for (name, value) in knobs {
        cmd.env(name, value);
    }
    let result = cmd.output().expect("run-userdata.sh runs");
    let rc = result.status.code().unwrap_or(-1);
    let read = |name: &str| std::fs::read_to_string(out.join(name)).unwrap_or_default();
    assert!(
        rc != 64 && rc != 70 && rc != 77,
        "run-userdata.sh could not set up the sandbox (exit {rc}):\n{}\n{}\n{}",
        String::from_utf8_lossy(&result.stderr),
        read("sandbox.log"),
        read("stderr.log"),
    );
    let calls = read("calls.log")
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("calls.log line {l:?}: {e}")))
        .collect();
    let imds = read("imds.log")
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("imds.log line {l:?}: {e}")))
        .collect();
    Outcome {
        rc,
        stdout: read("stdout.log"),
        stderr: read("stderr.log"),
        console: read("console.log"),
        calls,
        imds,
        dir,
    }
}

/// A join configuration as the rotation controller publishes it (ORDER.md's format).
fn store_file(dir: &TempDir, token: &str, expiration: &str) -> String {
    let path = dir.path().join("join-config");
    std::fs::write(
        &path,
        format!("KK_TOKEN={token}\nKK_CA_CERT_HASH={FORGED_CA_HASH}\nKK_EXPIRATION={expiration}\n"),
    )
    .unwrap();
    path.to_str().unwrap().to_owned()
}

const FUTURE: &str = "2099-01-01T00:00:00Z";

fn ssm_argv() -> Vec<String> {
    [
        "aws",
        "ssm",
        "get-parameter",
        "--region",
        "us-east-1",
        "--name",
        SSM_STORE,
        "--with-decryption",
        "--query",
        "Parameter.Value",
        "--output",
        "text",
    ]
    .map(str::to_owned)
    .to_vec()
}

fn secrets_manager_argv() -> Vec<String> {
    [
        "aws",
        "secretsmanager",
        "get-secret-value",
        "--region",
        "us-east-1",
        "--secret-id",
        SM_STORE,
        "--query",
        "SecretString",
        "--output",
        "text",
    ]
    .map(str::to_owned)
    .to_vec()
}

// ---------------------------------------------------------------------------------------
// Assertions

/// Everything a successful boot must have done, exactly.
fn assert_joined(o: &Outcome, class: &NodeClass, mode: Mode, token: &str) {
    // In every mode the pinned CA is the spec's, whatever the store says (finding #12).
    let ca_hash = EXAMPLE_CA_HASH;
    let ctx = format!("EC2NodeClass {} ({mode:?})", class.name);
    assert_eq!(o.rc, 0, "{ctx}: the userData failed\n{}", o.report());

    // Kubelet flags: the exact provider ID Karpenter matches, the unregistered taint, the
    // pool's taints and labels, and --max-pods equal to the EC2NodeClass's spec.kubelet.
    let env = o
        .etc(FLAGS_ENV)
        .unwrap_or_else(|| panic!("{ctx}: /etc/{FLAGS_ENV} not written\n{}", o.report()));
    assert_eq!(
        env,
        format!("KUBELET_EXTRA_ARGS={}\n", class.expected_kubelet_args),
        "{ctx}: /etc/{FLAGS_ENV}"
    );
    let args: Vec<&str> = env
        .trim_end()
        .strip_prefix("KUBELET_EXTRA_ARGS=")
        .unwrap()
        .split(' ')
        .collect();
    let flag = |name: &str| -> Vec<&str> {
        args.iter()
            .filter_map(|a| a.strip_prefix(name))
            .collect::<Vec<_>>()
    };
    assert_eq!(flag("--provider-id="), [PROVIDER_ID], "{ctx}: provider ID");
    let max_pods = class.kubelet["maxPods"].as_i64().unwrap().to_string();
    assert_eq!(
        flag("--max-pods="),
        [max_pods.as_str()],
        "{ctx}: --max-pods must equal spec.kubelet.maxPods"
    );
    assert_eq!(
        o.etc(DROP_IN).as_deref(),
        Some("[Service]\nEnvironmentFile=/etc/kubean-karpenter/kubelet-flags.env\n"),
        "{ctx}: the kubelet drop-in"
    );

    // The join itself, once, after systemd was reloaded and containerd started.
    let join = ["kubeadm", "join", "--config", JOIN_CONFIG];
    // Attack row "token visible in /proc/*/cmdline during the join": the token is on no
    // command line the script ran, and while kubeadm ran no process's cmdline held it (the
    // fake kubeadm looked through /proc of the sandbox's PID namespace).
    for call in &o.calls {
        assert!(
            !call.iter().any(|a| a.contains(token)),
            "{ctx}: the token is on a command line: {call:?}"
        );
    }
    let read_out = |name: &str| std::fs::read_to_string(o.out().join(name)).unwrap_or_default();
    assert_eq!(
        read_out("cmdline-leaks.log"),
        "",
        "{ctx}: token seen in /proc/*/cmdline"
    );
    // kubeadm got it in a 0600 JoinConfiguration under /run, removed after the join.
    assert_eq!(
        read_out("kubeadm-config.mode").trim(),
        "600",
        "{ctx}: join config mode"
    );
    let config = read_out("kubeadm-config.yaml");
    for want in [
        "kind: JoinConfiguration".to_owned(),
        format!("apiServerEndpoint: \"{API_ENDPOINT}\""),
        format!("token: \"{token}\""),
        format!("- \"{ca_hash}\""),
        format!("name: \"{INSTANCE_ID}\""),
    ] {
        assert!(
            config.contains(&want),
            "{ctx}: join config lacks {want:?}:\n{config}"
        );
    }
    assert_eq!(
        read_out("run-files.log").trim(),
        "",
        "{ctx}: files left under /run"
    );
    assert_eq!(
        o.calls_of("kubeadm"),
        [&join.map(str::to_owned).to_vec()],
        "{ctx}: kubeadm calls\n{}",
        o.report()
    );
    let at = |argv: &[&str]| {
        o.position(argv)
            .unwrap_or_else(|| panic!("{ctx}: no `{}` call\n{}", argv.join(" "), o.report()))
    };
    let reload = at(&["systemctl", "daemon-reload"]);
    let containerd = at(&["systemctl", "enable", "--now", "containerd"]);
    let joined = at(&join);
    // kubeadm starts the kubelet but does not enable it; a reboot must bring it back.
    let kubelet = at(&["systemctl", "enable", "kubelet"]);
    assert!(
        kubelet < joined,
        "{ctx}: kubelet enabled after the join\n{}",
        o.report()
    );
    // GPU nodes make nvidia containerd's default runtime before containerd starts.
    let ctk = o.position(&[
        "nvidia-ctk",
        "runtime",
        "configure",
        "--runtime=containerd",
        "--set-as-default",
    ]);
    // containerd is already running when cloud-init runs the userData, and `enable --now`
    // leaves a running unit alone: the nvidia runtime that nvidia-ctk wrote into the config
    // takes effect only after a restart, which the running containerd must then confirm.
    let restart = o.position(&["systemctl", "restart", "containerd"]);
    let crictl_info = o.position(&[
        "crictl",
        "--runtime-endpoint",
        "unix:///run/containerd/containerd.sock",
        "info",
    ]);
    if class.gpu {
        let ctk = ctk.unwrap_or_else(|| panic!("{ctx}: nvidia-ctk not run\n{}", o.report()));
        assert!(
            ctk < containerd,
            "{ctx}: nvidia-ctk after containerd started\n{}",
            o.report()
        );
        let restart = restart.unwrap_or_else(|| {
            panic!(
                "{ctx}: containerd not restarted after nvidia-ctk: the running containerd keeps \
                 its old default runtime\n{}",
                o.report()
            )
        });
        let info = crictl_info.unwrap_or_else(|| {
            panic!(
                "{ctx}: the running containerd's runtime is never checked\n{}",
                o.report()
            )
        });
        assert!(
            ctk < restart && restart < info && info < joined,
            "{ctx}: nvidia-ctk ({ctk}), restart containerd ({restart}), crictl info ({info}) and \
             kubeadm join ({joined}) out of order\n{}",
            o.report()
        );
        assert!(
            o.stderr
                .contains("kubean-karpenter: containerd runs the NVIDIA runtime\n"),
            "{ctx}\n{}",
            o.report()
        );
    } else {
        assert!(
            ctk.is_none(),
            "{ctx}: nvidia-ctk on a CPU node\n{}",
            o.report()
        );
        assert!(
            restart.is_none() && crictl_info.is_none(),
            "{ctx}: a CPU node restarted or queried containerd\n{}",
            o.report()
        );
    }
    assert!(
        reload < containerd && containerd < joined,
        "{ctx}: daemon-reload ({reload}), enable --now containerd ({containerd}) and \
         kubeadm join ({joined}) out of order\n{}",
        o.report()
    );

    // Where the token came from.
    let aws = o.calls_of("aws");
    match mode {
        Mode::Static => assert!(aws.is_empty(), "{ctx}: static mode called aws: {aws:?}"),
        Mode::Ssm => assert_eq!(aws, [&ssm_argv()], "{ctx}: aws calls"),
        Mode::SecretsManager => assert_eq!(aws, [&secrets_manager_argv()], "{ctx}: aws calls"),
    }

    // GPU checks only on GPU classes.
    let nvidia = o.calls_of("nvidia-smi");
    if class.gpu {
        assert_eq!(
            nvidia,
            [&[
                "nvidia-smi",
                "--query-gpu=driver_version",
                "--format=csv,noheader"
            ]
            .map(str::to_owned)
            .to_vec()],
            "{ctx}: nvidia-smi calls"
        );
    } else {
        assert!(nvidia.is_empty(), "{ctx}: a CPU node ran nvidia-smi");
    }

    // IMDSv2 only: a token PUT, then every metadata GET with a valid token.
    assert_imdsv2_only(o, &ctx);

    // The bootstrap token never reaches the console log.
    assert!(
        !o.stderr.contains(token) && !o.console.contains(token),
        "{ctx}: the bootstrap token leaked to stderr or the console"
    );
    assert_eq!(o.console, "", "{ctx}: console output on success");
}

fn assert_imdsv2_only(o: &Outcome, ctx: &str) {
    let field = |e: &Value, k: &str| e[k].as_str().unwrap_or_default().to_owned();
    let puts: Vec<&Value> = o.imds.iter().filter(|e| e["method"] == "PUT").collect();
    assert!(
        puts.iter().any(|e| field(e, "path") == "/latest/api/token"
            && e["status"] == 200
            && field(e, "token") == "issued"),
        "{ctx}: no IMDSv2 token PUT\n{}",
        o.report()
    );
    let gets: Vec<&Value> = o.imds.iter().filter(|e| e["method"] == "GET").collect();
    assert_eq!(
        gets.iter().map(|e| field(e, "path")).collect::<Vec<_>>(),
        [
            "/latest/meta-data/instance-id",
            "/latest/meta-data/placement/availability-zone"
        ],
        "{ctx}: metadata GETs"
    );
    for e in &gets {
        assert!(
            field(e, "token") == "valid" && e["status"] == 200,
            "{ctx}: metadata GET without a valid IMDSv2 token: {e}"
        );
    }
    let tokenless = o.imds.iter().filter(|e| e["token"] == "missing").count();
    assert_eq!(tokenless, 0, "{ctx}: tokenless (IMDSv1) requests");
}

/// A boot that must stop before joining, with this FATAL message.
fn assert_fatal(o: &Outcome, ctx: &str, message: &str) {
    assert_eq!(
        o.rc,
        1,
        "{ctx}: expected the userData to fail\n{}",
        o.report()
    );
    assert!(
        !o.calls
            .iter()
            .any(|c| c[0] == "kubeadm" && c.get(1).is_some_and(|a| a == "join")),
        "{ctx}: kubeadm join ran anyway\n{}",
        o.report()
    );
    let line = format!("kubean-karpenter: FATAL: {message}\n");
    assert!(
        o.stderr.ends_with(&line),
        "{ctx}: stderr does not end with {line:?}\n{}",
        o.report()
    );
    // run-userdata.sh binds /dev/console to console.log where the machine has a console.
    if Path::new("/dev/console").exists() {
        assert_eq!(o.console, line, "{ctx}: the FATAL line on /dev/console");
    }
}

// ---------------------------------------------------------------------------------------
// Static checks

#[test]
fn userdata_parses_with_bash_n_and_is_shellcheck_clean() {
    let shellcheck = shellcheck_or_skip();
    let dir = TempDir::new().unwrap();
    // The three join modes, and ssm with a registry mirror (containerd hosts.toml).
    let mirrored = spec_text(Mode::Ssm).replacen(
        "\n  controller:",
        "\n  registry: {mirror: registry.internal:5000}\n  controller:",
        1,
    );
    let variants = [
        ("ssm", render(Mode::Ssm)),
        ("static", render(Mode::Static)),
        ("secrets-manager", render(Mode::SecretsManager)),
        ("ssm-mirror", render_text(&mirrored, Mode::Ssm)),
    ];
    for (mode, rendered) in variants {
        for class in rendered.classes {
            let path = dir.path().join(format!("{mode}-{}.sh", class.name));
            std::fs::write(&path, &class.user_data).unwrap();
            assert!(
                class.user_data.starts_with("#!/bin/bash\n"),
                "{mode} {}: no #!/bin/bash line",
                class.name
            );
            let syntax = Command::new("bash").arg("-n").arg(&path).output().unwrap();
            assert!(
                syntax.status.success(),
                "{mode} {}: bash -n: {}",
                class.name,
                String::from_utf8_lossy(&syntax.stderr)
            );
            if shellcheck {
                let lint = Command::new("shellcheck")
                    .args(["-s", "bash", "-f", "gcc"])
                    .arg(&path)
                    .output()
                    .unwrap();
                assert!(
                    lint.status.success() && lint.stdout.is_empty(),
                    "{mode} {}: shellcheck -s bash:\n{}",
                    class.name,
                    String::from_utf8_lossy(&lint.stdout)
                );
            }
        }
    }
}

#[test]
fn sandbox_scripts_are_shellcheck_clean() {
    if !shellcheck_or_skip() {
        return;
    }
    let sandbox = repo_root().join("tests/sandbox");
    let lint = Command::new("shellcheck")
        .args(["-x", "-f", "gcc"])
        .arg(sandbox.join("run-userdata.sh"))
        .arg(sandbox.join("lib/record.sh"))
        .args(
            [
                "aws",
                "crictl",
                "kubeadm",
                "nvidia-container-runtime",
                "nvidia-ctk",
                "nvidia-smi",
                "systemctl",
            ]
            .map(|f| sandbox.join("fakebin").join(f)),
        )
        .arg(sandbox.join("lib/containerd.sh"))
        .arg(sandbox.join("fakebin-fast/sleep"))
        .current_dir(&sandbox)
        .output()
        .unwrap();
    assert!(
        lint.status.success() && lint.stdout.is_empty(),
        "shellcheck tests/sandbox:\n{}{}",
        String::from_utf8_lossy(&lint.stdout),
        String::from_utf8_lossy(&lint.stderr)
    );
}

// ---------------------------------------------------------------------------------------
// Successful boots

#[test]
fn ssm_mode_every_node_class_joins_with_the_token_from_ssm() {
    if !sandbox_or_skip("ssm_mode_every_node_class_joins_with_the_token_from_ssm") {
        return;
    }
    let etc_before = Path::new("/etc/kubean-karpenter").exists();
    let store = TempDir::new().unwrap();
    let config = store_file(&store, STORE_TOKEN, FUTURE);
    for class in render(Mode::Ssm).classes {
        let o = run_in_sandbox(&class.user_data, &[("FAKE_JOIN_CONFIG", &config)]);
        assert_joined(&o, &class, Mode::Ssm, STORE_TOKEN);
    }
    assert_eq!(
        Path::new("/etc/kubean-karpenter").exists(),
        etc_before,
        "the sandbox wrote to the real /etc"
    );
}

/// The attack (finding #12): whoever can write the join store publishes a valid token with
/// the hash of a CA they control. The node must still pin the spec's CA, baked into its
/// userData at render time, in both store modes; the forged hash appears nowhere in the join.
#[test]
fn a_store_writer_cannot_make_a_node_trust_another_ca() {
    if !sandbox_or_skip("a_store_writer_cannot_make_a_node_trust_another_ca") {
        return;
    }
    let store = TempDir::new().unwrap();
    let config = store_file(&store, STORE_TOKEN, FUTURE);
    assert!(
        std::fs::read_to_string(&config)
            .unwrap()
            .contains(FORGED_CA_HASH)
    );
    for mode in [Mode::Ssm, Mode::SecretsManager] {
        let rendered = render(mode);
        let class = &rendered.classes[0];
        let o = run_in_sandbox(&class.user_data, &[("FAKE_JOIN_CONFIG", &config)]);
        assert_eq!(o.rc, 0, "{mode:?}: {}", o.report());
        let joined = std::fs::read_to_string(o.out().join("kubeadm-config.yaml")).unwrap();
        assert!(
            joined.contains(&format!("- \"{EXAMPLE_CA_HASH}\"")),
            "{mode:?}: the join does not pin the spec's CA:\n{joined}"
        );
        assert!(
            !joined.contains(FORGED_CA_HASH),
            "{mode:?}: the node trusts the CA hash a store writer chose:\n{joined}"
        );
    }
}

#[test]
fn static_mode_every_node_class_joins_with_the_spec_token_and_computed_ca_hash() {
    if !sandbox_or_skip(
        "static_mode_every_node_class_joins_with_the_spec_token_and_computed_ca_hash",
    ) {
        return;
    }
    // The constant is what openssl computes for the example CA (kubeadm's formula: SHA-256 of
    // the DER SubjectPublicKeyInfo).
    match openssl_ca_hash() {
        Some(hash) => assert_eq!(hash, EXAMPLE_CA_HASH, "openssl's hash of the example CA"),
        None => {
            static SAID: std::sync::Once = std::sync::Once::new();
            loud_once(
                &SAID,
                "SKIP: openssl not installed: the example CA hash is not cross-checked",
            );
        }
    }
    for class in render(Mode::Static).classes {
        // No join configuration in any store: static mode must not need one.
        let o = run_in_sandbox(&class.user_data, &[]);
        assert_joined(&o, &class, Mode::Static, STATIC_TOKEN);
    }
}

fn openssl_ca_hash() -> Option<String> {
    use std::io::Write;
    use std::process::Stdio;
    let cluster = render(Mode::Static).spec;
    let pem = kk_render::inline_ca_pem(&cluster).unwrap().unwrap();
    let pipe = |args: &[&str], input: &[u8]| -> Option<Vec<u8>> {
        let mut child = Command::new("openssl")
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .ok()?;
        child.stdin.take().unwrap().write_all(input).unwrap();
        let out = child.wait_with_output().unwrap();
        assert!(
            out.status.success(),
            "openssl {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        Some(out.stdout)
    };
    let pubkey = pipe(&["x509", "-noout", "-pubkey"], &pem)?;
    let der = pipe(&["pkey", "-pubin", "-outform", "der"], &pubkey)?;
    let digest = pipe(&["dgst", "-sha256", "-r"], &der)?;
    let hex = String::from_utf8(digest).unwrap();
    Some(format!("sha256:{}", hex.split_whitespace().next().unwrap()))
}

#[test]
fn secrets_manager_mode_every_node_class_joins_with_the_token_from_the_secret() {
    if !sandbox_or_skip(
        "secrets_manager_mode_every_node_class_joins_with_the_token_from_the_secret",
    ) {
        return;
    }
    let store = TempDir::new().unwrap();
    let config = store_file(&store, STORE_TOKEN, FUTURE);
    for class in render(Mode::SecretsManager).classes {
        let o = run_in_sandbox(&class.user_data, &[("FAKE_JOIN_CONFIG", &config)]);
        assert_joined(&o, &class, Mode::SecretsManager, STORE_TOKEN);
    }
}

#[test]
fn cpu_node_class_needs_no_nvidia_tools() {
    if !sandbox_or_skip("cpu_node_class_needs_no_nvidia_tools") {
        return;
    }
    let store = TempDir::new().unwrap();
    let config = store_file(&store, STORE_TOKEN, FUTURE);
    let rendered = render(Mode::Ssm);
    let class = rendered
        .classes
        .iter()
        .find(|c| c.name == "kubean-aws-cpu")
        .unwrap();
    let o = run_in_sandbox(
        &class.user_data,
        &[
            ("FAKE_JOIN_CONFIG", &config),
            ("FAKE_NO_NVIDIA", "1"),
            ("FAKE_NO_NVIDIA_RUNTIME", "1"),
        ],
    );
    assert_joined(&o, class, Mode::Ssm, STORE_TOKEN);
}

// ---------------------------------------------------------------------------------------
// Boots that must stop before kubeadm join

fn class<'a>(rendered: &'a Rendered, name: &str) -> &'a NodeClass {
    rendered.classes.iter().find(|c| c.name == name).unwrap()
}

#[test]
fn expired_token_in_the_store_is_fatal() {
    if !sandbox_or_skip("expired_token_in_the_store_is_fatal") {
        return;
    }
    let store = TempDir::new().unwrap();
    let config = store_file(&store, STORE_TOKEN, "2020-01-01T00:00:00Z");
    let rendered = render(Mode::Ssm);
    let o = run_in_sandbox(
        &class(&rendered, "kubean-aws-cpu").user_data,
        &[("FAKE_JOIN_CONFIG", &config)],
    );
    assert_fatal(
        &o,
        "expired token",
        "the bootstrap token in /kubean-karpenter/demo/join expired at 2020-01-01T00:00:00Z: \
         is the token rotation controller running?",
    );
}

#[test]
fn unreadable_store_is_fatal_after_eight_attempts_with_backoff() {
    if !sandbox_or_skip("unreadable_store_is_fatal_after_eight_attempts_with_backoff") {
        return;
    }
    for (mode, argv, message) in [
        (
            Mode::Ssm,
            ssm_argv(),
            "cannot read the join configuration from SSM parameter /kubean-karpenter/demo/join \
             (the node role needs ssm:GetParameter on it)",
        ),
        (
            Mode::SecretsManager,
            secrets_manager_argv(),
            "cannot read the join configuration from Secrets Manager secret \
             kubean-karpenter/demo/join (the node role needs secretsmanager:GetSecretValue on it)",
        ),
    ] {
        let rendered = render(mode);
        // FAKE_JOIN_CONFIG unset: the fake aws answers AccessDeniedException. fakebin-fast's
        // sleep returns at once, so the 1+2+4+8+16+30+30 s of backoff cost nothing.
        let o = run_in_sandbox(
            &class(&rendered, "kubean-aws-cpu").user_data,
            &[("FAKE_FAST_SLEEP", "1")],
        );
        let ctx = format!("unreadable store ({mode:?})");
        assert_fatal(&o, &ctx, message);
        assert_eq!(o.calls_of("aws"), vec![&argv; 8], "{ctx}: aws attempts");
        let sleeps: Vec<&str> = o.calls_of("sleep").iter().map(|c| c[1].as_str()).collect();
        assert_eq!(
            sleeps,
            ["1", "2", "4", "8", "16", "30", "30"],
            "{ctx}: backoff"
        );
        assert!(
            o.stderr.contains("AccessDeniedException"),
            "{ctx}: aws's error is shown"
        );
    }
}

#[test]
fn malformed_token_in_the_store_is_fatal() {
    if !sandbox_or_skip("malformed_token_in_the_store_is_fatal") {
        return;
    }
    let store = TempDir::new().unwrap();
    let config = store_file(&store, "ABCDEF.0123456789abcdef", FUTURE);
    let rendered = render(Mode::Ssm);
    let o = run_in_sandbox(
        &class(&rendered, "kubean-aws-gpu").user_data,
        &[("FAKE_JOIN_CONFIG", &config)],
    );
    assert_fatal(
        &o,
        "malformed token",
        "malformed bootstrap token (expected [a-z0-9]{6}.[a-z0-9]{16})",
    );
    assert!(
        o.calls_of("systemctl").is_empty(),
        "containerd was started for a node that cannot join"
    );
}

#[test]
fn gpu_node_with_another_driver_version_is_fatal() {
    if !sandbox_or_skip("gpu_node_with_another_driver_version_is_fatal") {
        return;
    }
    let store = TempDir::new().unwrap();
    let config = store_file(&store, STORE_TOKEN, FUTURE);
    let rendered = render(Mode::Ssm);
    let pinned = &rendered.spec.spec.gpu.as_ref().unwrap().driver_version;
    assert_eq!(pinned, "550.127.05");
    for class in rendered.classes.iter().filter(|c| c.gpu) {
        let o = run_in_sandbox(
            &class.user_data,
            &[
                ("FAKE_JOIN_CONFIG", &config),
                ("FAKE_NVIDIA_DRIVER", "535.183.01"),
            ],
        );
        assert_fatal(
            &o,
            &format!("{}: wrong driver", class.name),
            "NVIDIA driver 535.183.01, but the spec pins 550.127.05: rebuild the AMI or update \
             spec.gpu.driverVersion",
        );
        assert!(
            o.calls_of("aws").is_empty(),
            "GPU checks come before the store"
        );
    }
}

#[test]
fn gpu_node_without_nvidia_smi_is_fatal() {
    if !sandbox_or_skip("gpu_node_without_nvidia_smi_is_fatal") {
        return;
    }
    let store = TempDir::new().unwrap();
    let config = store_file(&store, STORE_TOKEN, FUTURE);
    let rendered = render(Mode::Ssm);
    for class in rendered.classes.iter().filter(|c| c.gpu) {
        let o = run_in_sandbox(
            &class.user_data,
            &[("FAKE_JOIN_CONFIG", &config), ("FAKE_NO_NVIDIA", "1")],
        );
        assert_fatal(
            &o,
            &format!("{}: no nvidia-smi", class.name),
            "nvidia-smi not found: the GPU AMI has no NVIDIA driver",
        );
    }
}

#[test]
fn gpu_node_whose_driver_does_not_answer_or_lacks_the_container_runtime_is_fatal() {
    if !sandbox_or_skip(
        "gpu_node_whose_driver_does_not_answer_or_lacks_the_container_runtime_is_fatal",
    ) {
        return;
    }
    let store = TempDir::new().unwrap();
    let config = store_file(&store, STORE_TOKEN, FUTURE);
    let rendered = render(Mode::Ssm);
    let gpu = class(&rendered, "kubean-aws-gpu");
    let o = run_in_sandbox(
        &gpu.user_data,
        &[("FAKE_JOIN_CONFIG", &config), ("FAKE_NVIDIA_FAIL", "1")],
    );
    assert_fatal(
        &o,
        "nvidia-smi fails",
        "nvidia-smi cannot talk to the driver",
    );
    let o = run_in_sandbox(
        &gpu.user_data,
        &[
            ("FAKE_JOIN_CONFIG", &config),
            ("FAKE_NO_NVIDIA_RUNTIME", "1"),
        ],
    );
    assert_fatal(
        &o,
        "no nvidia-container-runtime",
        "nvidia-container-runtime not found: the GPU AMI lacks the NVIDIA container runtime",
    );
}

/// Issue 11 item 2 / the seed's "The GPU AMI is not configured with the NVIDIA container
/// runtime": when nvidia-ctk cannot make nvidia containerd's default runtime (here the AMI has no
/// nvidia-ctk and its containerd config names runc), the restarted containerd still runs runc
/// and the boot stops before joining instead of leaving a node that never advertises GPUs.
#[test]
fn gpu_node_whose_containerd_does_not_run_the_nvidia_runtime_is_fatal() {
    if !sandbox_or_skip("gpu_node_whose_containerd_does_not_run_the_nvidia_runtime_is_fatal") {
        return;
    }
    let store = TempDir::new().unwrap();
    let config = store_file(&store, STORE_TOKEN, FUTURE);
    let rendered = render(Mode::Ssm);
    for class in rendered.classes.iter().filter(|c| c.gpu) {
        let o = run_in_sandbox(
            &class.user_data,
            &[
                ("FAKE_JOIN_CONFIG", &config),
                ("FAKE_HIDE", "nvidia-ctk"),
                ("FAKE_FAST_SLEEP", "1"),
            ],
        );
        assert_fatal(
            &o,
            &format!("{}: containerd keeps runc", class.name),
            "containerd does not run nvidia as its default runtime: the NVIDIA device plugin \
             would find no GPU",
        );
        assert_eq!(
            o.calls_of("crictl").len(),
            6,
            "{}: six attempts to see the runtime\n{}",
            class.name,
            o.report()
        );
    }
}

// ---------------------------------------------------------------------------------------
// The sandbox itself

/// The seed's userData read the instance ID with IMDSv1. Karpenter launches with
/// httpTokens=required, where that request gets 401: the seed's node would register with a
/// provider ID built from an HTML error page and never match its NodeClaim.
#[test]
fn seed_imdsv1_request_gets_401_instead_of_an_instance_id() {
    if !sandbox_or_skip("seed_imdsv1_request_gets_401_instead_of_an_instance_id") {
        return;
    }
    let seed = "#!/bin/bash\n\
        # The seed's line:\n\
        INSTANCE_ID=$(curl -s http://169.254.169.254/latest/meta-data/instance-id)\n\
        printf '%s' \"$INSTANCE_ID\"\n\
        # Control: the same read with an IMDSv2 token works.\n\
        TOKEN=$(curl -s -X PUT http://169.254.169.254/latest/api/token \
          -H 'X-aws-ec2-metadata-token-ttl-seconds: 60')\n\
        curl -s -H \"X-aws-ec2-metadata-token: $TOKEN\" \
          http://169.254.169.254/latest/meta-data/instance-id >&2\n";
    let o = run_in_sandbox(seed, &[]);
    assert_eq!(o.rc, 0, "{}", o.report());
    assert!(
        !o.stdout.starts_with("i-") && o.stdout.contains("<title>401 - Unauthorized</title>"),
        "the seed's IMDSv1 read returned {:?}",
        o.stdout
    );
    assert_eq!(o.stderr, INSTANCE_ID, "the IMDSv2 control read");
    let entries: Vec<(String, String, i64)> = o
        .imds
        .iter()
        .map(|e| {
            (
                format!(
                    "{} {}",
                    e["method"].as_str().unwrap(),
                    e["path"].as_str().unwrap()
                ),
                e["token"].as_str().unwrap().to_owned(),
                e["status"].as_i64().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        entries,
        [
            (
                "GET /latest/meta-data/instance-id".into(),
                "missing".into(),
                401
            ),
            ("PUT /latest/api/token".into(), "issued".into(), 200),
            (
                "GET /latest/meta-data/instance-id".into(),
                "valid".into(),
                200
            ),
        ]
    );
}

/// The script sees only the sandbox's loopback (no route anywhere else), the fake IMDS
/// address on it, and an /etc whose writes stay out of the real one.
#[test]
fn sandbox_has_no_network_but_loopback_and_keeps_etc_writes() {
    if !sandbox_or_skip("sandbox_has_no_network_but_loopback_and_keeps_etc_writes") {
        return;
    }
    let probe = "#!/bin/bash\nset -eu\n\
        ip -o link show | awk -F': ' '{print $2}'\n\
        ip -o -4 addr show | awk '{print $4}'\n\
        echo \"routes=[$(ip route show)]\"\n\
        echo sandbox-probe >/etc/kk-sandbox-probe\n\
        test -d /etc/systemd/system && echo has-systemd-dir\n\
        echo \"path=$PATH\"\n";
    let o = run_in_sandbox(probe, &[]);
    assert_eq!(o.rc, 0, "{}", o.report());
    let fakebin = repo_root().join("tests/sandbox/fakebin");
    let fakebin = fakebin.canonicalize().unwrap();
    let stdout = o.stdout.replace(fakebin.to_str().unwrap(), "FAKEBIN");
    assert_eq!(
        stdout,
        "lo\n127.0.0.1/8\n169.254.169.254/32\nroutes=[]\nhas-systemd-dir\n\
         path=FAKEBIN:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin\n"
    );
    assert_eq!(
        o.etc("kk-sandbox-probe").as_deref(),
        Some("sandbox-probe\n")
    );
    assert!(
        !Path::new("/etc/kk-sandbox-probe").exists(),
        "the sandbox wrote to the real /etc"
    );
}

/// The assertions above must catch a broken userData: each mutation of the rendered script
/// (one a reviewer could plausibly make) has to make `assert_joined` fail.
#[test]
fn assertions_reject_broken_userdata() {
    if !sandbox_or_skip("assertions_reject_broken_userdata") {
        return;
    }
    let store = TempDir::new().unwrap();
    let config = store_file(&store, STORE_TOKEN, FUTURE);
    let rendered = render(Mode::Ssm);
    let gpu = class(&rendered, "kubean-aws-gpu");
    type Mutation = (&'static str, &'static str, &'static str);
    let mutations: [Mutation; 7] = [
        (
            "provider ID without the zone",
            r#"PROVIDER_ID="aws:///${AWS_AZ}/${INSTANCE_ID}""#,
            r#"PROVIDER_ID="aws:///${INSTANCE_ID}""#,
        ),
        ("kubelet max-pods drift", "--max-pods=110", "--max-pods=58"),
        (
            "no unregistered taint",
            "karpenter.sh/unregistered:NoExecute,",
            "",
        ),
        (
            "containerd started after the join",
            "systemctl enable --now containerd\n",
            "",
        ),
        (
            "containerd not restarted after nvidia-ctk (the check would fail the boot)",
            "systemctl restart containerd || fail",
            "true || fail",
        ),
        (
            "an extra IMDSv1 read",
            "PROVIDER_ID=",
            "curl -s \"$IMDS/latest/meta-data/local-ipv4\" >/dev/null || true\nPROVIDER_ID=",
        ),
        (
            "token echoed to the console log",
            "kubeadm join ",
            "log \"token $TOKEN\"\nkubeadm join ",
        ),
    ];
    for (what, from, to) in mutations {
        assert!(
            gpu.user_data.contains(from),
            "mutation {what:?}: the userData no longer contains {from:?}; update this test"
        );
        let mut script = gpu.user_data.replacen(from, to, 1);
        if what == "containerd started after the join" {
            script.push_str("systemctl enable --now containerd\n");
        }
        let o = run_in_sandbox(
            &script,
            &[("FAKE_JOIN_CONFIG", &config), ("FAKE_FAST_SLEEP", "1")],
        );
        let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            assert_joined(&o, gpu, Mode::Ssm, STORE_TOKEN)
        }))
        .is_err();
        assert!(caught, "mutation {what:?} was not caught\n{}", o.report());
    }
}

/// `registry.mirror`: before joining, every node class writes containerd's hosts.toml for each
/// public registry the bundle pulls from, sending pulls to the mirror; the join still happens.
#[test]
fn with_a_mirror_every_node_writes_containerd_hosts_toml_and_joins() {
    if !sandbox_or_skip("with_a_mirror_every_node_writes_containerd_hosts_toml_and_joins") {
        return;
    }
    let text = spec_text(Mode::Ssm).replacen(
        "\n  controller:",
        "\n  registry: {mirror: registry.internal:5000}\n  controller:",
        1,
    );
    assert!(text.contains("registry.internal:5000"));
    let rendered = render_text(&text, Mode::Ssm);
    let store = TempDir::new().unwrap();
    let config = store_file(&store, STORE_TOKEN, FUTURE);
    for class in &rendered.classes {
        let o = run_in_sandbox(&class.user_data, &[("FAKE_JOIN_CONFIG", &config)]);
        assert_joined(&o, class, Mode::Ssm, STORE_TOKEN);
        for (registry, server) in [
            ("registry.k8s.io", "https://registry.k8s.io"),
            ("public.ecr.aws", "https://public.ecr.aws"),
            ("nvcr.io", "https://nvcr.io"),
            ("docker.io", "https://registry-1.docker.io"),
            ("ghcr.io", "https://ghcr.io"),
        ] {
            assert_eq!(
                o.etc(&format!("containerd/certs.d/{registry}/hosts.toml")).as_deref(),
                Some(
                    format!(
                        "server = \"{server}\"\n\n[host.\"https://registry.internal:5000\"]\n  capabilities = [\"pull\", \"resolve\"]\n"
                    )
                    .as_str()
                ),
                "{}: {registry}\n{}",
                class.name,
                o.report()
            );
        }
    }
    // Without a mirror, nothing is written there.
    let plain = render(Mode::Ssm);
    let o = run_in_sandbox(
        &class(&plain, "kubean-aws-cpu").user_data,
        &[("FAKE_JOIN_CONFIG", &config)],
    );
    assert!(
        o.etc("containerd/certs.d/registry.k8s.io/hosts.toml")
            .is_none()
    );
}

/// `localStorage: raid0` (the example's training class). The sandbox's kernel has no md
/// (software RAID) driver and cannot load one, so no array can be built here, loop devices or
/// not: mdadm, mkfs and the userData's mounts are recording fakes (fakebin/), and the test
/// checks what the script asks for and in which order, from the fake lsblk's disk list on.
#[test]
fn local_nvme_becomes_a_raid0_under_the_kubelet_and_containerd_roots_before_they_start() {
    if !sandbox_or_skip(
        "local_nvme_becomes_a_raid0_under_the_kubelet_and_containerd_roots_before_they_start",
    ) {
        return;
    }
    let rendered = render(Mode::Ssm);
    let training = class(&rendered, "kubean-aws-training");
    let store = TempDir::new().unwrap();
    let config = store_file(&store, STORE_TOKEN, FUTURE);
    let o = run_in_sandbox(
        &training.user_data,
        &[
            ("FAKE_JOIN_CONFIG", &config),
            ("FAKE_INSTANCE_STORE", "nvme1n1 nvme2n1"),
        ],
    );
    assert_joined(&o, training, Mode::Ssm, STORE_TOKEN);
    let ctx = o.report();
    let create = [
        "mdadm",
        "--create",
        "/dev/md/kubean-local",
        "--level=0",
        "--raid-devices=2",
        "--force",
        "--run",
        "/dev/nvme1n1",
        "/dev/nvme2n1",
    ];
    let step = |argv: &[&str]| {
        o.position(argv)
            .unwrap_or_else(|| panic!("no call {argv:?}\n{ctx}"))
    };
    let created = step(&create);
    let formatted = step(&["mkfs.xfs", "-f", "/dev/md/kubean-local"]);
    let stopped = step(&["systemctl", "stop", "containerd"]);
    let mounted = step(&[
        "mount",
        "-t",
        "xfs",
        "-o",
        "defaults,noatime",
        "/dev/md/kubean-local",
        "/mnt/kubean-local",
    ]);
    let kubelet = step(&[
        "mount",
        "--bind",
        "/mnt/kubean-local/var/lib/kubelet",
        "/var/lib/kubelet",
    ]);
    let containerd = step(&[
        "mount",
        "--bind",
        "/mnt/kubean-local/var/lib/containerd",
        "/var/lib/containerd",
    ]);
    let started = step(&["systemctl", "enable", "--now", "containerd"]);
    let joined = o
        .calls
        .iter()
        .position(|c| c[0] == "kubeadm")
        .expect("kubeadm ran");
    assert!(
        created < formatted
            && formatted < stopped
            && stopped < mounted
            && mounted < kubelet
            && kubelet < containerd
            && containerd < started
            && started < joined,
        "order: array, format, stop containerd, mount, bind the roots, start containerd, join\n{ctx}"
    );
    // The EBS root volume is never part of the array.
    assert!(
        !o.calls_of("mdadm")
            .iter()
            .any(|c| c.iter().any(|a| a == "/dev/nvme0n1"))
    );
    let fstab = o.etc("fstab").unwrap_or_default();
    for line in [
        "/dev/md/kubean-local /mnt/kubean-local xfs defaults,noatime,nofail 0 2",
        "/mnt/kubean-local/var/lib/kubelet /var/lib/kubelet none bind,nofail 0 0",
        "/mnt/kubean-local/var/lib/containerd /var/lib/containerd none bind,nofail 0 0",
    ] {
        assert!(
            fstab.lines().any(|l| l == line),
            "fstab lacks {line:?}:\n{fstab}"
        );
    }
    assert!(
        o.etc("mdadm.conf")
            .is_some_and(|c| c.contains("ARRAY /dev/md/kubean-local")),
        "the array is not in /etc/mdadm.conf"
    );

    // Without mkfs.xfs (an Ubuntu image), ext4.
    let o = run_in_sandbox(
        &training.user_data,
        &[
            ("FAKE_JOIN_CONFIG", &config),
            ("FAKE_INSTANCE_STORE", "nvme1n1"),
            ("FAKE_HIDE", "mkfs.xfs"),
        ],
    );
    assert_joined(&o, training, Mode::Ssm, STORE_TOKEN);
    assert!(
        o.position(&["mkfs.ext4", "-F", "-q", "/dev/md/kubean-local"])
            .is_some(),
        "{}",
        o.report()
    );

    // A type without instance store: no array, the roots stay, the node still joins.
    let o = run_in_sandbox(&training.user_data, &[("FAKE_JOIN_CONFIG", &config)]);
    assert_joined(&o, training, Mode::Ssm, STORE_TOKEN);
    assert!(o.calls_of("mdadm").is_empty() && o.calls_of("mount").is_empty());
    assert!(
        o.stderr.contains("no instance-store NVMe disk"),
        "{}",
        o.report()
    );

    // mdadm failing is fatal, before anything joins.
    let o = run_in_sandbox(
        &training.user_data,
        &[
            ("FAKE_JOIN_CONFIG", &config),
            ("FAKE_INSTANCE_STORE", "nvme1n1"),
            ("FAKE_MDADM_RC", "1"),
        ],
    );
    assert_fatal(
        &o,
        "mdadm fails",
        "mdadm could not build the RAID0 of /dev/nvme1n1",
    );

    // Classes without localStorage never touch the disks.
    for name in ["gpu", "kubean-aws-cpu", "kubean-aws-gpu"] {
        assert!(
            !class(&rendered, name).user_data.contains("mdadm"),
            "{name}"
        );
    }
}
