//! A network's configuration: found by name under `confDir` (`confdir`), or inline in a
//! NetworkAttachmentDefinition and read the way the plugins that run it read it (`inline`); and the
//! runtime capabilities its plugins declare (`capabilities`).

pub mod capabilities;
pub mod confdir;
pub mod inline;
