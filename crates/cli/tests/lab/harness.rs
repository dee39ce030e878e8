//! Harness for the end-to-end tests on the lab (`testbed/lab up`): the whole system on one
//! machine — real apiserver, controller-manager, scheduler, Karpenter controller, AWS CCM,
//! kubeadm and kubelets on moto (testbed/README.md, "The lab").
//!
//! The labs in `KK_LAB_ENV` (one env file, or several separated by `:`; CI runs two side by
//! side) serve the tests of the binary, each lab one test at a time (`Lab::require` waits for a
//! free one and keeps it for the whole test); each test starts from a lab without NodePools,
//! NodeClaims or workloads.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::{Condvar, Mutex, OnceLock};
use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::Client;
use kube::api::{Api, DeleteParams, DynamicObject, ListParams, Patch, PatchParams};
use kube::core::{ApiResource, GroupVersionKind};
use serde_json::{Value, json};

/// Why the labs cannot serve tests any more (a daemon of one died, or tests failed in a row):
/// every later test fails at once with this reason instead of waiting out its own timeouts.
static BROKEN: Mutex<Option<String>> = Mutex::new(None);
static LIVE_PANICS: std::sync::Once = std::sync::Once::new();

/// One lab of `KK_LAB_ENV` and what the tests know of it.
struct Slot {
    /// Its env file (`testbed/lab up` writes `<state>/env`).
    env: PathBuf,
    /// A test holds it.
    busy: bool,
    /// The next deploy restarts Karpenter instead of keeping the one running (`testbed/lab
    /// karpenter` keeps it when its settings are the same): set by the reset after a test that
    /// left marks in Karpenter's memory ([`Lab::karpenter_remembers`]), by turning a fault on
    /// (for a deploy after it), and by a failed test. The first deploy of a run restarts it
    /// too: an earlier run's Karpenter may still be running.
    restart_karpenter: bool,
    /// This test left marks in Karpenter's memory; the next reset sets `restart_karpenter`.
    karpenter_remembers: bool,
}

/// The labs, and a signal for the tests waiting for one.
struct Pool {
    slots: Mutex<Vec<Slot>>,
    freed: Condvar,
}

fn pool() -> &'static Pool {
    static POOL: OnceLock<Pool> = OnceLock::new();
    POOL.get_or_init(|| {
        let list = std::env::var_os("KK_LAB_ENV")
            .map(|v| std::env::split_paths(&v).collect::<Vec<_>>())
            .filter(|paths| !paths.is_empty())
            .unwrap_or_else(|| vec![repo().join(".lab/env")]);
        let slots = list
            .into_iter()
            .map(|env| Slot {
                env,
                busy: false,
                restart_karpenter: true,
                karpenter_remembers: false,
            })
            .collect();
        Pool {
            slots: Mutex::new(slots),
            freed: Condvar::new(),
        }
    })
}

fn slots() -> std::sync::MutexGuard<'static, Vec<Slot>> {
    pool().slots.lock().unwrap_or_else(|e| e.into_inner())
}

/// A test's hold on one lab of the pool, given back when the test ends.
struct Turn {
    slot: usize,
    /// The lab's env file; its state folder is the folder it is in.
    env_file: PathBuf,
}

impl Turn {
    /// `change` applied to what the tests know of this lab.
    fn update<R>(&self, change: impl FnOnce(&mut Slot) -> R) -> R {
        change(&mut slots()[self.slot])
    }
}

impl Drop for Turn {
    fn drop(&mut self) {
        self.update(|slot| slot.busy = false);
        pool().freed.notify_all();
    }
}

/// What a test needs of its lab beyond the common set-up.
#[derive(Clone, Copy, PartialEq)]
enum Needs {
    Any,
    /// The API server asks aws-iam-authenticator (only lab 1 runs it: `testbed/lab`).
    TokenWebhook,
}

/// Waits for a free lab of the pool that serves `needs` (its env file readable) and takes it;
/// `None` when no lab of the pool is running.
fn take_lab(test: &str, needs: Needs) -> Option<(Turn, Env)> {
    let mut slots = slots();
    loop {
        let mut running = false;
        for (i, slot) in slots.iter_mut().enumerate() {
            let Some(env) = std::fs::read_to_string(&slot.env)
                .ok()
                .map(|t| parse_env(&t))
            else {
                continue;
            };
            let serves = needs == Needs::Any
                || env
                    .iter()
                    .any(|(k, v)| k == "KK_LAB_TOKEN_WEBHOOK" && v == "1");
            running |= serves;
            if serves && !slot.busy {
                slot.busy = true;
                let turn = Turn {
                    slot: i,
                    env_file: slot.env.clone(),
                };
                return Some((turn, env));
            }
        }
        if !running {
            if needs == Needs::TokenWebhook && slots.iter().any(|s| s.env.exists()) {
                panic!(
                    "{test}: no lab of KK_LAB_ENV runs the token webhook (lab 1 does: testbed/lab up)"
                );
            }
            return None;
        }
        slots = pool().freed.wait(slots).unwrap_or_else(|e| e.into_inner());
    }
}
/// Lab tests that failed in a row, and the first one's message: after
/// [`FAILURES_BEFORE_GIVING_UP`] the lab is taken for broken, so the binary ends (and prints
/// every failure) within CI's time instead of each test waiting out its own timeouts.
static FAILED_IN_A_ROW: Mutex<(usize, Option<String>)> = Mutex::new((0, None));
const FAILURES_BEFORE_GIVING_UP: usize = 4;

/// A line on the test binary's real stderr, past libtest's capture: CI shows only the tail
/// of a run it stopped, and captured output is printed only when the binary finishes.
pub fn live(line: &str) {
    use std::io::Write;
    let _ = writeln!(std::io::stderr(), "{line}");
}

