//! `token create|list|revoke` and `ca-hash`: bootstrap tokens and the CA hash `kubeadm join`
//! pins; also the join-store arguments `controller` shares (see `controller_cmd.rs`).
//!
//! A token's secret half is printed only with `--show-secret`; errors never carry it.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use kk_live::client::{Connected, Timeouts, connect};
use kk_live::store::{self, JoinStore, StoreKind};
use kk_live::token::{self, NewToken, Timestamp, TokenInfo, format_duration, parse_duration};
use serde_json::json;

use crate::Failure;
use crate::flags::KubeFlags;

/// Where the join configuration is published: from a spec, from flags, or both (flags win).
#[derive(clap::Args, Clone, Debug, Default)]
pub struct StoreArgs {
    /// ElasticCluster spec: gives the cluster name, join mode and store name, API server,
    /// AWS region and CA.
    #[arg(long)]
    spec: Option<String>,
    /// Cluster name (labels our token Secrets, tags the store).
    #[arg(long)]
    cluster: Option<String>,
    /// Store kind.
    #[arg(long, value_parser = ["ssm", "secrets-manager"])]
    store: Option<String>,
    /// SSM parameter or Secrets Manager secret name (default: /kubean-karpenter/<cluster>/join
    /// for ssm, kubean-karpenter/<cluster>/join for secrets-manager).
    #[arg(long)]
    store_name: Option<String>,
    /// API server endpoint nodes join, host:port (published as KK_API_SERVER_ENDPOINT).
    #[arg(long)]
    api_server: Option<String>,
    /// AWS region (default: the spec's, else AWS_REGION and the SDK's region chain).
    #[arg(long)]
    region: Option<String>,
    /// CA hash to publish (default: from the spec's CA bundle, else the kubeconfig's CA).
    #[arg(long)]
    ca_cert_hash: Option<String>,
    /// Customer-managed KMS key to encrypt the store with (default: the spec's join.kms.keyArn,
    /// else the service's default key).
    #[arg(long)]
    kms_key_id: Option<String>,
}

impl StoreArgs {
    fn is_empty(&self) -> bool {
        self.spec.is_none()
            && self.cluster.is_none()
            && self.store.is_none()
            && self.store_name.is_none()
            && self.api_server.is_none()
    }
}

/// A resolved store target.
#[derive(Debug, Clone)]
pub(crate) struct Target {
    pub(crate) cluster: String,
    kind: StoreKind,
    name: String,
    pub(crate) endpoint: String,
    region: Option<String>,
    ca_cert_hash: Option<String>,
    kms_key_id: Option<String>,
}

impl Target {
    pub(crate) fn ca_hash(&self, connected: &Connected) -> Result<String, Failure> {
        match (
            &self.ca_cert_hash,
            &kk_live::cahash::from_client_config(&connected.config),
        ) {
            (Some(h), _) => Ok(h.clone()),
            (None, Ok(h)) => Ok(h.clone()),
            (None, Err(e)) => Err(Failure::msg(format!(
                "no CA hash to publish: {e}; pass --ca-cert-hash or --spec"
            ))),
        }
    }

    pub(crate) async fn open(&self) -> Result<JoinStore, Failure> {
        let sdk = store::aws_config(self.region.clone(), None).await?;
        Ok(JoinStore::new(self.kind, &self.name, &self.cluster, &sdk)
            .with_kms_key(self.kms_key_id.clone()))
    }
}

