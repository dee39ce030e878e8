//! Kubean inventories and Kubespray variables (the YAML inside Kubean's ConfigMaps).

pub mod kubespray_join_vars;