/// The GPU Operator's device plugin DaemonSet (in `gpu-operator`), which lab_gpu_sharing
/// stands in for and reset removes.
pub const OPERATOR_DEVICE_PLUGIN_DAEMONSET: &str = "nvidia-device-plugin-daemonset";

/// The lab spec's SSM join store (`join.storeName`).
pub const JOIN_STORE: &str = "/kubean-karpenter/lab/join";

/// How many of the lab spec's join stores exist: the SSM parameter (mode ssm) and the Secrets
/// Manager secret (mode secrets-manager, the default name). `DELETE_STORES` removes both.
const STORES_WITH_A_TOKEN: &str = "sm = boto3.client('secretsmanager')
n = len(ssm.get_parameters(Names=['/kubean-karpenter/lab/join'])['Parameters'])
n += len(sm.list_secrets(Filters=[{'Key': 'name', 'Values': ['kubean-karpenter/lab/join']}])['SecretList'])
print(n)";
const DELETE_STORES: &str = "sm = boto3.client('secretsmanager')
try:
    ssm.delete_parameter(Name='/kubean-karpenter/lab/join')
except ssm.exceptions.ParameterNotFound:
    pass
try:
    sm.delete_secret(SecretId='kubean-karpenter/lab/join', ForceDeleteWithoutRecovery=True)
except sm.exceptions.ResourceNotFoundException:
    pass";

/// `ids`: Karpenter's instances that are pending or running (the start of the two scripts below).
macro_rules! karpenter_instance_ids {
    () => {
        "ids = [i['InstanceId']
       for page in ec2.get_paginator('describe_instances').paginate(
           Filters=[{'Name': 'tag-key', 'Values': ['karpenter.sh/nodepool']},
                    {'Name': 'instance-state-name', 'Values': ['pending', 'running']}])
       for r in page['Reservations'] for i in r['Instances']]
"
    };
}
const TERMINATE_LEAKED: &str = concat!(
    karpenter_instance_ids!(),
    "if ids:\n    ec2.terminate_instances(InstanceIds=ids)"
);
/// Karpenter's instances that are pending or running, comma-separated.
const LIVE_INSTANCES: &str = concat!(karpenter_instance_ids!(), "print(', '.join(ids))");

fn release_finalizers() -> Patch<Value> {
    Patch::Merge(json!({"metadata": {"finalizers": null}}))
}

pub use kk_testkit::repo;

pub struct Lab {
    turn: Turn,
    pub env: Vec<(String, String)>,
    pub client: Client,
    pub rt: tokio::runtime::Runtime,
    pub dir: tempfile::TempDir,
    started: Instant,
    /// The test's name and when it got the lab, for the closing line on stderr.
    test: String,
    began: Instant,
    phases: Vec<(String, Duration)>,
}

/// A lab's env file: its `export KEY=VALUE` lines.
type Env = Vec<(String, String)>;

fn parse_env(text: &str) -> Env {
    text.lines()
        .filter_map(|l| l.trim().strip_prefix("export "))
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.to_owned(), v.trim_matches(['"', '\'']).to_owned()))
        .collect()
}

impl Lab {
    /// A running lab, reset for this test; `None` (skipped, said loudly) without one,
    /// a failure under CI=true.
    pub fn require(test: &str) -> Option<Lab> {
        Lab::require_serving(test, Needs::Any)
    }

    /// [`Lab::require`] for a test that runs aws-iam-authenticator: lab 1.
    pub fn require_token_webhook(test: &str) -> Option<Lab> {
        Lab::require_serving(test, Needs::TokenWebhook)
    }

    fn require_serving(test: &str, needs: Needs) -> Option<Lab> {
        LIVE_PANICS.call_once(|| {
            let default = std::panic::take_hook();
            std::panic::set_hook(Box::new(move |info| {
                let thread = std::thread::current();
                let line = format!("LAB TEST FAILED {}: {info}", thread.name().unwrap_or("?"));
                live(&line);
                let mut failed = FAILED_IN_A_ROW.lock().unwrap_or_else(|e| e.into_inner());
                failed.0 += 1;
                failed.1.get_or_insert(line);
                if failed.0 >= FAILURES_BEFORE_GIVING_UP {
                    let mut broken = BROKEN.lock().unwrap_or_else(|e| e.into_inner());
                    broken.get_or_insert_with(|| {
                        format!(
                            "{} lab tests failed in a row; the first: {}",
                            failed.0,
                            failed.1.as_deref().unwrap_or("")
                        )
                    });
                }
                default(info);
            }));
        });
        let Some((turn, env)) = take_lab(test, needs) else {
            if std::env::var("CI").is_ok_and(|v| v == "true") {
                panic!("{test}: the lab is not running and CI=true (start it with testbed/lab up)");
            }
            eprintln!(
                "SKIP {test}: no lab; start it with `sudo testbed/lab up` (CI=true makes this a failure)"
            );
            return None;
        };
        if let Some(reason) = BROKEN.lock().unwrap_or_else(|e| e.into_inner()).as_ref() {
            panic!("{test}: the lab broke during an earlier test: {reason}");
        }
        kk_live::install_crypto_provider();
        let rt = tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()
            .unwrap();
        let kubeconfig = env
            .iter()
            .find(|(k, _)| k == "KUBECONFIG")
            .unwrap()
            .1
            .clone();
        let client = rt.block_on(kk_testkit::clients::admin(&kubeconfig));
        if let Some(reason) = dead_daemon(&turn.env_file) {
            *BROKEN.lock().unwrap_or_else(|e| e.into_inner()) = Some(reason.clone());
            panic!("{test}: {reason}");
        }
        let mut lab = Lab {
            turn,
            env,
            client,
            rt,
            dir: tempfile::tempdir().unwrap(),
            started: Instant::now(),
            test: test.to_owned(),
            began: Instant::now(),
            phases: Vec::new(),
        };
        let instance = lab.var("KK_LAB_INSTANCE");
        let instance = if instance.is_empty() { "1" } else { &instance };
        live(&format!("== {test} on the lab (lab {instance})"));
        lab.reset();
        live(&format!(
            "   set-up: reset {:.1}s",
            lab.began.elapsed().as_secs_f64()
        ));
        lab.started = Instant::now();
        Some(lab)
    }