/// The store from `--spec` and flags. `publish`: everything a publication needs (endpoint,
/// CA hash) is required; otherwise only the store itself, and `None` when there is none.
pub(crate) fn resolve_target(args: &StoreArgs, publish: bool) -> Result<Option<Target>, Failure> {
    if args.is_empty() {
        return Ok(None);
    }
    let (mut cluster, mut spec_kind, mut name, mut endpoint, mut region, mut hash) =
        (None, None, None, None, None, None);
    let mut kms = None;
    if let Some(spec) = &args.spec {
        let (loaded, base) = crate::load_spec(spec)?;
        let c = &loaded.spec;
        cluster = Some(c.metadata.name.clone());
        spec_kind = StoreKind::from_join_mode(c.spec.join.mode);
        if spec_kind.is_some() {
            name = Some(kk_render::names::join_store(&c.spec, &c.metadata.name));
        }
        endpoint = Some(format!(
            "{}:{}",
            c.spec.api_server.dns_name, c.spec.api_server.port
        ));
        region = Some(c.spec.aws.region.clone());
        kms = c.spec.join.kms.as_ref().map(|k| k.key_arn.clone());
        if publish && args.ca_cert_hash.is_none() {
            let pem = crate::files::resolve_ca(&loaded, &base)?;
            hash = Some(
                kk_render::ClusterCa::from_pem(&pem)
                    .map_err(|e| Failure::msg(format!("{spec}: {e}")))?
                    .cert_hash,
            );
        }
    }
    let cluster = args
        .cluster
        .clone()
        .or(cluster)
        .ok_or_else(|| Failure::msg("name the cluster: --cluster or --spec".into()))?;
    let kind = match &args.store {
        Some(s) => s.parse::<StoreKind>().map_err(Failure::from)?,
        None if !publish && spec_kind.is_none() => return Ok(None),
        None => spec_kind.ok_or_else(|| {
            Failure::msg(if args.spec.is_some() {
                "the spec's join.mode is static: there is no store to publish to (pass --store to name one)".into()
            } else {
                "name the store kind: --store ssm|secrets-manager, or --spec".into()
            })
        })?,
    };
    let name = args
        .store_name
        .clone()
        .or(name.filter(|_| spec_kind == Some(kind)))
        .unwrap_or_else(|| kind.default_name(&cluster));
    let endpoint = match args.api_server.clone().or(endpoint) {
        Some(e) => {
            store::validate_endpoint(&e).map_err(|e| Failure::msg(format!("--api-server {e}")))?;
            e
        }
        // Only reading the store: no endpoint needed.
        None if !publish => String::new(),
        None => {
            return Err(Failure::msg(
                "name the API server nodes join: --api-server host:port, or --spec".into(),
            ));
        }
    };
    let ca_cert_hash = args.ca_cert_hash.clone().or(hash);
    if let Some(h) = &ca_cert_hash
        && !store::is_ca_cert_hash(h)
    {
        return Err(Failure::msg(format!(
            "--ca-cert-hash {h:?}: expected sha256:<64 lowercase hex digits>"
        )));
    }
    Ok(Some(Target {
        cluster,
        kind,
        name,
        endpoint,
        region: args.region.clone().or(region),
        ca_cert_hash,
        kms_key_id: args.kms_key_id.clone().or(kms),
    }))
}

/// Writes to standard output; a closed pipe (`| head`) is not an error.
fn print_out(text: &str) -> Result<ExitCode, Failure> {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => Err(e.into()),
        _ => Ok(ExitCode::SUCCESS),
    }
}

pub(crate) fn runtime() -> Result<tokio::runtime::Runtime, Failure> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| Failure::msg(format!("cannot start the async runtime: {e}")))
}

