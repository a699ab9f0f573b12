//! The netns suite's own support (what it shares with other suites is in tests/testkit): the CNI
//! driver that calls plugins as a runtime does (`driver`), the netns node every selector test runs
//! on, with its fake API server and its pods (`node`), the node agent's answers (`agent`), a LAN
//! beside the node (`lan`), the seeded randomness of the soak and crash tests (`rng`), and the CNI
//! versions the plugin tests run their cases over (`versions`).

pub mod agent;
pub mod driver;
pub mod lan;
pub mod node;
pub mod rng;
pub mod versions;