    /// The lab's state folder (`.lab`, `.lab2`, ...: `testbed/lab`), where its logs, pids and
    /// seed are.
    pub fn state(&self) -> PathBuf {
        self.turn.env_file.parent().unwrap().to_path_buf()
    }

    /// What the lab process `daemon` (the pids file's names: karpenter, sts, ...) has logged
    /// so far; empty before it first ran.
    pub fn log(&self, daemon: &str) -> String {
        std::fs::read_to_string(self.state().join("logs").join(format!("{daemon}.log")))
            .unwrap_or_default()
    }

    pub fn var(&self, key: &str) -> String {
        self.env
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.clone())
            .unwrap_or_default()
    }

    /// `program` with the lab's environment (kubeconfig, AWS endpoint and credentials).
    pub fn command(&self, program: impl AsRef<std::ffi::OsStr>) -> Command {
        let mut c = Command::new(program);
        c.envs(self.env.iter().map(|(k, v)| (k.as_str(), v.as_str())));
        c
    }

    /// Runs the product's CLI, whatever its exit code.
    pub fn cli_output(&self, args: &[&str]) -> Output {
        self.command(env!("CARGO_BIN_EXE_kubean-karpenter"))
            .args(args)
            .output()
            .unwrap()
    }

    /// Runs the product's CLI; panics with its output unless it exits 0.
    pub fn cli(&self, args: &[&str]) -> Output {
        let out = self.cli_output(args);
        assert!(
            out.status.success(),
            "kubean-karpenter {args:?}: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        out
    }

    /// `testbed/lab ARGS`.
    pub fn lab(&self, args: &[&str]) {
        self.lab_together(&[args.to_vec()]);
    }

    /// Several `testbed/lab` commands side by side; panics with the output of each that failed.
    pub fn lab_together(&self, commands: &[Vec<&str>]) {
        self.lab_together_with(commands, &[]);
    }

    /// `lab_together` with `env` set for each command.
    fn lab_together_with(&self, commands: &[Vec<&str>], env: &[(&str, &str)]) {
        let running: Vec<_> = commands
            .iter()
            .map(|args| {
                let child = self
                    .command(repo().join("testbed/lab"))
                    .envs(env.iter().copied())
                    .args(args)
                    .stdout(std::process::Stdio::piped())
                    .stderr(std::process::Stdio::piped())
                    .spawn()
                    .unwrap();
                (args, child)
            })
            .collect();
        let failed: Vec<String> = running
            .into_iter()
            .filter_map(|(args, child)| {
                let out = child.wait_with_output().unwrap();
                (!out.status.success()).then(|| {
                    format!(
                        "testbed/lab {args:?}: {}",
                        String::from_utf8_lossy(&out.stderr)
                    )
                })
            })
            .collect();
        assert!(failed.is_empty(), "{}", failed.join("\n"));
    }

    /// Python with boto3 against the lab's moto (the tests' window on "AWS").
    pub fn aws(&self, script: &str) -> String {
        let out = self.command("python3").arg("-c").arg(format!("import boto3, json, sys\nec2 = boto3.client('ec2')\nssm = boto3.client('ssm')\n{script}")).output().unwrap();
        assert!(
            out.status.success(),
            "boto3: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).trim().to_owned()
    }

    /// The lab spec (testbed/lab-kit/lab-spec.yaml with this lab's port), edited by `edit`,
    /// rendered with the CLI; returns (spec path, bundle path).
    pub fn render(&self, edit: impl FnOnce(String) -> String) -> (PathBuf, PathBuf) {
        self.lab(&["spec"]);
        let lab_spec = self.state().join("spec.yaml");
        let text = edit(std::fs::read_to_string(&lab_spec).unwrap());
        self.assert_vpc_endpoints(&text);
        let spec = self
            .state()
            .join(format!("spec-{}.yaml", std::process::id()));
        std::fs::write(&spec, text).unwrap();
        let bundle = self.dir.path().join("bundle");
        self.cli(&[
            "render",
            spec.to_str().unwrap(),
            "-o",
            bundle.to_str().unwrap(),
            "--force",
        ]);
        (spec, bundle)
    }

    /// The lab spec says its VPC is isolated (no pricing API here), and `testbed/lab spec` made
    /// that VPC's endpoints from its own list: every one `kk_spec::vpc_endpoints` requires for
    /// the spec `text` must be there, or that list has fallen behind.
    fn assert_vpc_endpoints(&self, text: &str) {
        let Ok(cluster) = kk_spec::parse_spec(text, "lab-spec.yaml") else {
            return; // a test that breaks the spec on purpose; render reports it
        };
        let vpc = &cluster.spec.spec.aws.vpc_id;
        let have = self.aws(&format!(
            "print('\\n'.join(e['ServiceName'] for e in ec2.describe_vpc_endpoints(Filters=[{{'Name': 'vpc-id', 'Values': ['{vpc}']}}])['VpcEndpoints'] if e['State'].lower() == 'available'))"
        ));
        for e in kk_spec::vpc_endpoints::required(&cluster.spec) {
            assert!(
                have.lines().any(|l| l == e.service_name),
                "VPC {vpc} lacks the endpoint {} the lab spec needs: add it to `testbed/lab spec`'s list",
                e.service_name
            );
        }
    }

    /// `require`, `render` with `edit`, then `deploy`: the lab running this test's bundle.
    pub fn deployed(
        test: &str,
        edit: impl FnOnce(String) -> String,
    ) -> Option<(Lab, PathBuf, PathBuf)> {
        let lab = Lab::require(test)?;
        let rendering = Instant::now();
        let (spec, bundle) = lab.render(edit);
        let deploying = Instant::now();
        lab.deploy(&spec, &bundle);
        // Where a lab test's fixed cost goes (docs/internals/ci.md).
        live(&format!(
            "   set-up: render {:.1}s, deploy {:.1}s",
            (deploying - rendering).as_secs_f64(),
            deploying.elapsed().as_secs_f64()
        ));
        Some((lab, spec, bundle))
    }

    /// Starts Karpenter and the CCM from the bundle, applies the bundle with the CLI (the lab is
    /// both the management and the new cluster), then runs the rendered rotator + CSR approver
    /// from this build's binary and waits until it has published a join token.
    pub fn deploy(&self, spec: &Path, bundle: &Path) {
        self.deploy_with(spec, bundle, env!("CARGO_BIN_EXE_kubean-karpenter"));
    }

    /// `deploy`, running the controller from `controller`: a kubean-karpenter binary, or an
    /// OCI image layout holding the image the Deployment names (`testbed/lab controller`).
    pub fn deploy_with(&self, spec: &Path, bundle: &Path, controller: &str) {
        // Kubean's own namespace exists wherever Kubean is installed.
        self.apply_json(&json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "kubean-system"}}));
        let kubeconfig = self.var("KUBECONFIG");
        let mut steps = Steps::start();
        let restart = self
            .turn
            .update(|slot| std::mem::take(&mut slot.restart_karpenter));
        if restart {
            // The Karpenter to be replaced is stopped before the apply, so it cannot plan the
            // bundle's pools and pending pods with what it remembers (the new one starts
            // below). Not running (a first deploy, a test that killed it) is fine.
            let _ = self
                .command(repo().join("testbed/lab"))
                .args(["signal", "karpenter", "KILL"])
                .output();
        }
        // The AWS side in moto (on top of what the lab seeded: the interruption queue and its
        // rules among it) before Karpenter starts, so it finds its queue at once; Karpenter
        // runs as a process, not a Helm release.
        self.cli(&[
            "apply",
            spec.to_str().unwrap(),
            "--mgmt-kubeconfig",
            &kubeconfig,
            "--skip-helm",
        ]);
        steps.took("apply");
        // Karpenter, the CCM and the controller need nothing of each other to start.
        let bundle_path = bundle.to_str().unwrap();
        let mut daemons = vec![vec!["karpenter", bundle_path], vec!["ccm", bundle_path]];
        // Static join mode renders no rotator: the token is in the userData.
        let rotator = bundle.join("rotator/join-token-rotator.yaml").exists();
        if rotator {
            daemons.push(vec!["controller", bundle_path, controller]);
        }
        self.lab_together_with(
            &daemons,
            &[("KK_LAB_KARPENTER_RESTART", if restart { "1" } else { "" })],
        );
        steps.took("karpenter, ccm and controller");
        if rotator {
            let deadline = Instant::now() + Duration::from_secs(60);
            while self.aws(STORES_WITH_A_TOKEN) == "0" {
                assert!(
                    Instant::now() < deadline,
                    "the rotator published no join token in 60s"
                );
                std::thread::sleep(Duration::from_secs(1));
            }
            steps.took("first token");
        }
        live(&format!("   deploy: {steps}"));
    }

    fn apply_json(&self, obj: &Value) {
        let gvk = GroupVersionKind::gvk("", "v1", obj["kind"].as_str().unwrap());
        let api: Api<DynamicObject> =
            Api::all_with(self.client.clone(), &ApiResource::from_gvk(&gvk));
        let name = obj["metadata"]["name"].as_str().unwrap();
        self.server_side_apply(&api, name, obj);
    }

    /// Server-side applies `object` as the tests' field manager, taking over any field another
    /// manager set (a test's object must be what it says).
    pub fn server_side_apply<K>(&self, api: &Api<K>, name: &str, object: &Value)
    where
        K: Clone + k8s_openapi::serde::de::DeserializeOwned + std::fmt::Debug,
    {
        self.rt
            .block_on(api.patch(
                name,
                &PatchParams::apply("kk-lab-test").force(),
                &Patch::Apply(object),
            ))
            .unwrap();
    }

    pub fn dynamic(&self, group: &str, version: &str, kind: &str) -> Api<DynamicObject> {
        let gvk = GroupVersionKind::gvk(group, version, kind);
        Api::all_with(self.client.clone(), &ApiResource::from_gvk(&gvk))
    }

    pub fn nodeclaims(&self) -> Vec<DynamicObject> {
        self.rt
            .block_on(
                self.dynamic("karpenter.sh", "v1", "NodeClaim")
                    .list(&ListParams::default()),
            )
            .unwrap()
            .items
    }

    pub fn nodes(&self) -> Vec<Node> {
        self.rt
            .block_on(Api::<Node>::all(self.client.clone()).list(&ListParams::default()))
            .unwrap()
            .items
    }

    pub fn pods(&self, namespace: &str) -> Vec<Pod> {
        self.rt
            .block_on(
                Api::<Pod>::namespaced(self.client.clone(), namespace).list(&ListParams::default()),
            )
            .unwrap()
            .items
    }

    /// The pods of the bundle's `inflate-workload-general` Deployment (the CPU pool's load).
    pub fn general_pods(&self) -> Vec<Pod> {
        self.pods("default")
            .into_iter()
            .filter(|p| {
                p.metadata
                    .name
                    .as_deref()
                    .is_some_and(|n| n.starts_with("inflate-workload-general"))
            })
            .collect()
    }

    pub fn scale(&self, deployment: &str, replicas: i32) {
        let api: Api<Deployment> = Api::namespaced(self.client.clone(), "default");
        let patch = json!({"spec": {"replicas": replicas}});
        self.rt
            .block_on(api.patch(deployment, &PatchParams::default(), &Patch::Merge(&patch)))
            .unwrap();
    }

    /// Polls `check` every second until it returns Some, or panics after `timeout` naming the
    /// phase and what the lab looked like.
    pub fn wait<T>(
        &mut self,
        phase: &str,
        timeout: Duration,
        mut check: impl FnMut(&Lab) -> Option<T>,
    ) -> T {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(v) = check(self) {
                self.phases.push((phase.to_owned(), self.started.elapsed()));
                live(&format!(
                    "  {:>6.1}s  {phase}",
                    self.started.elapsed().as_secs_f64()
                ));
                return v;
            }
            if Instant::now() > deadline {
                panic!(
                    "phase '{phase}' did not happen within {timeout:?}\n{}",
                    self.diagnose()
                );
            }
            std::thread::sleep(Duration::from_secs(1));
        }
    }

    /// Asserts `check` stays None for `window` (a symptom that must persist).
    pub fn never<T: std::fmt::Debug>(
        &self,
        what: &str,
        window: Duration,
        mut check: impl FnMut(&Lab) -> Option<T>,
    ) {
        let deadline = Instant::now() + window;
        while Instant::now() < deadline {
            if let Some(v) = check(self) {
                panic!("{what} happened: {v:?}\n{}", self.diagnose());
            }
            std::thread::sleep(Duration::from_secs(1));
        }
    }

    /// Marks this test passed (the caller got here without a panic): the failures in a row
    /// start again from zero.
    fn passed() {
        *FAILED_IN_A_ROW.lock().unwrap_or_else(|e| e.into_inner()) = (0, None);
    }

    /// The phase timings so far, as a table on stderr.
    pub fn print_phases(&self) {
        eprintln!("  phase timings (s since the test's first action):");
        let mut prev = Duration::ZERO;
        for (phase, at) in &self.phases {
            eprintln!(
                "    {:<58} {:>6.1}  (+{:.1})",
                phase,
                at.as_secs_f64(),
                (*at - prev).as_secs_f64()
            );
            prev = *at;
        }
    }

    /// The console log of the instance behind a provider ID (`aws:///<az>/<id>`).
    pub fn console(&self, provider_id: &str) -> String {
        let id = provider_id.rsplit('/').next().unwrap_or_default();
        std::fs::read_to_string(
            Path::new(&self.var("KK_LAB_NODES"))
                .join(id)
                .join("console.log"),
        )
        .unwrap_or_default()
    }

    pub fn diagnose(&self) -> String {
        let mut out = String::new();
        for nc in self.nodeclaims() {
            let conds: Vec<String> = nc.data["status"]["conditions"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|c| {
                    format!(
                        "{}={} {}",
                        c["type"].as_str().unwrap_or(""),
                        c["status"].as_str().unwrap_or(""),
                        c["message"].as_str().unwrap_or("")
                    )
                })
                .collect();
            let pid = nc.data["status"]["providerID"].as_str().unwrap_or("");
            out.push_str(&format!(
                "NodeClaim {} {pid}: {conds:?}\n",
                nc.metadata.name.clone().unwrap_or_default()
            ));
            let console = self.console(pid);
            let tail: Vec<&str> = console.lines().rev().take(8).collect();
            out.push_str(&format!(
                "  console (last lines, newest first): {tail:#?}\n"
            ));
        }
        for n in self.nodes() {
            let taints: Vec<String> = n
                .spec
                .and_then(|s| s.taints)
                .unwrap_or_default()
                .into_iter()
                .map(|t| t.key)
                .collect();
            out.push_str(&format!(
                "Node {} taints {taints:?}\n",
                n.metadata.name.unwrap_or_default()
            ));
        }
        out
    }

    /// What this test does stays in Karpenter's memory after the test (offerings it marks
    /// unavailable after failed launches or a spot interruption, for minutes): the next test
    /// gets a fresh Karpenter.
    pub fn karpenter_remembers(&self) {
        self.turn.update(|slot| slot.karpenter_remembers = true);
    }

    /// This test's next deploy starts a fresh Karpenter instead of keeping the running one:
    /// for a test whose first batch must be planned with what the deploy applies (a running
    /// Karpenter may plan the pods already pending before it has read a new NodeOverlay).
    pub fn fresh_karpenter(&self) {
        self.turn.update(|slot| slot.restart_karpenter = true);
    }

    /// Turns on one of the lab's faults (testbed/README.md) until the next [`Lab::reset`].
    pub fn fault(&self, name: &str) {
        self.fault_with(name, "");
    }

    /// A fault whose file says what it applies to (`insufficient-capacity`: instance types,
    /// one per line).
    pub fn fault_with(&self, name: &str, content: &str) {
        // A deploy later in this test starts a fresh Karpenter too: the one running has
        // validated the node classes without the fault and keeps that result.
        self.turn.update(|slot| slot.restart_karpenter = true);
        self.karpenter_remembers();
        std::fs::write(Path::new(&self.var("KK_LAB_FAULTS")).join(name), content).unwrap();
    }

    /// Sends `signal` (`KILL`, `STOP`, `CONT`) to the lab process `name` (`testbed/lab signal`):
    /// a fault a test then recovers from (restarting the process, or `CONT`).
    pub fn signal(&self, name: &str, signal: &str) {
        self.lab(&["signal", name, signal]);
    }

    /// How many nodes the lab-size figures grow to: KK_LAB_NODES_WANTED, default 20.
    pub fn nodes_wanted() -> i32 {
        std::env::var("KK_LAB_NODES_WANTED")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(20)
    }

    /// Back to a lab with no NodePools, NodeClaims, instances or workloads.
    pub fn reset(&mut self) {
        let faults = self.var("KK_LAB_FAULTS");
        if !faults.is_empty() {
            for e in std::fs::read_dir(&faults).into_iter().flatten().flatten() {
                let _ = std::fs::remove_file(e.path());
            }
        }
        // The Karpenter that ran under a fault or took a spot interruption remembers it
        // (offerings it marked unavailable), even when the test turned the fault off again:
        // this test gets a fresh one.
        self.turn.update(|slot| {
            if std::mem::take(&mut slot.karpenter_remembers) {
                slot.restart_karpenter = true;
            }
        });
        let mut steps = Steps::start();
        let rt = &self.rt;
        let pools = self.dynamic("karpenter.sh", "v1", "NodePool");
        let deployments: Api<Deployment> = Api::namespaced(self.client.clone(), "default");
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), "default");
        // A test may have edited it by hand; the next apply must not meet a field conflict.
        let plugin: Api<k8s_openapi::api::apps::v1::DaemonSet> =
            Api::namespaced(self.client.clone(), "kube-system");
        let operator: Api<k8s_openapi::api::apps::v1::DaemonSet> =
            Api::namespaced(self.client.clone(), "gpu-operator");
        let overlays = self.dynamic("karpenter.sh", "v1alpha1", "NodeOverlay");
        let budget: Api<Deployment> = Api::namespaced(
            self.client.clone(),
            kk_spec::names::controller_namespace(kk_spec::names::BUDGET),
        );
        rt.block_on(async {
            // The budget controller's Deployment (lab_budget): its pod stays Pending (the lab
            // runs controllers as processes), which a later test's spec does not expect.
            let _ = budget
                .delete(kk_spec::names::BUDGET, &DeleteParams::default())
                .await;
            let _ = plugin
                .delete("nvidia-device-plugin", &DeleteParams::default())
                .await;
            // Applied only by tests whose spec has an `efa: true` pool; no later apply removes it.
            let _ = plugin
                .delete("aws-efa-k8s-device-plugin", &DeleteParams::default())
                .await;
            // The GPU Operator's stand-in (lab_gpu_sharing) would serve later tests' GPU nodes.
            let _ = operator
                .delete(OPERATOR_DEVICE_PLUGIN_DAEMONSET, &DeleteParams::default())
                .await;
            // A time-sliced pool's overlays would change what a later test's Karpenter plans.
            let _ = overlays
                .delete_collection(&DeleteParams::default(), &ListParams::default())
                .await;
            let _ = deployments
                .delete_collection(&DeleteParams::default(), &ListParams::default())
                .await;
            let _ = pods
                .delete_collection(
                    &DeleteParams::default().grace_period(0),
                    &ListParams::default(),
                )
                .await;
            let _ = pools
                .delete_collection(&DeleteParams::default(), &ListParams::default())
                .await;
        });
        steps.took("deletes");
        // Karpenter's own termination of each NodeClaim (drain, terminate, wait until EC2 says
        // terminated) took ~10 s of every reset that followed a test with nodes; the next test
        // needs none of it. Terminate the instances and release the NodeClaims, as an operator
        // forcing them would; the node runner then halts the instances (below).
        let remaining = self.nodeclaims();
        if !remaining.is_empty() {
            self.aws(TERMINATE_LEAKED);
            self.release_nodeclaims(&remaining);
            // A claim not yet Launched may have its CreateFleet in flight: its instance would
            // come up after the pass above. Give it time to land before the pass below.
            if remaining.iter().any(|c| !is_true(c, "Launched")) {
                std::thread::sleep(Duration::from_secs(3));
            }
        }
        let deadline = Instant::now() + Duration::from_secs(180);
        while !self.nodeclaims().is_empty() {
            assert!(
                Instant::now() < deadline,
                "reset: NodeClaims still there after 180s\n{}",
                self.diagnose()
            );
            std::thread::sleep(Duration::from_secs(1));
        }
        // With no NodeClaim left, a Karpenter instance still running is a leak that Karpenter's
        // garbage collection would take minutes to find: terminate it as that would.
        steps.took("NodeClaims gone");
        self.aws(TERMINATE_LEAKED);
        // The node runner halts a terminated instance on its next poll; until then its kubelet
        // runs and would register its Node again after the delete below, so the next test
        // would find capacity it did not create. Each booted instance is a `kkn-` namespace.
        let prefix = self.var("KK_LAB_NETNS_PREFIX");
        loop {
            let booted = booted_instances(&prefix);
            if booted.is_empty() {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "reset: the node runner still runs instance(s) after 180s: network namespaces {booted:?}\n{}",
                self.diagnose()
            );
            std::thread::sleep(Duration::from_millis(500));
        }
        steps.took("instances halted");
        // Nodes of halted instances: nothing (no node lifecycle controller of a cloud) removes them
        // before the CCM notices; remove them so the next test starts clean.
        self.remove_nodes();
        // The next deploy waits for its own rotator to publish the join configuration.
        self.aws(DELETE_STORES);
        steps.took("Nodes and stores");
        self.prove_empty(deadline);
        steps.took("proved empty");
        live(&format!("   reset: {steps}"));
        self.phases.clear();
    }

    /// What a test could see of an earlier one: NodeClaims, Nodes, Karpenter instances that
    /// are pending or running in moto, booted instances, pods in `default`. Empty on a clean lab.
    pub fn leftovers(&self) -> Vec<String> {
        let mut left = Vec::new();
        let names = |items: Vec<Option<String>>| {
            items
                .into_iter()
                .map(Option::unwrap_or_default)
                .collect::<Vec<_>>()
        };
        let claims = names(
            self.nodeclaims()
                .into_iter()
                .map(|c| c.metadata.name)
                .collect(),
        );
        if !claims.is_empty() {
            left.push(format!("NodeClaims {claims:?}"));
        }
        let nodes = names(self.nodes().into_iter().map(|n| n.metadata.name).collect());
        if !nodes.is_empty() {
            left.push(format!("Nodes {nodes:?}"));
        }
        let pods = names(
            self.pods("default")
                .into_iter()
                .map(|p| p.metadata.name)
                .collect(),
        );
        if !pods.is_empty() {
            left.push(format!("pods in default {pods:?}"));
        }
        let instances = self.aws(LIVE_INSTANCES);
        if !instances.is_empty() {
            left.push(format!(
                "instances pending or running in moto [{instances}]"
            ));
        }
        let booted = booted_instances(&self.var("KK_LAB_NETNS_PREFIX"));
        if !booted.is_empty() {
            left.push(format!("booted instances (network namespaces) {booted:?}"));
        }
        left
    }

    /// The reset's last step: the lab is seen empty twice, 2 s apart (an instance whose
    /// CreateFleet was in flight, or a kubelet that re-registered its Node, shows up in that
    /// time). What is found is cleaned again; what is still there at `deadline` fails the
    /// test here, by name, instead of surfacing as an earlier test's node in a later test.
    fn prove_empty(&self, deadline: Instant) {
        let mut clean_checks = 0;
        loop {
            let left = self.leftovers();
            if left.is_empty() {
                clean_checks += 1;
                if clean_checks == 2 {
                    return;
                }
            } else {
                clean_checks = 0;
                assert!(
                    Instant::now() < deadline,
                    "reset: the lab is not empty after 180s: {}\n{}",
                    left.join("; "),
                    self.diagnose()
                );
                live(&format!(
                    "   reset: still there, cleaning again: {}",
                    left.join("; ")
                ));
                self.clean_again();
            }
            std::thread::sleep(Duration::from_secs(2));
        }
    }

    /// The reset's deletes once more, for what appeared after them.
    fn clean_again(&self) {
        self.aws(TERMINATE_LEAKED);
        let claims = self.dynamic("karpenter.sh", "v1", "NodeClaim");
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), "default");
        self.rt.block_on(async {
            let _ = claims
                .delete_collection(&DeleteParams::default(), &ListParams::default())
                .await;
            let _ = pods
                .delete_collection(
                    &DeleteParams::default().grace_period(0),
                    &ListParams::default(),
                )
                .await;
        });
        self.release_nodeclaims(&self.nodeclaims());
        self.remove_nodes();
    }

    /// Takes the finalizers off `claims`, as an operator forcing them would (their instances
    /// are terminated by the caller).
    fn release_nodeclaims(&self, claims: &[DynamicObject]) {
        let api = self.dynamic("karpenter.sh", "v1", "NodeClaim");
        for claim in claims {
            let name = claim.metadata.name.clone().unwrap_or_default();
            let _ =
                self.rt
                    .block_on(api.patch(&name, &PatchParams::default(), &release_finalizers()));
        }
    }

    /// Deletes every Node and takes Karpenter's termination finalizer off those whose
    /// NodeClaim was released.
    fn remove_nodes(&self) {
        let nodes: Api<Node> = Api::all(self.client.clone());
        let _ = self
            .rt
            .block_on(nodes.delete_collection(&DeleteParams::default(), &ListParams::default()));
        for node in self.nodes() {
            let name = node.metadata.name.unwrap_or_default();
            let _ = self.rt.block_on(nodes.patch(
                &name,
                &PatchParams::default(),
                &release_finalizers(),
            ));
        }
    }
}

