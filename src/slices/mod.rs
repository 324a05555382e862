//! Workload slice chains (pure).
