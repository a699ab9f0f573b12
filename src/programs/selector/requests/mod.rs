//! How networks are asked for: a value that names one network or a list (`CNI_NETWORK_CONFIG`,
//! `defaultNetwork`: `value`), and the networks annotation's elements (`annotation`) with their
//! `cni-args` (`cni_args`).

pub mod annotation;
pub mod cni_args;
pub mod value;