impl Drop for Lab {
    fn drop(&mut self) {
        if std::thread::panicking() {
            // A failed test may have left anything in its Karpenter's memory.
            self.turn.update(|slot| slot.restart_karpenter = true);
        } else {
            Lab::passed();
        }
        // Where CI's time goes: each test's whole turn on the lab, its reset included.
        live(&format!(
            "-- {} on the lab: {:.0}s",
            self.test,
            self.began.elapsed().as_secs_f64()
        ));
    }
}

/// The first of the lab's base daemons (its `pids` file, next to `env`) that is no longer
/// running, with the end of its log: a lab whose apiserver, moto or node runner died fails
/// every test.
fn dead_daemon(env: &Path) -> Option<String> {
    let state = env.parent()?;
    let pids = std::fs::read_to_string(state.join("pids")).ok()?;
    pids.lines().find_map(|line| {
        let (name, pid) = line.split_once(' ')?;
        // The daemons `testbed/lab up` starts; each test's deploy restarts the rest.
        const BASE: [&str; 7] = [
            "moto",
            "etcd",
            "kube-apiserver",
            "kube-controller-manager",
            "kube-scheduler",
            "sts",
            "node-runner",
        ];
        if !BASE.contains(&name) || Path::new("/proc").join(pid.trim()).exists() {
            return None;
        }
        let log = std::fs::read_to_string(state.join("logs").join(format!("{name}.log")))
            .unwrap_or_default();
        let tail: Vec<&str> = log
            .lines()
            .rev()
            .take(15)
            .collect::<Vec<_>>()
            .into_iter()
            .rev()
            .collect();
        Some(format!(
            "lab daemon {name} (pid {}) is not running; the end of its log:\n{}",
            pid.trim(),
            tail.join("\n")
        ))
    })
}

