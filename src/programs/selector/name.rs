//! The selector's name: its plugin type in a conflist, the name of the binary in `binDir` (every
//! built-in plugin is a link to it) and the component of the events it reports.

pub const NAME: &str = "yh-genie";
