//! AMIs as AWS publishes them, read-only: the EKS-optimized AL2023 releases from the public SSM
//! parameters (the recommended one and every dated release, for rollbacks), and custom
//! (kubeadm-ready) images from EC2 `DescribeImages` with their creation and deprecation dates.
//!
//! The parameter names and the alias of a release are facts about Karpenter and EKS, kept in
//! `kk_karpenter::ami`; this module only asks AWS.

use aws_config::SdkConfig;
use aws_sdk_ec2::types::Filter;
use kk_karpenter::ami;
use serde_json::{Value, json};

use crate::aws_error::AwsCallError;

/// Which releases: a Kubernetes minor (`1.36`), an EC2 architecture and an AL2023 variant.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EksFlavor {
    pub minor: String,
    pub arch: String,
    pub variant: String,
}

impl EksFlavor {
    fn path(&self) -> String {
        ami::al2023_parameter_path(&self.minor, &self.arch, &self.variant)
    }
}

/// One EKS-optimized AL2023 release.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EksRelease {
    pub flavor: EksFlavor,
    /// `20260827`.
    pub date: String,
    pub image_id: String,
    /// The parameter that holds `image_id`.
    pub parameter: String,
    /// Whether it is the release `recommended/` points at.
    pub recommended: bool,
    /// `1.36.3-20260827`: AWS publishes it for the recommended release only
    /// (`recommended/release_version`); it is the spec's `ami.ssmRelease` form.
    pub release_version: Option<String>,
}

impl EksRelease {
    /// `al2023@v20260827`, the spec's `ami.alias` form.
    pub fn alias(&self) -> String {
        ami::al2023_alias(&self.date)
    }

    pub fn to_json(&self) -> Value {
        json!({
            "kubernetesMinor": self.flavor.minor,
            "arch": self.flavor.arch,
            "variant": self.flavor.variant,
            "release": format!("v{}", self.date),
            "alias": self.alias(),
            "releaseVersion": self.release_version,
            "imageID": self.image_id,
            "parameter": self.parameter,
            "recommended": self.recommended,
        })
    }
}

/// A custom image from `DescribeImages`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CustomImage {
    pub image_id: String,
    pub name: String,
    pub owner: String,
    pub architecture: String,
    pub state: String,
    /// RFC 3339, as EC2 returns it.
    pub creation_date: String,
    /// RFC 3339; `None` when no deprecation is scheduled.
    pub deprecation_time: Option<String>,
    pub tags: Vec<(String, String)>,
}

impl CustomImage {
    pub fn to_json(&self) -> Value {
        json!({
            "imageID": self.image_id,
            "name": self.name,
            "owner": self.owner,
            "architecture": self.architecture,
            "state": self.state,
            "creationDate": self.creation_date,
            "deprecationTime": self.deprecation_time,
            "tags": self.tags.iter().map(|(k, v)| (k.clone(), json!(v))).collect::<serde_json::Map<_, _>>(),
        })
    }
}

/// Why an AMI question got no answer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AmiError {
    // The call error is the source, not hidden: the CLI reads refusal vs outage from it.
    #[error("{0}")]
    Aws(#[from] AwsCallError),
    /// AWS publishes no such parameter (an unknown minor, variant, architecture or release).
    #[error(
        "AWS publishes no parameter {parameter} in this region (check the Kubernetes minor, \
         variant, architecture and release; `ami list` shows the releases)"
    )]
    NotPublished { parameter: String },
}

/// Every published value of the names that exist; a missing name is simply absent.
async fn get_parameters(
    ssm: &aws_sdk_ssm::Client,
    names: &[String],
) -> Result<Vec<(String, String)>, AwsCallError> {
    let out = ssm
        .get_parameters()
        .set_names(Some(names.to_vec()))
        .send()
        .await
        .map_err(|e| AwsCallError::from_sdk("ssm:GetParameters", &e))?;
    Ok(out
        .parameters()
        .iter()
        .filter_map(|p| Some((p.name()?.to_owned(), p.value()?.to_owned())))
        .collect())
}

/// The release `recommended/` points at: its date, image and `release_version`.
pub async fn recommended(sdk: &SdkConfig, flavor: &EksFlavor) -> Result<EksRelease, AmiError> {
    let ssm = &aws_sdk_ssm::Client::new(sdk);
    let base = format!("{}/recommended", flavor.path());
    let names = [
        format!("{base}/release_version"),
        format!("{base}/image_id"),
    ];
    let found = get_parameters(ssm, &names).await?;
    let value = |name: &str| {
        found
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.clone())
            .ok_or_else(|| AmiError::NotPublished {
                parameter: name.to_owned(),
            })
    };
    let release_version = value(&names[0])?;
    let image_id = value(&names[1])?;
    let date = release_version
        .rsplit_once('-')
        .map(|(_, d)| d.to_owned())
        .filter(|d| ami::is_release_date(d))
        .ok_or_else(|| AmiError::NotPublished {
            parameter: format!("{} (unreadable value {release_version:?})", names[0]),
        })?;
    Ok(EksRelease {
        flavor: flavor.clone(),
        parameter: ami::al2023_dated_parameter(&flavor.minor, &flavor.arch, &flavor.variant, &date),
        date,
        image_id,
        recommended: true,
        release_version: Some(release_version),
    })
}