/// The network namespaces of the instances this lab's node runner has booted and not yet
/// halted (`kkn-<lab id>-<hash>`: other labs' namespaces may share the list).
fn booted_instances(prefix: &str) -> Vec<String> {
    assert!(
        prefix.starts_with("kkn-"),
        "the lab's env lacks KK_LAB_NETNS_PREFIX: restart it (testbed/lab down; testbed/lab up)"
    );
    let out = Command::new("ip").args(["netns", "list"]).output();
    out.map(|o| {
        String::from_utf8_lossy(&o.stdout)
            .lines()
            .filter_map(|l| l.split_whitespace().next())
            .filter(|name| name.starts_with(prefix))
            .map(str::to_string)
            .collect()
    })
    .unwrap_or_default()
}

/// The invariants after a fault, once the system has settled: every instance Karpenter
/// launched that is running belongs to a NodeClaim, every Karpenter Node to a NodeClaim (one
/// Node per claim), and the pods all run. Returns the claims' provider IDs.
pub fn assert_no_orphan_no_duplicate(lab: &Lab) -> std::collections::BTreeSet<String> {
    let claims: std::collections::BTreeSet<String> = lab
        .nodeclaims()
        .iter()
        .filter_map(|nc| nc.data["status"]["providerID"].as_str())
        .map(str::to_owned)
        .collect();
    let running = lab.aws(
        "ids = [i['InstanceId'] for r in ec2.describe_instances(Filters=[{'Name': 'tag-key', 'Values': ['karpenter.sh/nodepool']}, {'Name': 'instance-state-name', 'Values': ['pending', 'running']}])['Reservations'] for i in r['Instances']]
print(' '.join(sorted(ids)))",
    );
    let claimed: std::collections::BTreeSet<&str> =
        claims.iter().filter_map(|p| p.rsplit('/').next()).collect();
    let running: std::collections::BTreeSet<&str> = running.split_whitespace().collect();
    assert_eq!(
        running, claimed,
        "instances running vs instances of NodeClaims (an orphan, or a claim without its instance)"
    );
    let mut seen = std::collections::BTreeSet::new();
    for node in lab.nodes() {
        let labels = node.metadata.labels.clone().unwrap_or_default();
        if !labels.contains_key("karpenter.sh/nodepool") {
            continue;
        }
        let pid = node
            .spec
            .as_ref()
            .and_then(|s| s.provider_id.clone())
            .unwrap_or_default();
        assert!(
            claims.contains(&pid),
            "Node {:?} ({pid}) has no NodeClaim",
            node.metadata.name
        );
        assert!(seen.insert(pid.clone()), "two Nodes for {pid}");
    }
    claims
}

