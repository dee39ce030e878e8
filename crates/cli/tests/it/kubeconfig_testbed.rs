//! Issue #47 item 6: `kubeconfig` reads the new cluster's kubeconfig from a ConfigMap that
//! the management cluster's admins (and whatever Kubean runs) can write. These tests write
//! hostile ones and run the command as an operator would. The testbed's apiserver plays both
//! clusters: the management cluster holding `<cluster>-kubeconf`, and the new cluster the
//! kubeconfig names.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use kk_testkit::repo;
use serde_json::{Value, json};

fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_kubean-karpenter"))
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// Server-side applies `objects` to the testbed.
fn apply(testbed: &kk_testkit::testbed::Testbed, dir: &Path, objects: &[Value]) {
    let file = dir.join("objects.yaml");
    let text: Vec<String> = objects.iter().map(Value::to_string).collect();
    std::fs::write(&file, text.join("\n---\n")).unwrap();
    let out = bin()
        .arg("apply")
        .arg("--kubeconfig")
        .arg(&testbed.kubeconfig)
        .arg(&file)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
}

/// A throwaway CA nobody's server uses (PEM).
fn throwaway_ca(dir: &Path) -> String {
    let (key, cert) = (dir.join("throwaway.key"), dir.join("throwaway.crt"));
    let out = Command::new("openssl")
        .args([
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:P-256",
        ])
        .args([
            "-nodes",
            "-days",
            "1",
            "-subj",
            "/CN=throwaway-ca",
            "-keyout",
        ])
        .arg(&key)
        .arg("-out")
        .arg(&cert)
        .output()
        .expect("openssl");
    assert!(out.status.success(), "{}", stderr(&out));
    std::fs::read_to_string(cert).unwrap()
}

fn b64(text: &str) -> String {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.encode(text)
}

struct Setup {
    testbed: kk_testkit::testbed::Testbed,
    dir: tempfile::TempDir,
    spec: PathBuf,
    cluster: String,
    namespace: String,
    /// The testbed's CA (PEM) and admin token: what an honest Kubean would store.
    ca: String,
    token: String,
}