/// Every dated release under the flavor's path (`get-parameters-by-path --recursive`), newest
/// first, the recommended one marked.
pub async fn releases(sdk: &SdkConfig, flavor: &EksFlavor) -> Result<Vec<EksRelease>, AmiError> {
    let recommended = recommended(sdk, flavor).await?;
    let ssm = aws_sdk_ssm::Client::new(sdk);
    let mut found = Vec::new();
    let mut pages = ssm
        .get_parameters_by_path()
        .path(flavor.path())
        .recursive(true)
        .into_paginator()
        .send();
    while let Some(page) = pages.next().await {
        let page = page.map_err(|e| AwsCallError::from_sdk("ssm:GetParametersByPath", &e))?;
        for p in page.parameters() {
            let (Some(name), Some(value)) = (p.name(), p.value()) else {
                continue;
            };
            let Some(date) = ami::release_date_of_parameter(name) else {
                continue;
            };
            let is_recommended = date == recommended.date;
            found.push(EksRelease {
                flavor: flavor.clone(),
                date: date.to_owned(),
                image_id: value.to_owned(),
                parameter: name.to_owned(),
                recommended: is_recommended,
                release_version: is_recommended
                    .then(|| recommended.release_version.clone())
                    .flatten(),
            });
        }
    }
    found.sort_by(|a, b| b.date.cmp(&a.date));
    found.dedup_by(|a, b| a.date == b.date);
    Ok(found)
}

/// One dated release (`20260827`), or the recommended one when `date` is `None`.
pub async fn resolve(
    sdk: &SdkConfig,
    flavor: &EksFlavor,
    date: Option<&str>,
) -> Result<EksRelease, AmiError> {
    let recommended = recommended(sdk, flavor).await?;
    let Some(date) = date else {
        return Ok(recommended);
    };
    if date == recommended.date {
        return Ok(recommended);
    }
    let parameter = ami::al2023_dated_parameter(&flavor.minor, &flavor.arch, &flavor.variant, date);
    let ssm = aws_sdk_ssm::Client::new(sdk);
    let found = get_parameters(&ssm, std::slice::from_ref(&parameter)).await?;
    let Some((_, image_id)) = found.into_iter().next() else {
        return Err(AmiError::NotPublished { parameter });
    };
    Ok(EksRelease {
        flavor: flavor.clone(),
        date: date.to_owned(),
        image_id,
        parameter,
        recommended: false,
        release_version: None,
    })
}

/// What to ask `DescribeImages` for: owners (`self`, an account id, `amazon`), a name pattern
/// (`*` and `?` wildcards) and tags that must all match.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ImageQuery {
    pub owners: Vec<String>,
    pub name: Option<String>,
    pub tags: Vec<(String, String)>,
}

/// Custom images matching the query, deprecated ones included (a pool may still run one),
/// newest first.
pub async fn custom_images(
    sdk: &SdkConfig,
    query: &ImageQuery,
) -> Result<Vec<CustomImage>, AmiError> {
    let ec2 = aws_sdk_ec2::Client::new(sdk);
    let mut filters = Vec::new();
    if let Some(name) = &query.name {
        filters.push(Filter::builder().name("name").values(name).build());
    }
    for (key, value) in &query.tags {
        filters.push(
            Filter::builder()
                .name(format!("tag:{key}"))
                .values(value)
                .build(),
        );
    }
    let out = ec2
        .describe_images()
        .set_owners((!query.owners.is_empty()).then(|| query.owners.clone()))
        .set_filters((!filters.is_empty()).then_some(filters))
        .include_deprecated(true)
        .send()
        .await
        .map_err(|e| AwsCallError::from_sdk("ec2:DescribeImages", &e))?;
    let mut images: Vec<CustomImage> = out
        .images()
        .iter()
        .map(|i| CustomImage {
            image_id: i.image_id().unwrap_or_default().to_owned(),
            name: i.name().unwrap_or_default().to_owned(),
            owner: i.owner_id().unwrap_or_default().to_owned(),
            architecture: i
                .architecture()
                .map(|a| a.as_str().to_owned())
                .unwrap_or_default(),
            state: i.state().map(|s| s.as_str().to_owned()).unwrap_or_default(),
            creation_date: i.creation_date().unwrap_or_default().to_owned(),
            deprecation_time: i.deprecation_time().map(str::to_owned),
            tags: {
                let mut tags: Vec<(String, String)> = i
                    .tags()
                    .iter()
                    .map(|t| {
                        (
                            t.key().unwrap_or_default().to_owned(),
                            t.value().unwrap_or_default().to_owned(),
                        )
                    })
                    .collect();
                tags.sort();
                tags
            },
        })
        .collect();
    images.sort_by(|a, b| {
        b.creation_date
            .cmp(&a.creation_date)
            .then_with(|| a.image_id.cmp(&b.image_id))
    });
    Ok(images)
}
