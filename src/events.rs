//! The Events raygate records, as values (pure): the gate's, the admission loop's and the drain's
//! decisions carry them, and the controller's event recorder publishes them.

/// Normal or Warning.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EventType {
    Normal,
    Warning,
}

/// An Event to record on the object a decision is about (a RayService, a Workload, a node or a
/// NodeRollout), or on one of a RayService's child RayClusters.
#[derive(Clone, Debug, PartialEq)]
pub struct Event {
    pub type_: EventType,
    pub reason: &'static str,
    pub message: String,
    /// `Some(child)` for an Event on a child RayCluster of the RayService at hand, `None` for the
    /// object itself.
    pub child: Option<String>,
}