impl Setup {
    fn new(testbed: kk_testkit::testbed::Testbed, prefix: &str) -> Setup {
        let dir = tempfile::tempdir().unwrap();
        let spec = dir.path().join("spec.yaml");
        // Fresh names per run: the testbed keeps what earlier runs created.
        let cluster = format!("{prefix}-{}", std::process::id());
        let namespace = format!("kubean-{cluster}");
        let example = kk_spec::EXAMPLE
            .replace("name: demo ", &format!("name: {cluster} "))
            .replace(
                "    namespace: kubean-system\n",
                &format!("    namespace: {namespace}\n"),
            );
        std::fs::write(&spec, &example).unwrap();
        let ca = std::fs::read_to_string(&testbed.env["KK_TESTBED_CA"]).unwrap();
        let token = testbed.env["KK_TESTBED_ADMIN_TOKEN"].clone();
        // No controller-manager publishes kube-root-ca.crt on the testbed: put the CA where
        // the kubeconfig's context points.
        apply(
            &testbed,
            dir.path(),
            &[
                json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}}),
                json!({"apiVersion": "v1", "kind": "ConfigMap",
                       "metadata": {"name": "kube-root-ca.crt", "namespace": namespace},
                       "data": {"ca.crt": ca}}),
            ],
        );
        Setup {
            testbed,
            dir,
            spec,
            cluster,
            namespace,
            ca,
            token,
        }
    }

    fn target(&self) -> PathBuf {
        self.dir.path().join(format!("{}.kubeconfig", self.cluster))
    }

    fn marker(&self) -> PathBuf {
        self.dir.path().join("the-plugin-ran")
    }

    /// A kubeconfig for the testbed with `user` and the CA bundle `ca` (PEM), its context
    /// in `namespace`.
    fn kubeconfig(&self, user: Value, ca: &str, namespace: &str) -> String {
        json!({
            "apiVersion": "v1", "kind": "Config",
            "clusters": [{"name": "cluster.local", "cluster": {
                "server": self.testbed.env["KK_TESTBED_APISERVER"],
                "certificate-authority-data": b64(ca),
            }}],
            "contexts": [{"name": "admin@cluster.local", "context": {
                "cluster": "cluster.local", "user": "admin", "namespace": namespace,
            }}],
            "current-context": "admin@cluster.local",
            "users": [{"name": "admin", "user": user}],
        })
        .to_string()
    }

    /// What Kubean's kubeconfig.yml post-hook creates, with `kubeconfig` in it.
    fn store(&self, kubeconfig: &str) {
        apply(
            &self.testbed,
            self.dir.path(),
            &[json!({"apiVersion": "v1", "kind": "ConfigMap",
                     "metadata": {"name": format!("{}-kubeconf", self.cluster),
                                  "namespace": self.namespace},
                     "data": {"config": kubeconfig}})],
        );
    }

    fn run(&self, extra: &[&str]) -> Output {
        bin()
            .arg("kubeconfig")
            .arg(&self.spec)
            .arg("-f")
            .arg(self.target())
            .arg("--mgmt-kubeconfig")
            .arg(&self.testbed.kubeconfig)
            .args(extra)
            .output()
            .unwrap()
    }

    fn source(&self) -> String {
        format!("ConfigMap {}/{}-kubeconf", self.namespace, self.cluster)
    }

    /// The command refuses, naming the ConfigMap and `field`, and writes nothing.
    fn assert_refused(&self, field: &str, why: &str) {
        let out = self.run(&[]);
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(2), "{err}");
        assert!(err.contains(&self.source()) && err.contains(field), "{err}");
        assert!(err.contains(why), "{err}");
        assert!(!err.contains(&self.token), "the admin token leaked: {err}");
        assert!(!self.target().exists(), "written although refused");
    }
}