#[derive(clap::Subcommand, Debug)]
pub enum TokenCommand {
    /// Create a bootstrap token Secret exactly as kubeadm does (labelled as ours); with
    /// --publish, also write it to the join store (and delete it again if that fails).
    #[command(after_help = "Docs: docs/guide/join-credentials.md")]
    Create {
        #[command(flatten)]
        kube: KubeFlags,
        /// Lifetime, e.g. 2h, 90m; at most 24h.
        #[arg(long, default_value = "2h", value_parser = parse_duration)]
        ttl: Duration,
        /// Free text stored in the Secret's description.
        #[arg(long)]
        description: Option<String>,
        /// Print the whole token (<id>.<secret>) on standard output; otherwise only its ID.
        #[arg(long)]
        show_secret: bool,
        /// Publish the token to the join store (SSM or Secrets Manager).
        #[arg(long)]
        publish: bool,
        #[command(flatten)]
        store: StoreArgs,
    },
    /// List bootstrap tokens: ID, expiry, usages, description, and whether they are ours.
    /// Never prints secrets.
    #[command(after_help = "Docs: docs/guide/join-credentials.md")]
    List {
        #[command(flatten)]
        kube: KubeFlags,
        /// text, json or yaml.
        #[arg(short = 'o', long = "output", value_enum, default_value_t)]
        output: crate::flags::OutputFormat,
    },
    /// Delete a bootstrap token. With store options, refuses to delete the token the store
    /// publishes (nodes would fail to join): publish a new one first.
    #[command(after_help = "Docs: docs/guide/join-credentials.md")]
    Revoke {
        #[command(flatten)]
        kube: KubeFlags,
        /// The token ID (the part before the dot).
        id: String,
        #[command(flatten)]
        store: StoreArgs,
    },
}

pub fn token(command: TokenCommand) -> Result<ExitCode, Failure> {
    match command {
        TokenCommand::Create {
            kube,
            ttl,
            description,
            show_secret,
            publish,
            store,
        } => {
            token::check_ttl_ceiling(ttl).map_err(|e| Failure::msg(format!("--ttl: {e}")))?;
            create(&kube, ttl, description, show_secret, publish, &store)
        }
        TokenCommand::List { kube, output } => list(&kube, output),
        TokenCommand::Revoke { kube, id, store } => revoke(&kube, &id, &store),
    }
}

fn create(
    kube: &KubeFlags,
    ttl: Duration,
    description: Option<String>,
    show_secret: bool,
    publish: bool,
    store_args: &StoreArgs,
) -> Result<ExitCode, Failure> {
    token::expiration_after(Timestamp::now(), ttl)
        .map_err(|e| Failure::msg(format!("--ttl: {e}")))?;
    let target = if publish {
        Some(resolve_target(store_args, true)?.ok_or_else(|| {
            Failure::msg(
                "--publish needs a store: --spec FILE, or --cluster, --store and --api-server"
                    .into(),
            )
        })?)
    } else {
        None
    };
    // Without --publish, --cluster (or the spec's name) only labels the Secret.
    let cluster = match &target {
        Some(t) => Some(t.cluster.clone()),
        None => match (&store_args.cluster, &store_args.spec) {
            (Some(c), _) => Some(c.clone()),
            (None, Some(spec)) => Some(crate::load_spec(spec)?.0.spec.metadata.name),
            (None, None) => None,
        },
    };
    let new = NewToken {
        ttl,
        description,
        cluster,
    };
    let (token, info, published) = runtime()?.block_on(async {
        let connected = connect(&kube.options(), Timeouts::OneShot).await?;
        match &target {
            Some(target) => {
                let ca = target.ca_hash(&connected)?;
                let store = target.open().await?;
                let p = store::create_and_publish(
                    &connected.client,
                    &store,
                    &new,
                    &target.endpoint,
                    &ca,
                    None,
                    Timestamp::now(),
                )
                .await?;
                Ok::<_, Failure>((p.token, p.info, Some(store.describe())))
            }
            None => {
                let (token, info) =
                    token::create(&connected.client, &new, Timestamp::now()).await?;
                Ok((token, info, None))
            }
        }
    })?;
    let expiration = info.expiration.map(token::rfc3339).unwrap_or_default();
    eprintln!(
        "created bootstrap token {} in {} (expires {expiration})",
        token.id(),
        token::NAMESPACE
    );
    if let Some(store) = published {
        eprintln!("published to {store}");
    }
    if show_secret {
        print_out(&format!("{}\n", token.expose()))
    } else {
        print_out(&format!("{}\n", token.id()))
    }
}

fn remaining(info: &TokenInfo, now: Timestamp) -> String {
    match info.expiration {
        None => "never".into(),
        Some(e) if e <= now => "expired".into(),
        Some(e) => Duration::try_from(e.duration_since(now))
            .map(format_duration)
            .unwrap_or_default(),
    }
}

