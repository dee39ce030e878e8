//! A pool's node-class fields: AMI, instance selection and root volume.

use super::*;

pub(super) fn ami(p: &mut Problems, at: &FieldPath, ami: &Ami, pool: &Pool) {
    let set = [
        ami.id.is_some(),
        ami.alias.is_some(),
        ami.ssm_release.is_some(),
    ]
    .iter()
    .filter(|b| **b)
    .count();
    if set != 1 {
        p.push((
            at.clone(),
            format!("set exactly one of id, alias, ssmRelease (found {set})"),
        ));
    }
    if let Some(id) = &ami.id
        && !AMI_ID.is_match(id)
    {
        p.push((
            at.key("id"),
            format!("{id:?} is not an AMI ID like ami-0123456789abcdef0"),
        ));
    }
    if let Some(alias) = &ami.alias {
        match AMI_ALIAS.captures(alias) {
            None => p.push((at.key("alias"), format!("{alias:?} is not family@version"))),
            Some(c) if !AMI_ALIAS_FAMILIES.contains(&&c[1]) => p.push((
                at.key("alias"),
                format!(
                    "unknown AMI family {:?} (one of al2, al2023, bottlerocket)",
                    &c[1]
                ),
            )),
            Some(c) if &c[2] != "latest" && !c[2].starts_with('v') => p.push((
                at.key("alias"),
                format!(
                    "version {:?} must be latest or v<date> like v20260827",
                    &c[2]
                ),
            )),
            Some(_) => {}
        }
    }
    crate::iam::join_method(p, at, ami, pool);
    if let Some(release) = &ami.ssm_release {
        if !SSM_RELEASE.is_match(release) {
            p.push((
                at.key("ssmRelease"),
                format!("{release:?} is not an EKS AMI release like 1.36.3-20260827"),
            ));
        }
        if pool.instances.arch.len() != 1 {
            p.push((
                at.key("ssmRelease"),
                "an SSM release names one architecture: set instances.arch to one value".into(),
            ));
        }
    }
}

pub(super) fn instances(p: &mut Problems, at: &FieldPath, inst: &Instances) {
    if inst.families.is_empty() && inst.types.is_empty() && inst.sizes.is_empty() {
        p.push((
            at.clone(),
            "no instance constraints: set families, sizes or types (an open pool may launch anything, GPU and metal included)".into(),
        ));
    }
    for (i, t) in inst.types.iter().enumerate() {
        if !INSTANCE_TYPE.is_match(t) {
            p.push((
                at.key("types").index(i),
                format!("{t:?} is not an instance type like m6i.large"),
            ));
        } else if !inst.families.is_empty() {
            let family = t.split('.').next().unwrap_or_default();
            if !inst.families.iter().any(|f| f == family) {
                p.push((
                    at.key("types").index(i),
                    format!(
                        "{t:?} is not in families {:?}: the requirements would exclude it",
                        inst.families
                    ),
                ));
            }
        }
    }
    for (field, list) in [("families", &inst.families), ("sizes", &inst.sizes)] {
        for (i, v) in list.iter().enumerate() {
            if v.is_empty()
                || !v
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
            {
                p.push((
                    at.key(field).index(i),
                    format!("{v:?} is not a valid value"),
                ));
            }
        }
    }
    if inst.capacity_types.is_empty() {
        p.push((at.key("capacityTypes"), "at least one capacity type".into()));
    }
    for (i, c) in inst.capacity_types.iter().enumerate() {
        if !CAPACITY_TYPES.contains(&c.as_str()) {
            p.push((
                at.key("capacityTypes").index(i),
                format!("{c:?} must be spot, on-demand or reserved"),
            ));
        }
    }
    if inst.arch.is_empty() {
        p.push((at.key("arch"), "at least one architecture".into()));
    }
    for (i, a) in inst.arch.iter().enumerate() {
        if !ARCHES.contains(&a.as_str()) {
            p.push((
                at.key("arch").index(i),
                format!("{a:?} must be amd64 or arm64"),
            ));
        }
    }
    if let Some(m) = inst.min_values
        && !(1..=50).contains(&m)
    {
        p.push((at.key("minValues"), "must be between 1 and 50".into()));
    }
}

pub(super) fn root_volume(p: &mut Problems, at: &FieldPath, v: &RootVolume) {
    match Quantity::parse(&v.size) {
        Ok(q) if q.milli > 0 => {}
        Ok(_) => p.push((at.key("size"), "must be positive".into())),
        Err(e) => p.push((at.key("size"), e.to_string())),
    }
    if !VOLUME_TYPES.contains(&v.volume_type.as_str()) {
        p.push((
            at.key("type"),
            format!("{:?} is not an EBS volume type", v.volume_type),
        ));
    }
    if v.iops.is_some() && !["gp3", "io1", "io2"].contains(&v.volume_type.as_str()) {
        p.push((
            at.key("iops"),
            "iops applies to gp3, io1 and io2 only".into(),
        ));
    }
    if let Some(t) = v.throughput {
        if v.volume_type != "gp3" {
            p.push((
                at.key("throughput"),
                "throughput applies to gp3 only".into(),
            ));
        } else if !(125..=2000).contains(&t) {
            p.push((
                at.key("throughput"),
                "gp3 throughput is 125–2000 MiB/s".into(),
            ));
        }
    }
    if let Some(iops) = v.iops
        && !(100..=256_000).contains(&iops)
    {
        p.push((at.key("iops"), "iops must be 100–256000".into()));
    }
    if !v.device_name.starts_with("/dev/") {
        p.push((
            at.key("deviceName"),
            "must be a device path like /dev/xvda".into(),
        ));
    }
}
