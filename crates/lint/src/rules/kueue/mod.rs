//! Kueue job queues and the NodePools they feed.

pub mod kueue_quota_above_pool_limits;