/// The kubeconfig plugins an attacker would plant, each as it would run: `exec` and a gcp
/// `auth-provider` both touch the marker (and the exec one even answers with a working
/// credential); `tokenFile` would read a local file and send it to the server.
#[test]
fn a_fetched_kubeconfig_that_would_run_code_or_read_local_files_is_refused() {
    let _turn = crate::testbed_apply_turn();
    let Some(testbed) = kk_testkit::testbed::require(&repo(), "kubeconfig attacks") else {
        return;
    };
    let s = Setup::new(testbed, "kcexec");
    let marker = s.marker();
    let credential = json!({"apiVersion": "client.authentication.k8s.io/v1",
                            "kind": "ExecCredential", "status": {"token": s.token}});
    let exec = json!({"exec": {
        "apiVersion": "client.authentication.k8s.io/v1",
        "command": "sh",
        "args": ["-c", format!("touch '{}'; printf '%s' '{credential}'", marker.display())],
        "interactiveMode": "Never",
    }});
    let secret = s.dir.path().join("operators-secret");
    std::fs::write(&secret, "a-local-secret").unwrap();
    let attacks = [
        (exec.clone(), "users[0].user.exec"),
        (
            // kube's gcp provider runs cmd-path with cmd-args split on spaces; ${IFS} survives.
            json!({"auth-provider": {"name": "gcp", "config": {
                "cmd-path": "sh",
                "cmd-args": format!("-c touch${{IFS}}{}", marker.display()),
            }}}),
            "users[0].user.auth-provider",
        ),
        (
            json!({"tokenFile": secret.display().to_string()}),
            "users[0].user.tokenFile",
        ),
        (
            json!({"client-certificate": secret.display().to_string(),
                   "client-key": secret.display().to_string()}),
            "users[0].user.client-certificate",
        ),
    ];
    for (user, field) in attacks {
        s.store(&s.kubeconfig(user, &s.ca, &s.namespace));
        s.assert_refused(field, "--allow-exec");
        // A following command that would use the kubeconfig finds none to run.
        let out = bin()
            .args(["token", "list", "--kubeconfig"])
            .arg(s.target())
            .output()
            .unwrap();
        assert_ne!(out.status.code(), Some(0));
        assert!(!marker.exists(), "{field}: the plugin ran");
    }

    // A CA read from a local file is a file reference too.
    let mut kubeconfig: Value =
        serde_json::from_str(&s.kubeconfig(json!({"token": s.token}), &s.ca, &s.namespace))
            .unwrap();
    kubeconfig["clusters"][0]["cluster"]["certificate-authority"] =
        json!(secret.display().to_string());
    s.store(&kubeconfig.to_string());
    s.assert_refused("clusters[0].cluster.certificate-authority", "--allow-exec");

    // The operator's opt-in: written, and the plugin is theirs to run (the CA check already
    // used it to read kube-root-ca.crt).
    let exec_kubeconfig = s.kubeconfig(exec, &s.ca, &s.namespace);
    s.store(&exec_kubeconfig);
    let out = s.run(&["--allow-exec"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(
        std::fs::read_to_string(s.target()).unwrap(),
        exec_kubeconfig
    );
    assert!(marker.exists(), "the allowed plugin did not run");
}

/// A kubeconfig whose CA is not the one its server serves (a throwaway CA, or the real CA
/// behind a throwaway one in the same bundle: the first is the one nodes pin), or not the
/// one the cluster publishes in kube-root-ca.crt, is refused; the honest one is written.
#[test]
fn a_fetched_kubeconfig_whose_ca_is_not_the_clusters_is_refused() {
    let _turn = crate::testbed_apply_turn();
    let Some(testbed) = kk_testkit::testbed::require(&repo(), "kubeconfig CA") else {
        return;
    };
    let s = Setup::new(testbed, "kcca");
    let throwaway = throwaway_ca(s.dir.path());
    let user = json!({"token": s.token});
    let ca_field = "clusters[0].cluster.certificate-authority-data";

    s.store(&s.kubeconfig(user.clone(), &throwaway, &s.namespace));
    s.assert_refused(ca_field, "does not match the cluster's");

    s.store(&s.kubeconfig(user.clone(), &format!("{throwaway}{}", s.ca), &s.namespace));
    s.assert_refused(ca_field, "does not match the cluster's");

    // The server's CA, but the cluster publishes another one.
    let elsewhere = format!("{}-other", s.namespace);
    apply(
        &s.testbed,
        s.dir.path(),
        &[
            json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": elsewhere}}),
            json!({"apiVersion": "v1", "kind": "ConfigMap",
                   "metadata": {"name": "kube-root-ca.crt", "namespace": elsewhere},
                   "data": {"ca.crt": throwaway}}),
        ],
    );
    s.store(&s.kubeconfig(user.clone(), &s.ca, &elsewhere));
    s.assert_refused(ca_field, "kube-root-ca.crt");

    // A server that speaks no TLS verifies nothing.
    let mut plain: Value =
        serde_json::from_str(&s.kubeconfig(user.clone(), &s.ca, &s.namespace)).unwrap();
    let server = s.testbed.env["KK_TESTBED_APISERVER"].replace("https://", "http://");
    plain["clusters"][0]["cluster"]["server"] = json!(server);
    s.store(&plain.to_string());
    s.assert_refused("clusters[0].cluster.server", "not https");

    // The honest kubeconfig passes and reports the testbed CA's hash.
    s.store(&s.kubeconfig(user, &s.ca, &s.namespace));
    let out = s.run(&["-o", "json"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    let pem = bin()
        .args(["ca-hash", "--pem"])
        .arg(&s.testbed.env["KK_TESTBED_CA"])
        .output()
        .unwrap();
    assert_eq!(
        report["caCertHash"].as_str().unwrap(),
        String::from_utf8_lossy(&pem.stdout).trim()
    );
}
