//! Kueue job queues and the NodePools they feed.

pub mod quota_above_limits;