fn list(kube: &KubeFlags, output: crate::flags::OutputFormat) -> Result<ExitCode, Failure> {
    let tokens = runtime()?.block_on(async {
        let connected = connect(&kube.options(), Timeouts::OneShot).await?;
        Ok::<_, Failure>(token::list(&connected.client).await?)
    })?;
    let now = Timestamp::now();
    if output.is_structured() {
        let items: Vec<_> = tokens
            .iter()
            .map(|t| {
                json!({
                    "id": t.id,
                    "expiration": t.expiration.map(token::rfc3339),
                    "expired": t.is_expired(now),
                    "usages": t.usages,
                    "extraGroups": t.extra_groups,
                    "description": t.description,
                    "ours": t.managed,
                    "cluster": t.cluster,
                })
            })
            .collect();
        crate::flags::print_structured(&serde_json::Value::Array(items), output)?;
        return Ok(ExitCode::SUCCESS);
    }
    let mut text = format!(
        "{:<8} {:<22} {:<10} {:<24} {:<5} DESCRIPTION\n",
        "ID", "EXPIRES", "TTL", "USAGES", "OURS"
    );
    for t in &tokens {
        text.push_str(&format!(
            "{:<8} {:<22} {:<10} {:<24} {:<5} {}\n",
            t.id,
            t.expiration
                .map(token::rfc3339)
                .unwrap_or_else(|| "<never>".into()),
            remaining(t, now),
            t.usages.join(","),
            if t.managed { "yes" } else { "no" },
            t.description.as_deref().unwrap_or("")
        ));
    }
    print_out(&text)
}

fn revoke(kube: &KubeFlags, id: &str, store_args: &StoreArgs) -> Result<ExitCode, Failure> {
    token::validate_id(id)?;
    let target = resolve_target(store_args, false)?;
    let info = runtime()?.block_on(async {
        let connected = connect(&kube.options(), Timeouts::OneShot).await?;
        if let Some(target) = &target {
            let store = target.open().await?;
            if let Some(stored) = store.read().await?
                && stored.token.id() == id
            {
                return Err(Failure::msg(format!(
                    "token {id} is the one {} publishes; nodes would fail to join. Publish a new one first (token create --publish), then revoke {id}",
                    store.describe()
                )));
            }
        }
        Ok::<_, Failure>(token::revoke(&connected.client, id).await?)
    })?;
    eprintln!(
        "revoked bootstrap token {}{}",
        info.id,
        if info.managed {
            ""
        } else {
            " (not created by kubean-karpenter)"
        }
    );
    Ok(ExitCode::SUCCESS)
}

#[derive(clap::Args, Debug)]
pub struct CaHashArgs {
    #[command(flatten)]
    kube: KubeFlags,
    /// Hash this PEM file's first certificate instead of the kubeconfig's CA.
    #[arg(long, conflicts_with_all = ["from_cluster", "kubeconfig", "context"])]
    pem: Option<PathBuf>,
    /// Read the CA from the cluster: the kube-root-ca.crt ConfigMap's ca.crt.
    #[arg(long)]
    from_cluster: bool,
    /// Namespace of the kube-root-ca.crt ConfigMap (every namespace has one).
    #[arg(long, default_value = "kube-system", requires = "from_cluster")]
    namespace: String,
}

pub fn ca_hash(args: CaHashArgs) -> Result<ExitCode, Failure> {
    let hash = match &args.pem {
        Some(path) => kk_live::cahash::from_pem_file(path)?,
        None if args.from_cluster => runtime()?.block_on(async {
            let connected = connect(&args.kube.options(), Timeouts::OneShot).await?;
            Ok::<_, Failure>(
                kk_live::cahash::from_cluster(&connected.client, &args.namespace).await?,
            )
        })?,
        None => runtime()?.block_on(kk_live::cahash::from_kubeconfig(&args.kube.options()))?,
    };
    print_out(&format!("{hash}\n"))
}
