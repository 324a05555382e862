//! The names quota is kept under, interned to dense ids: ResourceFlavors (with their
//! `nodeLabels`, and flavor names something refers to without the object), resources, and
//! (flavor, resource) pairs, the unit of every quota and usage.
//!
//! Ids are handed out in the order names are first met; the index meets them in name order
//! (flavors, then ClusterQueue and Cohort quotas, then held usage), so nothing depends on the
//! order of the input.

use std::collections::{BTreeMap, HashMap};

use super::ids::{FlavorIx, FrIx, ResourceIx, TiVec};
use crate::types::kueue::PodSetAssignment;

/// A ResourceFlavor (or a flavor name something refers to).
#[derive(Clone, Debug)]
pub(crate) struct FlavorEntry {
    pub name: String,
    pub exists: bool,
    pub node_labels: BTreeMap<String, String>,
}

/// Flavors, resources and (flavor, resource) pairs by id and by name.
#[derive(Clone, Debug, Default)]
pub(crate) struct Catalog {
    pub flavors: TiVec<FlavorIx, FlavorEntry>,
    flavor_ids: HashMap<String, FlavorIx>,
    pub resources: TiVec<ResourceIx, String>,
    resource_ids: HashMap<String, ResourceIx>,
    /// (flavor, resource) of each pair.
    pub frs: TiVec<FrIx, (FlavorIx, ResourceIx)>,
    fr_ids: HashMap<(FlavorIx, ResourceIx), FrIx>,
}

impl Catalog {
    /// The id of a flavor name, interned (as a flavor that does not exist) if new.
    pub fn intern_flavor(&mut self, name: &str) -> FlavorIx {
        if let Some(&id) = self.flavor_ids.get(name) {
            return id;
        }
        let id = self.flavors.push_and_get_key(FlavorEntry {
            name: name.to_string(),
            exists: false,
            node_labels: BTreeMap::new(),
        });
        self.flavor_ids.insert(name.to_string(), id);
        id
    }

    /// The id of a resource name, interned if new.
    pub fn intern_resource(&mut self, name: &str) -> ResourceIx {
        if let Some(&id) = self.resource_ids.get(name) {
            return id;
        }
        let id = self.resources.push_and_get_key(name.to_string());
        self.resource_ids.insert(name.to_string(), id);
        id
    }

    /// The id of a (flavor, resource) pair, interned if new.
    pub fn intern_fr(&mut self, flavor: FlavorIx, resource: ResourceIx) -> FrIx {
        if let Some(&id) = self.fr_ids.get(&(flavor, resource)) {
            return id;
        }
        let id = self.frs.push_and_get_key((flavor, resource));
        self.fr_ids.insert((flavor, resource), id);
        id
    }

    pub fn flavor(&self, name: &str) -> Option<FlavorIx> {
        self.flavor_ids.get(name).copied()
    }

    pub fn resource(&self, name: &str) -> Option<ResourceIx> {
        self.resource_ids.get(name).copied()
    }

    /// The (flavor, resource) id of names, if any quota or held usage mentions the pair.
    pub fn find_fr(&self, flavor: &str, resource: &str) -> Option<FrIx> {
        let f = self.flavor(flavor)?;
        let r = self.resource(resource)?;
        self.fr_ids.get(&(f, r)).copied()
    }

    pub fn flavor_name(&self, fr: FrIx) -> &str {
        &self.flavors[self.frs[fr].0].name
    }

    pub fn resource_name(&self, fr: FrIx) -> &str {
        &self.resources[self.frs[fr].1]
    }

    /// A PodSet assignment's flavors by resource, as flavor ids (unknown flavors left out): what
    /// a replacement keeps of its old slice's flavors.
    pub fn flavor_ids_of(&self, psa: &PodSetAssignment) -> Vec<(String, FlavorIx)> {
        psa.flavors
            .iter()
            .filter_map(|(res, f)| self.flavor(f).map(|id| (res.clone(), id)))
            .collect()
    }
}