/// Rewrites one key of the join configuration in the SSM store (what a stale or broken
/// store holds); panics if the store is missing.
pub fn edit_store(lab: &Lab, store: &str, key: &str, value: &str) {
    lab.aws(&format!(
        "v = ssm.get_parameter(Name='{store}', WithDecryption=True)['Parameter']['Value']\n\
         lines = [l for l in v.splitlines() if not l.startswith('{key}=')] + ['{key}={value}']\n\
         ssm.put_parameter(Name='{store}', Value='\\n'.join(lines), Type='SecureString', Overwrite=True)"
    ));
}

/// The first NodeClaim of a pool.
pub fn claim_of(lab: &Lab, pool: &str) -> Option<DynamicObject> {
    lab.nodeclaims().into_iter().find(|nc| pool_of(nc) == pool)
}

/// Every NodeClaim of a pool.
pub fn claims_of(lab: &Lab, pool: &str) -> Vec<DynamicObject> {
    lab.nodeclaims()
        .into_iter()
        .filter(|nc| pool_of(nc) == pool)
        .collect()
}

/// A NodeClaim condition's status ("True", "False", "Unknown"), if present.
pub fn condition(nc: &DynamicObject, kind: &str) -> Option<String> {
    nc.data["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == kind)
        .and_then(|c| c["status"].as_str().map(str::to_owned))
}

/// A NodeClaim condition's reason (`""` when absent).
pub fn condition_reason(nc: &DynamicObject, kind: &str) -> String {
    nc.data["status"]["conditions"]
        .as_array()
        .and_then(|cs| cs.iter().find(|c| c["type"] == kind))
        .and_then(|c| c["reason"].as_str())
        .unwrap_or_default()
        .to_owned()
}

pub fn is_true(nc: &DynamicObject, kind: &str) -> bool {
    condition(nc, kind).as_deref() == Some("True")
}

pub fn pool_of(nc: &DynamicObject) -> &str {
    nc.metadata
        .labels
        .as_ref()
        .and_then(|l| l.get("karpenter.sh/nodepool"))
        .map(String::as_str)
        .unwrap_or("")
}

/// Whether a pod counts as healthy for its PodDisruptionBudget: Ready and not being deleted.
pub fn pod_ready(p: &Pod) -> bool {
    p.metadata.deletion_timestamp.is_none()
        && p.status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// Whether a drain must go through the pod's PodDisruptionBudget: Ready and Running. The
/// eviction API lets a Pending pod go whatever its budget says, and the lab's hollow kubelet
/// writes Ready=True a moment (seconds, under load) before it writes phase Running: a drain
/// started when the pods are only Ready can take them all at once. Wait on this before a drain.
pub fn pod_available(p: &Pod) -> bool {
    pod_ready(p) && p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running")
}

/// Named steps and how long each took, for the set-up lines CI's log shows.
struct Steps {
    at: Instant,
    done: Vec<String>,
}

impl Steps {
    fn start() -> Steps {
        Steps {
            at: Instant::now(),
            done: Vec::new(),
        }
    }

    /// Ends the step running since the last one (or the start).
    fn took(&mut self, step: &str) {
        self.done
            .push(format!("{step} {:.1}s", self.at.elapsed().as_secs_f64()));
        self.at = Instant::now();
    }
}

impl std::fmt::Display for Steps {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.done.join(", "))
    }
}
