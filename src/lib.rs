//! raygate: a quota gate for KubeRay RayService upgrades on fixed capacity.
//!
//! The decisions live in pure modules ([`quantity`], [`podsets`]); IO layers call them.

pub mod admission;
pub mod cli;
pub mod controller;
pub mod crdgen;
pub mod dev;
pub mod gate;
pub mod labels;
pub mod manifest;
pub mod podsets;
pub mod quantity;
pub mod slices;

pub use raygate_types as types;
