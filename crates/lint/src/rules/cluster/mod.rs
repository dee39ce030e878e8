//! The bundle as a whole: what the cluster needs that no single object provides.

pub mod ccm_cluster_id;
pub mod external_cloud_provider_without_ccm;
