//! Admission: ClusterQueue quota decisions on a snapshot (pure).
