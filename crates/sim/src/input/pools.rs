//! NodePools and EC2NodeClasses: requirements, taints, limits, and the kubelet settings a
//! NodeClass gives its pools.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1 as core;
use kk_catalog::KubeletOverrides;
use kk_model::karpenter::{EC2NodeClass, NodePool};
use kk_model::yaml::Pos;
use serde_json::Value;

use super::InputError;
use super::read::{Ctx, join, quantity, taint, value_quantity};
use crate::model::Pool;
use crate::req::{Operator, Requirement, Requirements};

pub(super) fn read_node_class(
    ctx: &mut Ctx,
    prefix: &str,
    value: Value,
) -> Option<(String, KubeletOverrides)> {
    let nc: EC2NodeClass = ctx.typed(value)?;
    let name = nc.metadata.name.clone().unwrap_or_default();
    let mut o = match &nc.spec.kubelet {
        Some(k) => match KubeletOverrides::from_kubelet(k) {
            Ok(o) => o,
            Err(e) => {
                ctx.err(
                    &join(prefix, &format!("spec.kubelet.{}", e.field)),
                    e.message,
                );
                return None;
            }
        },
        None => KubeletOverrides::default(),
    };
    let bdms = &nc.spec.block_device_mappings;
    let root = bdms
        .iter()
        .position(|b| b.root_volume == Some(true))
        .or_else(|| {
            bdms.iter()
                .position(|b| b.device_name.as_deref() == Some("/dev/xvda"))
        });
    if let Some(i) = root
        && let Some(size) = bdms[i].ebs.as_ref().and_then(|e| e.volume_size.as_ref())
    {
        let f = join(
            prefix,
            &format!("spec.blockDeviceMappings[{i}].ebs.volumeSize"),
        );
        o.ephemeral_storage_bytes = quantity(ctx, &f, "ephemeral-storage", size);
    }
    o.instance_store_raid0 = nc.spec.instance_store_policy.as_deref() == Some("RAID0");
    Some((name, o))
}

pub(super) fn read_pool(ctx: &mut Ctx, prefix: &str, value: Value) -> Option<(Pool, String)> {
    let np: NodePool = ctx.typed(value)?;
    let name = np.metadata.name.clone().unwrap_or_default();
    if name.is_empty() {
        ctx.err(&join(prefix, "metadata.name"), "a NodePool needs a name");
        return None;
    }
    if let Some(replicas) = np.spec.replicas
        && replicas < 0
    {
        ctx.err(&join(prefix, "spec.replicas"), "must not be negative");
        return None;
    }
    let spec = &np.spec.template.spec;
    let mut requirements = Requirements::new();
    let mut ok = true;
    for (i, r) in spec.requirements.iter().enumerate() {
        let f = join(prefix, &format!("spec.template.spec.requirements[{i}]"));
        let op = match Operator::parse(&r.operator) {
            Ok(op) => op,
            Err(e) => {
                ctx.err(&format!("{f}.operator"), e);
                ok = false;
                continue;
            }
        };
        let req = match Requirement::new(op, &r.values) {
            Ok(req) => req,
            Err(e) => {
                ctx.err(&format!("{f}.values"), e);
                ok = false;
                continue;
            }
        };
        let min = match r.min_values {
            None => None,
            Some(n) if n >= 1 => Some(n as usize),
            Some(_) => {
                ctx.err(&format!("{f}.minValues"), "must be at least 1");
                ok = false;
                continue;
            }
        };
        requirements.add(&r.key, req.with_min_values(min));
    }
    let mut pool_taints = |list: &[core::Taint], field: &str| {
        let mut out = Vec::new();
        for (i, t) in list.iter().enumerate() {
            match taint(
                ctx,
                &join(prefix, &format!("spec.template.spec.{field}[{i}]")),
                t,
            ) {
                Some(t) => out.push(t),
                None => ok = false,
            }
        }
        out
    };
    let taints = pool_taints(&spec.taints, "taints");
    let startup_taints = pool_taints(&spec.startup_taints, "startupTaints");
    let mut limits = BTreeMap::new();
    for (k, v) in &np.spec.limits {
        let f = join(prefix, &format!("spec.limits[{k}]"));
        match value_quantity(v) {
            Some(text) => match quantity(ctx, &f, k, &text) {
                Some(n) => {
                    limits.insert(k.clone(), n);
                }
                None => ok = false,
            },
            None => {
                ctx.err(&f, "a limit is a quantity (\"6\", 100, 1000Gi)");
                ok = false;
            }
        }
    }
    let budget =
        match crate::budget::read_annotations(&np.metadata.annotations.clone().unwrap_or_default())
        {
            Ok(budget) => budget,
            Err((key, message)) => {
                ctx.err(
                    &join(prefix, &format!("metadata.annotations[{key}]")),
                    message,
                );
                ok = false;
                None
            }
        };
    let labels_map = np
        .spec
        .template
        .metadata
        .as_ref()
        .map(|m| m.labels.clone())
        .unwrap_or_default();
    if !ok {
        return None;
    }
    let class = spec.node_class_ref.name.clone();
    Some((
        Pool {
            name,
            weight: np.spec.weight.unwrap_or(0),
            node_class: class.clone(),
            requirements,
            labels: labels_map,
            taints,
            startup_taints,
            limits,
            kubelet: KubeletOverrides::default(),
            replicas: np.spec.replicas,
            capacity_overlay: BTreeMap::new(),
            budget,
            budget_account: None,
        },
        class,
    ))
}

/// Each pool gets its NodeClass's kubelet settings; a NodePool name given twice is an error.
pub(super) fn attach_classes(
    pools: Vec<(Pool, String, String, Pos)>,
    classes: &BTreeMap<String, KubeletOverrides>,
    errors: &mut Vec<InputError>,
    warnings: &mut Vec<String>,
) -> Vec<Pool> {
    let mut seen: BTreeSet<String> = BTreeSet::new();
    let mut out_pools = Vec::new();
    for (mut pool, class, file, pos) in pools {
        if !seen.insert(pool.name.clone()) {
            errors.push(InputError {
                file,
                pos: Some(pos),
                field: "metadata.name".into(),
                message: format!("NodePool {} is defined twice", pool.name),
            });
            continue;
        }
        match classes.get(&class) {
            Some(o) => pool.kubelet = o.clone(),
            None => warnings.push(format!(
                "nodepool {}: EC2NodeClass {class} not among the inputs; assuming Karpenter's default kubelet settings",
                pool.name
            )),
        }
        out_pools.push(pool);
    }
    out_pools
}
